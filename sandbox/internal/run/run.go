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
	// namespaceLifecycle: kgc also empties and finalizes deleted
	// namespaces, which nothing else does in a sandbox without a
	// controller manager.
	namespaceLifecycle bool
	demo               bool
	verbose            bool
	v                  int
}

func parseSandboxFlags(args []string, stderr io.Writer) (sandboxConfig, error) {
	var c sandboxConfig
	fs := flag.NewFlagSet("kgc-sandbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", DefaultDir, `state directory (etcd data, certificates, kubeconfig), kept across runs; "" for a temporary directory removed on exit`)
	fs.StringVar(&c.httpAddress, "http-address", DefaultHTTPAddress, "address for kgc's HTTP endpoints (/healthz, /readyz, /metrics, /debug/pprof, the graph); port 0 picks a free port")
	fs.IntVar(&c.workers, "workers", 0, "kgc workers per queue (0: kgc's default)")
	fs.BoolVar(&c.namespaceLifecycle, "namespace-lifecycle", true, "kgc also does the namespace controller's job (deleted namespaces are emptied and go); the sandbox runs no kube-controller-manager")
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
	return c, nil
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
	// at once instead of after the control plane has started.
	listener, err := net.Listen("tcp", cfg.httpAddress)
	if err != nil {
		return fmt.Errorf("listening on --http-address %s: %w (pick another, or port 0)", cfg.httpAddress, err)
	}
	defer listener.Close()

	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: cfg.dir, Logf: logf, Verbose: cfg.verbose})
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
		Logger:             newLogger(stderr, cfg.v),
		Registerer:         prometheus.NewRegistry(),
		Profiling:          true,
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
	printEndpoints(stdout, cp.KubeconfigPath, httpURL)
	if cfg.demo {
		return runDemo(ctx, cp.Config, stdout, httpURL)
	}
	printRecipes(stdout, cp.KubeconfigPath, cfg.dir)

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

func printEndpoints(w io.Writer, kubeconfig, httpURL string) {
	fmt.Fprintf(w, `
kgc-sandbox is ready: etcd + kube-apiserver in this process, kgc collecting garbage.

  kubeconfig   %[1]s
               export KUBECONFIG=%[1]s
  kgc HTTP     %[2]s/healthz  %[2]s/readyz?verbose  %[2]s/metrics
  graph (DOT)  %[2]s%[3]s
               (?uid=<uid> shows one object's connected component; ?format=json for JSON)
  web view     %[2]s/ui
`, kubeconfig, httpURL, graphPath)
}

func printRecipes(w io.Writer, kubeconfig, dir string) {
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

No controller manager runs here: Deployments, ReplicaSets and Jobs are not
reconciled and Pods are never scheduled. Owner references you write yourself
are all kgc needs.

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
