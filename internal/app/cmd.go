package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// RunFunc runs the collector with completed, validated options.
type RunFunc func(ctx context.Context, o *RunOptions) error

// PluginName is the name under which kubectl runs kgc as a plugin: the
// same binary, installed (or linked) as kubectl-kgc somewhere on $PATH,
// answers `kubectl kgc explain|preview|tree|stuck`.
const PluginName = "kubectl-kgc"

// IsPlugin reports whether argv0 (os.Args[0]) names the kubectl plugin.
func IsPlugin(argv0 string) bool {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	return base == PluginName
}

// Main runs kgc with the process's argv (argv[0] included) and returns the
// exit code: as the kubectl plugin when argv[0] names it, else as kgc.
func Main(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	defer flushLogs()
	if len(argv) > 0 && IsPlugin(argv[0]) {
		return execute(ctx, NewPluginCommand(), argv[1:], stdout, stderr)
	}
	return Execute(ctx, argv[min(1, len(argv)):], stdout, stderr)
}

// Execute runs kgc with args and returns the process exit code.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return execute(ctx, NewRootCommand(ctx, Run), args, stdout, stderr)
}

func execute(ctx context.Context, cmd *cobra.Command, args []string, stdout, stderr io.Writer) int {
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "Error:", err)
		return 1
	}
	return 0
}

// NewRootCommand returns `kgc` with its subcommands; run is what `kgc run` runs.
func NewRootCommand(ctx context.Context, run RunFunc) *cobra.Command {
	root := &cobra.Command{
		Use:           "kgc",
		Short:         "kgc is a standalone Kubernetes garbage collector",
		Long:          "kgc turns metadata.ownerReferences and the orphan / foregroundDeletion finalizers into cascading deletion, like kube-controller-manager's garbage collector, as its own program.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(NewRunCommand(run), NewVersionCommand(), newBreakerCommand(InspectDeps{}), newRelinkCommand(InspectDeps{}))
	AddInspectCommands(root, InspectDeps{})
	return root
}

// NewPluginCommand returns `kubectl kgc`: the read-only commands, with
// kubectl's --kubeconfig, --context and -n/--namespace (every inspection
// command takes them).
func NewPluginCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kgc",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kgc"},
		Short:         "Ask kgc's garbage-collection rules about the cluster: explain, preview, tree, stuck",
		Long:          "kubectl kgc answers garbage-collection questions with kgc's semantics (kube-controller-manager's collector's): why an object is not deleted (explain), what a deletion would remove (preview delete), what owns what (tree), and which deletions are stuck and why (stuck). It only reads.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(NewVersionCommand())
	AddInspectCommands(root, InspectDeps{})
	var examples func(*cobra.Command)
	examples = func(c *cobra.Command) {
		c.Example = strings.ReplaceAll(strings.ReplaceAll(c.Example, "kubectl kgc ", "kgc "), "  kgc ", "  kubectl kgc ")
		for _, sub := range c.Commands() {
			examples(sub)
		}
	}
	examples(root)
	return root
}

// NewRunCommand returns `kgc run`.
func NewRunCommand(run RunFunc) *cobra.Command {
	o := NewRunOptions()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the garbage collector against an API server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.LeaderElection.Complete(cmd.Flags(), o.Kubeconfig)
			o.Shadow.Complete(cmd.Flags(), &o.LeaderElection, &o.Breaker)
			o.gcPercentChanged = cmd.Flags().Changed("gc-percent")
			if err := o.Complete(); err != nil {
				return err
			}
			if errs := o.Validate(); len(errs) > 0 {
				return fmt.Errorf("%w: %w", errValidation, errors.Join(errs...))
			}
			return run(cmd.Context(), o)
		},
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// RestConfig loads the client config: --kubeconfig, then $KUBECONFIG and
// ~/.kube/config, then the in-cluster service account.
func (o *RunOptions) RestConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	if o.Master != "" {
		overrides.ClusterInfo.Server = o.Master
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading client config: %w", err)
	}
	// A negative QPS reaches client-go as it is: no rate limiter.
	cfg.QPS, cfg.Burst, cfg.RateLimiter = o.KubeAPIQPS, o.KubeAPIBurst, nil
	if o.KubeAPIContentType != "" {
		cfg.ContentType = o.KubeAPIContentType
	}
	return cfg, nil
}

// writeHistorySize maps --write-history-size (0: none) to
// kgc.Options.WriteHistorySize (0: the default, negative: none).
func writeHistorySize(flag int) int {
	if flag == 0 {
		return -1
	}
	return flag
}

// LibraryOptions returns the library options `kgc run` collects with, for
// completed options: its collector, safety holds (the deletion breaker on
// the leader-election Lease, the restore-signature hold, the orphan
// journal) included. The metrics registry and the queues' provider of
// kube-controller-manager's series are the process's and are left to the
// caller. Run builds its collector from these, and so does the
// side-by-side benchmark, so that what it measures is what `kgc run` runs.
func (o *RunOptions) LibraryOptions() kgc.Options {
	return kgc.Options{
		Workers:               o.ConcurrentGCSyncs,
		MaxWritesInFlight:     o.MaxWritesInFlight,
		UnlistedHold:          o.UnlistedHold,
		StuckThreshold:        o.StuckThreshold,
		IgnoredResources:      o.Ignored,
		DiscoveryResyncPeriod: o.DiscoveryResyncPeriod,
		QPS:                   o.KubeAPIQPS,
		Burst:                 o.KubeAPIBurst,
		Profiling:             o.Observability.Profiling,
		EventComponent:        o.Observability.EventComponent,
		NamespaceLifecycle:    o.NamespaceLifecycle,
		WriteHistorySize:      writeHistorySize(o.WriteHistorySize),
		Breaker:               o.Breaker.lib(o.LeaderElection),
		HoldRestored:          o.Breaker.HoldRestored,
		OrphanJournal:         o.orphanJournal(),
		PagedLists:            !o.StreamingLists,
		DryRun:                o.Shadow.DryRun,
		ShadowWindow:          o.Shadow.Window,
	}
}

// Run is `kgc run`: the collector plus its HTTP server, until ctx is done.
func Run(ctx context.Context, o *RunOptions) error {
	// First: everything after logs in the configured format.
	if err := applyLogging(o.Observability.Logs, os.Stderr, os.Stdout); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	if p := o.Observability.ApplyGCPercent(o.gcPercentChanged, os.Getenv); p != -2 {
		logger.V(1).Info("Set the GC target percentage", "gcPercent", p)
	}
	o.Observability.applyContentionProfiling()
	o.KCM.logIgnored(logger)
	cfg, err := o.RestConfig()
	if err != nil {
		return err
	}
	lib := o.LibraryOptions()
	lib.Registerer, lib.QueueMetrics = newRegistry(), kcmQueueMetrics()
	c, err := kgc.New(cfg, lib)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := &standby{enabled: o.LeaderElection.LeaderElect}
	errc := make(chan error, 3)
	srv, err := o.Serving.start(ctx, st.readiness(c.Handler()), errc)
	if err != nil {
		return err
	}
	// The servers stop with ctx; Run returns once they have.
	defer srv.wait()
	defer cancel()
	// The HTTP server runs on standbys too; the collector only while leading.
	go func() { errc <- runWithLeaderElection(ctx, cfg, o.LeaderElection, st.collect(c.Run)) }()
	select {
	case err := <-errc:
		cancel()
		return err
	case <-ctx.Done():
		return <-errc
	}
}
