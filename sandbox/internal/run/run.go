package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

const (
	// DefaultDir is where the sandbox keeps its state unless --dir says
	// otherwise (the repository's .gitignore lists it).
	DefaultDir = ".kgc-sandbox"
	// DefaultHTTPAddress is kgc's HTTP endpoint (health, graph). Upstream's
	// kube-controller-manager serves on 10257; 10258 keeps both usable side
	// by side.
	DefaultHTTPAddress = "127.0.0.1:10258"

	// syncTimeout bounds the wait for kgc's monitors to sync.
	syncTimeout = 2 * time.Minute
	// shutdownTimeout bounds how long kgc and the HTTP server get to stop.
	shutdownTimeout = 30 * time.Second
	// graphPath is the upstream-compatible dependency graph endpoint.
	graphPath = "/debug/controllers/garbage-collector-controller/graph"
	// shadowPath is where kgc in shadow mode serves its comparison.
	shadowPath = "/debug/controllers/garbage-collector-controller/shadow"
)

// Main runs kgc-sandbox with the given arguments (without the program name)
// and returns the process exit code. ctx ending (SIGINT, SIGTERM) shuts the
// sandbox down cleanly.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stderr = &syncWriter{w: stderr}
	var err error
	if len(args) > 0 && args[0] == "demo" {
		err = demoCommand(ctx, args[1:], stdout, stderr)
	} else {
		err = sandboxCommand(ctx, args, stdout, stderr)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "kgc-sandbox: %v\n", err)
		return 1
	}
}

// errUsage marks flag errors, which the flag package has already reported.
var errUsage = errors.New("usage error")

type sandboxConfig struct {
	dir         string
	httpAddress string
	workers     int
	// controllers is kube-controller-manager's --controllers, or "none"
	// for etcd + kube-apiserver alone (no controller manager, scheduler or
	// nodes).
	controllers string
	nodes       int
	// namespaceLifecycle: kgc also empties and finalizes deleted
	// namespaces. By default it does so exactly when no namespace
	// controller runs (--controllers=none, or a list without it).
	namespaceLifecycle bool
	// shadow: kube-controller-manager's garbage collector collects, and
	// kgc runs in shadow mode (kgc.Options.DryRun) beside it.
	shadow  bool
	demo    bool
	verbose bool
	v       int
}

func parseSandboxFlags(args []string, stderr io.Writer) (sandboxConfig, error) {
	var c sandboxConfig
	fs := flag.NewFlagSet("kgc-sandbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", DefaultDir, `state directory (etcd data, certificates, kubeconfig), kept across runs; "" for a temporary directory removed on exit`)
	fs.StringVar(&c.httpAddress, "http-address", DefaultHTTPAddress, "loopback address for kgc's endpoints (/healthz, /readyz, /metrics, /debug/pprof, the graph, /ui), served in plain HTTP without authentication as kgc run --http-address serves them; port 0 picks a free port")
	fs.IntVar(&c.workers, "workers", 0, "kgc workers per queue (0: kgc's default)")
	fs.StringVar(&c.controllers, "controllers", controlplane.DefaultControllers, `kube-controller-manager's --controllers (its garbage collector must stay off: kgc does that job); "none" runs no controller manager, scheduler or nodes: etcd + kube-apiserver alone`)
	fs.IntVar(&c.nodes, "nodes", controlplane.DefaultNodes, "simulated nodes (kwok) on which Pods run; not with --controllers=none")
	nsLifecycle := fs.String("namespace-lifecycle", "auto", `kgc also does the namespace controller's job (deleted namespaces are emptied and go): "true", "false", or "auto": when kube-controller-manager does not (--controllers=none, or a list without namespace-controller)`)
	fs.BoolVar(&c.shadow, "shadow", false, "shadow mode, to see kgc's migration path: kube-controller-manager's own garbage collector collects (--controllers defaults to *), and kgc runs beside it with --dry-run: it decides everything, writes nothing, and compares its decisions with upstream's ("+shadowPath+", kgc_shadow_agreement_total)")
	fs.BoolVar(&c.demo, "demo", false, "run the built-in cascade demo once kgc is ready, then exit (status 0 when the cascades completed)")
	fs.BoolVar(&c.verbose, "verbose", false, "show kube-apiserver's and etcd's own logs")
	fs.IntVar(&c.v, "v", 0, "kgc log verbosity")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage:\n  kgc-sandbox [flags]        run etcd + kube-apiserver + kgc in this process until Ctrl-C\n  kgc-sandbox demo [flags]   run the cascade demo against a running sandbox (see demo -h)\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kgc-sandbox: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return c, errUsage
	}
	if err := c.resolve(*nsLifecycle); err != nil {
		fmt.Fprintf(stderr, "kgc-sandbox: %v\n", err)
		return c, errUsage
	}
	return c, nil
}

// resolve checks the cluster flags and settles --namespace-lifecycle.
func (c *sandboxConfig) resolve(nsLifecycle string) error {
	if c.nodes < 0 {
		return fmt.Errorf("--nodes must not be negative, got %d", c.nodes)
	}
	kcmNamespaces := false
	if c.shadow && c.controllers == controlplane.DefaultControllers {
		c.controllers = "*"
	}
	if c.shadow && !c.cluster() {
		return errors.New("--shadow needs kube-controller-manager (its garbage collector does the work): not with --controllers=none")
	}
	if c.cluster() {
		enabled, err := controllerEnabled(c.controllers, "garbage-collector-controller")
		if err != nil {
			return err
		}
		switch {
		case enabled && !c.shadow:
			return errors.New("--controllers must leave kube-controller-manager's garbage-collector-controller off: kgc is the garbage collector here (add -garbage-collector-controller, or give --shadow to run kgc in shadow mode beside it)")
		case !enabled && c.shadow:
			return errors.New("--shadow needs kube-controller-manager's garbage-collector-controller on: it does the work kgc only decides in shadow mode")
		}
		if kcmNamespaces, err = controllerEnabled(c.controllers, "namespace-controller"); err != nil {
			return err
		}
	}
	if c.shadow {
		// Shadow mode writes nothing, namespaces included.
		if nsLifecycle == "true" {
			return errors.New("--shadow and --namespace-lifecycle=true exclude each other: kgc writes nothing in shadow mode")
		}
		nsLifecycle = "false"
	}
	switch nsLifecycle {
	case "auto":
		c.namespaceLifecycle = !kcmNamespaces
	case "true":
		c.namespaceLifecycle = true
	case "false":
		c.namespaceLifecycle = false
	default:
		return fmt.Errorf(`--namespace-lifecycle must be "true", "false" or "auto", got %q`, nsLifecycle)
	}
	return nil
}

// cluster reports whether kube-controller-manager, kube-scheduler and
// the simulated nodes run.
func (c *sandboxConfig) cluster() bool { return c.controllers != "none" }

// controllerEnabled reads a --controllers list the way
// kube-controller-manager does: "name" enables, "-name" disables, "*"
// stands for the controllers on by default (both controllers asked about
// here are). The first entry naming a controller decides.
func controllerEnabled(list, name string) (bool, error) {
	star := false
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		switch item {
		case "":
			return false, fmt.Errorf("--controllers %q has an empty entry", list)
		case name:
			return true, nil
		case "-" + name:
			return false, nil
		case "*":
			star = true
		}
	}
	return star, nil
}

func sandboxCommand(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseSandboxFlags(args, stderr)
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "kgc-sandbox: "+format+"\n", args...)
	}

	// Bind kgc's address before the slow part, so that a busy port fails
	// at once instead of after the control plane has started. Plain HTTP
	// without authentication serves the graph of every object: loopback
	// only, as kgc run's --http-address.
	if err := loopbackOnly(cfg.httpAddress); err != nil {
		return err
	}
	listener, err := net.Listen("tcp", cfg.httpAddress)
	if err != nil {
		return fmt.Errorf("listening on --http-address %s: %w (pick another, or port 0)", cfg.httpAddress, err)
	}
	defer listener.Close()

	cpOpts := controlplane.Options{Dir: cfg.dir, Logf: logf, Verbose: cfg.verbose}
	if cfg.cluster() {
		cpOpts.Cluster = true
		cpOpts.Nodes = cfg.nodes
		cpOpts.ControllerManagerFlags = []string{"--controllers=" + cfg.controllers}
	}
	cp, err := controlplane.Start(ctx, cpOpts)
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	// Deferred calls run in reverse: kgc stops first, then the HTTP server,
	// then the control plane it was talking to.
	defer func() {
		if stopErr := cp.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the control plane: %w", stopErr))
		}
	}()

	collector, err := kgc.New(cp.Config, kgc.Options{
		Workers:            cfg.workers,
		NamespaceLifecycle: cfg.namespaceLifecycle,
		DryRun:             cfg.shadow,
		// As `kgc run` keeps it (its default Lease name and namespace
		// without leader election): the sandbox's state outlives a
		// restart, and so must the memory of the owners kgc orphaned.
		OrphanJournal: &kgc.OrphanJournalOptions{LeaseNamespace: "kube-system", LeaseName: "kgc-orphans"},
		Logger:        newLogger(stderr, cfg.v),
		Registerer:    prometheus.NewRegistry(),
		Profiling:     true,
	})
	if err != nil {
		return fmt.Errorf("creating kgc: %w", err)
	}

	srv := &http.Server{Handler: collector.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(listener) }()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if shutErr := srv.Shutdown(shutdownCtx); shutErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the HTTP server: %w", shutErr))
		}
	}()

	// kgc gets its own context so that it stops before the control plane,
	// whatever ended the run (signal, demo finished, error).
	kgcCtx, stopKGC := context.WithCancel(context.Background())
	kgcDone := make(chan struct{})
	var kgcErr error
	go func() {
		defer close(kgcDone)
		kgcErr = collector.Run(kgcCtx)
	}()
	defer func() {
		stopKGC()
		select {
		case <-kgcDone:
			if kgcErr != nil && !errors.Is(kgcErr, context.Canceled) {
				err = errors.Join(err, fmt.Errorf("kgc: %w", kgcErr))
			}
		case <-time.After(shutdownTimeout):
			err = errors.Join(err, fmt.Errorf("kgc did not stop within %v", shutdownTimeout))
		}
	}()

	began := time.Now()
	if err := waitForSync(ctx, collector, kgcDone, &kgcErr); err != nil {
		return err
	}
	logf("kgc monitors synced in %v", time.Since(began).Round(time.Millisecond))

	httpURL := "http://" + listener.Addr().String()
	printEndpoints(stdout, cp.KubeconfigPath, httpURL, cfg.cluster(), cfg.shadow)
	if cfg.demo {
		return runDemo(ctx, cp.Config, stdout, httpURL)
	}
	printRecipes(stdout, cp.KubeconfigPath, cfg.dir, cfg.cluster())

	select {
	case <-ctx.Done():
		logf("shutting down")
		return nil
	case <-kgcDone:
		return fmt.Errorf("kgc stopped unexpectedly: %w", kgcErr)
	case err := <-serveDone:
		return fmt.Errorf("HTTP server stopped: %w", err)
	}
}

// waitForSync waits for kgc's monitors, giving up early if kgc's Run has
// already returned (its error explains more than a timeout would).
func waitForSync(ctx context.Context, c *kgc.Collector, kgcDone <-chan struct{}, kgcErr *error) error {
	syncCtx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	synced := make(chan error, 1)
	go func() { synced <- c.WaitForSync(syncCtx) }()
	select {
	case err := <-synced:
		if err != nil {
			return fmt.Errorf("waiting for kgc to sync: %w", err)
		}
		return nil
	case <-kgcDone:
		return fmt.Errorf("kgc stopped before syncing: %w", *kgcErr)
	}
}

// loopbackOnly refuses an --http-address other machines could reach.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http-address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--http-address %q: kgc's plain HTTP endpoints have no authentication; give a loopback address (127.0.0.1, [::1], localhost)", addr)
	}
	return nil
}

func printEndpoints(w io.Writer, kubeconfig, httpURL string, cluster, shadow bool) {
	what := "etcd + kube-apiserver in this process, kgc collecting garbage."
	switch {
	case shadow:
		what = "etcd, kube-apiserver, kube-controller-manager (every controller, its garbage\ncollector included), kube-scheduler and simulated nodes in this process,\nkgc in shadow mode beside them: it decides, writes nothing, and compares\nwith kube-controller-manager's collector at " + httpURL + shadowPath + "."
	case cluster:
		what = "etcd, kube-apiserver, kube-controller-manager (every controller but its\ngarbage collector), kube-scheduler and simulated nodes in this process,\nkgc collecting garbage."
	}
	fmt.Fprintf(w, `
kgc-sandbox is ready: %[4]s

  kubeconfig   %[1]s
               export KUBECONFIG=%[1]s
  kgc HTTP     %[2]s/healthz  %[2]s/readyz?verbose  %[2]s/metrics
               (plain HTTP on loopback, no authentication: for this machine only;
               kgc run in a cluster serves HTTPS with Kubernetes authentication)
  graph (DOT)  %[2]s%[3]s
               (?uid=<uid> shows one object's connected component; ?format=json for JSON)
  web view     %[2]s/ui
`, kubeconfig, httpURL, graphPath, what)
}

func printRecipes(w io.Writer, kubeconfig, dir string, cluster bool) {
	keep := fmt.Sprintf("State is kept in %s; --dir=\"\" uses a throwaway directory.", dir)
	if dir == "" {
		keep = "State is in a temporary directory, removed on exit."
	}
	// The demo subcommand finds the default directory's kubeconfig by
	// itself; any other needs naming.
	demoKubeconfig := ""
	if abs, err := filepath.Abs(filepath.Join(DefaultDir, "kubeconfig")); err != nil || abs != kubeconfig {
		demoKubeconfig = " --kubeconfig " + kubeconfig
	}
	if cluster {
		fmt.Fprintf(w, `
Try a cascade with kubectl, as on any cluster:

  export KUBECONFIG=%[1]s
  kubectl create deployment web --image=nginx --replicas=3
  kubectl get deployments,replicasets,pods     # 3 Pods Running on simulated nodes
  go run ./cmd/kgc tree deployment/web          # Deployment → ReplicaSet → Pods
  kubectl delete deployment web                 # kgc deletes the ReplicaSet, then its Pods
  (or --cascade=foreground: the Deployment goes last; --cascade=orphan: the rest stays)

No kubectl? In another terminal, from the repository root:

  go run ./sandbox/cmd/kgc-sandbox demo%[2]s

%[3]s Press Ctrl-C to stop.
`, kubeconfig, demoKubeconfig, keep)
		return
	}
	fmt.Fprintf(w, `
Try a cascade with kubectl:

  export KUBECONFIG=%[1]s
  kubectl create configmap owner
  uid=$(kubectl get configmap owner -o jsonpath='{.metadata.uid}')
  for i in 1 2 3; do
    kubectl create configmap dep-$i
    kubectl patch configmap dep-$i --type=merge -p '{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"owner","uid":"'$uid'"}]}}'
  done
  kubectl delete configmap owner --cascade=background
  kubectl get configmaps        # dep-1..3 are gone: kgc deleted them

No kubectl? In another terminal, from the repository root:

  go run ./sandbox/cmd/kgc-sandbox demo%[2]s

No controller manager runs here (--controllers=none): Deployments,
ReplicaSets and Jobs are not reconciled and Pods are never scheduled.
Owner references you write yourself are all kgc needs.

%[3]s Press Ctrl-C to stop.
`, kubeconfig, demoKubeconfig, keep)
}

// newLogger returns kgc's logger: kgc-sandbox silences klog (the
// apiserver's logger), so kgc logs through its own sink on stderr.
func newLogger(w io.Writer, verbosity int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			fmt.Fprintf(w, "kgc %s: %s\n", prefix, args)
			return
		}
		fmt.Fprintf(w, "kgc: %s\n", args)
	}, funcr.Options{Verbosity: verbosity, LogTimestamp: true, TimestampFormat: "15:04:05.000"})
}

// syncWriter serialises writes from the many goroutines that log.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
