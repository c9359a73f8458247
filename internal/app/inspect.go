package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	kgcdiscovery "github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/rules"
)

// InspectDeps lets embedders and tests adjust how the inspection commands
// reach the cluster.
type InspectDeps struct {
	// WrapConfig, when set, is applied to the client config before use
	// (tests wrap the transport to count requests).
	WrapConfig func(*rest.Config)
	// HTTPClient for --server; http.DefaultClient with a timeout if nil.
	HTTPClient *http.Client
}

// AddInspectCommands registers `kgc explain`, `kgc preview delete`,
// `kgc tree` and `kgc stuck` on root.
func AddInspectCommands(root *cobra.Command, deps InspectDeps) {
	root.AddCommand(newExplainCommand(deps), newPreviewCommand(deps), newTreeCommand(deps), newStuckCommand(deps))
}

// inspectOptions are the flags every inspection command shares.
type inspectOptions struct {
	kubeconfig string
	context    string
	namespace  string
	server     string
	output     string
	timeout    time.Duration
}

func (o *inspectOptions) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Defaults to $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.")
	fs.StringVar(&o.context, "context", "", "The kubeconfig context to use (as kubectl's --context). Defaults to the current context.")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "Namespace of the object. Defaults to the kubeconfig context's namespace, else \"default\".")
	fs.StringVar(&o.server, "server", "", "Ask a running kgc (its --http-address URL, e.g. http://127.0.0.1:10258) instead of reading the API server.")
	fs.StringVarP(&o.output, "output", "o", "text", "Output format: text or json.")
	fs.DurationVar(&o.timeout, "request-timeout", 30*time.Second, "Timeout of each request to the API server or kgc.")
}

// clientConfig loads the client config like `kgc run`: --kubeconfig, then
// $KUBECONFIG and ~/.kube/config, then the in-cluster service account;
// context, when set, picks the kubeconfig's context (kubectl's --context).
func clientConfig(kubeconfig, context string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
}

func (o *inspectOptions) validate() error {
	switch o.output {
	case "text", "json":
		return nil
	}
	return fmt.Errorf("--output %q: want text or json", o.output)
}

// targetNamespace is -n, else the kubeconfig context's namespace, else
// "default".
func (o *inspectOptions) targetNamespace(cc clientcmd.ClientConfig) string {
	if o.namespace != "" {
		return o.namespace
	}
	if n, _, err := cc.Namespace(); err == nil && n != "" {
		return n
	}
	return metav1.NamespaceDefault
}

// view builds the View the command reads from, and the namespace to use.
func (o *inspectOptions) view(deps InspectDeps) (inspect.View, string, error) {
	if err := o.validate(); err != nil {
		return nil, "", err
	}
	cc := clientConfig(o.kubeconfig, o.context)
	ns := o.targetNamespace(cc)
	if o.server != "" {
		hc := deps.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: o.timeout}
		}
		sv, err := inspect.NewServerView(o.server, hc)
		if err != nil {
			return nil, "", err
		}
		if o.kubeconfig != "" || o.context != "" {
			// With an explicit kubeconfig or context, short names and
			// resource names resolve like kubectl's (and kinds no API
			// serves are recognized as such).
			if cfg, err := cc.ClientConfig(); err == nil {
				o.wrap(cfg, deps)
				if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
					sv.Mapper = mapperFor(dc)
				}
			}
		}
		return sv, ns, nil
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading client config: %w", err)
	}
	o.wrap(cfg, deps)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	ignored := map[schema.GroupResource]struct{}{}
	for _, gr := range kgcdiscovery.DefaultIgnored() {
		ignored[gr] = struct{}{}
	}
	// Groups that fail discovery are left out; what they hold cannot be
	// read anyway.
	found, _, err := kgcdiscovery.Deletable(dc, ignored)
	if err != nil && len(found) == 0 {
		return nil, "", fmt.Errorf("discovering resources: %w", err)
	}
	rs := make([]kgcdiscovery.Resource, 0, len(found))
	for _, r := range found {
		rs = append(rs, r)
	}
	return inspect.NewLiveView(mapperFor(dc), mc, rs), ns, nil
}

func (o *inspectOptions) wrap(cfg *rest.Config, deps InspectDeps) {
	cfg.Timeout = o.timeout
	// Listing every resource to find dependents would print the apiserver's
	// deprecation warnings (v1 Endpoints, …) over the answer.
	cfg.WarningHandler = rest.NoWarnings{}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	if deps.WrapConfig != nil {
		deps.WrapConfig(cfg)
	}
}

func mapperFor(dc discovery.DiscoveryInterface) meta.RESTMapper {
	cached := memory.NewMemCacheClient(dc)
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
}

// lookup resolves the command's object argument(s). When the object
// cannot be found, it still returns the view it asked.
func (o *inspectOptions) lookup(ctx context.Context, deps InspectDeps, args []string) (inspect.View, *inspect.Object, error) {
	kind, name, err := inspect.ParseTarget(args)
	if err != nil {
		return nil, nil, err
	}
	v, ns, err := o.view(deps)
	if err != nil {
		return nil, nil, err
	}
	obj, err := v.Lookup(ctx, kind, ns, name)
	if err != nil {
		return v, nil, err // the view, for explainGone
	}
	return v, obj, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func notSyncedWarning(cmd *cobra.Command, v inspect.View) {
	if lv, ok := v.(*inspect.LiveView); ok {
		for _, w := range lv.Warnings {
			fmt.Fprintln(cmd.ErrOrStderr(), "Warning: the answer may be incomplete:", w)
		}
	}
	if sv, ok := v.(*inspect.ServerView); ok && !sv.Synced {
		fmt.Fprintln(cmd.ErrOrStderr(), "Warning: kgc had not synced its monitors yet; its graph may be missing objects")
	}
}

func newExplainCommand(deps InspectDeps) *cobra.Command {
	o := &inspectOptions{}
	cmd := &cobra.Command{
		Use:   "explain KIND/NAME",
		Short: "Why is this object not deleted (or why will it be)?",
		Long: "Explain classifies each ownerReference of an object (solid, waiting for a foreground deletion, dangling, unresolvable, invalid) " +
			"and says whether kgc will delete it, remove references, orphan its dependents or leave it, and why. For an object in " +
			"Foreground deletion it lists the blocking dependents it waits for, recursively, with their finalizers. " +
			"It reads object metadata from the API server, or asks a running kgc with --server. It never writes. " +
			"With --server, for an object that no longer exists it answers from kgc's record of its writes: when kgc deleted it, " +
			"and why (which owner was gone and how kgc knew, the policy, the preconditions).",
		Example: "  kgc explain deployment/web -n shop\n  kgc explain rs web-5d4f -n shop --server http://127.0.0.1:10258\n  kgc explain pod/web-5d4f-x2x9z -n shop --server http://127.0.0.1:10258   # deleted: when and why",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, obj, err := o.lookup(cmd.Context(), deps, args)
			if errors.Is(err, inspect.ErrNotFound) && o.server != "" {
				// Gone: what did kgc write to it, and why?
				return o.explainGone(cmd, v, args, err)
			}
			if err != nil {
				return err
			}
			e, err := inspect.Explain(cmd.Context(), rules.Policy{}, v, obj)
			if err != nil {
				return err
			}
			if o.server != "" && e.Decision.Verdict == inspect.VerdictDelete {
				// Decided for deletion: does the running kgc hold it?
				if r, err := fetchHolds(cmd.Context(), deps, o.server, o.timeout); err == nil {
					e.Hold = inspect.HoldOf(r, obj.UID)
				}
			}
			if sv, ok := v.(*inspect.ServerView); ok {
				// A kgc in shadow mode: its disagreements about it.
				if e.Shadow, err = sv.ShadowDisagreements(cmd.Context(), obj.UID); err != nil {
					return err
				}
			}
			notSyncedWarning(cmd, v)
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), e)
			}
			return inspect.WriteExplanation(cmd.OutOrStdout(), e)
		},
	}
	o.addFlags(cmd)
	return cmd
}

// explainGone answers explain for an object kgc's graph does not hold,
// from the kgc's record of its writes; notFound is the lookup's error,
// returned when kgc has no record either.
func (o *inspectOptions) explainGone(cmd *cobra.Command, v inspect.View, args []string, notFound error) error {
	sv, ok := v.(*inspect.ServerView)
	if !ok {
		return notFound
	}
	kind, name, err := inspect.ParseTarget(args)
	if err != nil {
		return err
	}
	g, err := inspect.ExplainGone(cmd.Context(), sv, kind, o.targetNamespace(clientConfig(o.kubeconfig, o.context)), name)
	switch {
	case errors.Is(err, inspect.ErrNoHistory):
		return fmt.Errorf("%w; and %w", notFound, err)
	case err != nil:
		return err
	case g.Object == nil:
		return fmt.Errorf("%w; %s", notFound, g.Summary)
	}
	if o.output == "json" {
		return writeJSON(cmd.OutOrStdout(), g)
	}
	return inspect.WriteGone(cmd.OutOrStdout(), g)
}

func parseCascade(s string) (metav1.DeletionPropagation, error) {
	switch strings.ToLower(s) {
	case "background", "true":
		return metav1.DeletePropagationBackground, nil
	case "foreground":
		return metav1.DeletePropagationForeground, nil
	case "orphan", "false":
		return metav1.DeletePropagationOrphan, nil
	}
	return "", fmt.Errorf("--cascade %q: want background, foreground or orphan", s)
}

func newPreviewCommand(deps InspectDeps) *cobra.Command {
	parent := &cobra.Command{
		Use:   "preview",
		Short: "Dry runs of what an operation would do",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("preview what? try: kgc preview delete KIND/NAME")
		},
	}
	o := &inspectOptions{}
	var cascade string
	cmd := &cobra.Command{
		Use:   "delete KIND/NAME",
		Short: "What will deleting this object remove? (dry run; changes nothing)",
		Long: "Preview simulates deleting an object with the apiserver's and kgc's semantics from the current state: every object " +
			"that would be deleted or orphaned, level by level in the order it would happen, and what would block (finalizers no " +
			"collector handles, objects kept by another live owner, blockOwnerDeletion waits). It only reads. Without --cascade it " +
			"assumes background, like kubectl (note that the apiserver defaults some kinds, e.g. a v1 Job or ReplicationController " +
			"deleted without options, to orphan).",
		Example: "  kgc preview delete deployment/web -n shop --cascade=foreground",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			policy, err := parseCascade(cascade)
			if err != nil {
				return err
			}
			v, obj, err := o.lookup(cmd.Context(), deps, args)
			if err != nil {
				return err
			}
			p, err := inspect.PreviewDelete(cmd.Context(), rules.Policy{}, v, obj, policy)
			if err != nil {
				return err
			}
			notSyncedWarning(cmd, v)
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), p)
			}
			return inspect.WritePreview(cmd.OutOrStdout(), p)
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&cascade, "cascade", "background", "Deletion propagation to simulate: background, foreground or orphan.")
	parent.AddCommand(cmd)
	return parent
}

func newTreeCommand(deps InspectDeps) *cobra.Command {
	o := &inspectOptions{}
	cmd := &cobra.Command{
		Use:     "tree KIND/NAME",
		Short:   "What owns what? The object's owners above, its dependents below",
		Long:    "Tree prints the ownership tree around an object: its owners (recursively) above, the object, and its dependents (recursively) below, with state markers (DELETING, WAITING(foreground), ORPHANING, PLACEHOLDER, DANGLING, FINALIZERS=...). It never writes.",
		Example: "  kgc tree deployment/web -n shop\n  kgc tree namespace/shop -o json",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, obj, err := o.lookup(cmd.Context(), deps, args)
			if err != nil {
				return err
			}
			t, err := inspect.BuildTree(cmd.Context(), v, obj)
			if err != nil {
				return err
			}
			notSyncedWarning(cmd, v)
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), t)
			}
			return inspect.WriteTree(cmd.OutOrStdout(), t)
		},
	}
	o.addFlags(cmd)
	return cmd
}

// ExecuteInspect runs one inspection command (args as on the command line,
// e.g. "tree", "cm/x") with deps, writing to stdout and stderr. It is the
// in-process entry point for embedders and tests.
func ExecuteInspect(ctx context.Context, deps InspectDeps, args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{Use: "kgc", SilenceUsage: true, SilenceErrors: true}
	AddInspectCommands(root, deps)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}
