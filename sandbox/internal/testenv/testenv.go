// Package testenv is the bootstrap shared by the sandbox's integration test
// packages: one control plane (etcd + kube-apiserver) per test package,
// started in TestMain in a child process (package cpproc: the test binary
// is built with -race for kgc's code, the control plane without), with
// admin clients for it; kgc collectors run in-process against it; and the
// few helpers the packages share.
//
// A package's TestMain is
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.Main(m, testenv.Options{Name: "gc"}, setup))
//	}
//
// where setup keeps the clients it needs and starts what the package runs
// for all of its tests (registering how to stop it with Env.Cleanup).
package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
)

// Verbose is set by KGC_IT_VERBOSE=1: the control plane's progress, kgc's
// logs and the packages' own progress messages are printed.
var Verbose = os.Getenv("KGC_IT_VERBOSE") != ""

// Logf returns a printf-style logger that prints "component: message" when
// Verbose, and discards otherwise.
func Logf(component string) func(format string, args ...any) {
	return func(format string, args ...any) {
		if Verbose {
			log.Printf(component+": "+format, args...)
		}
	}
}

// Logger returns a logger for kgc that prints its lines (up to verbosity 4)
// prefixed with "component: " when Verbose, and discards them otherwise.
func Logger(component string) logr.Logger {
	if !Verbose {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) {
		log.Printf("%s: %s %s", component, prefix, args)
	}, funcr.Options{Verbosity: 4})
}

// Options says how Main sets up a test package.
type Options struct {
	// Name names the package's temporary directory
	// (kgc-integration-<Name>-*).
	Name string
	// StartTimeout bounds the control plane's startup (not the build of
	// its binary); zero means 3 minutes.
	StartTimeout time.Duration
	// ControlPlane is passed to cpproc.Start. An empty Dir means
	// Env.Dir/controlplane; a nil Logf means Logf("controlplane").
	ControlPlane cpproc.Options
}

// Env is a test package's control plane and its admin clients.
type Env struct {
	// Dir is a temporary directory removed after everything else stopped.
	Dir string
	// CP is the control plane.
	CP *cpproc.ControlPlane
	// Config is a copy of CP.Config (admin, QPS and Burst raised): copy it
	// again before changing it.
	Config *rest.Config
	// The clients share one HTTP client, whose idle connections are closed
	// before the control plane stops.
	Kube     kubernetes.Interface
	Dynamic  dynamic.Interface
	Metadata metadata.Interface
	// Ctx is canceled once the tests are over, before the cleanups run:
	// what it bounds (the safety watcher's informers, for one) stops before
	// the control plane.
	Ctx context.Context

	cleanups []func()
	checks   []func() error
}

// Cleanup registers f to run after the tests, before the control plane
// stops; the last registered runs first.
func (e *Env) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }

// Main starts the control plane and the clients, calls setup (if not nil),
// runs the tests and stops everything, in reverse order. It returns the
// exit code for os.Exit: 1 if anything failed, including setup, a check
// registered by Env.StartCollector, or stopping the control plane.
func Main(m *testing.M, opts Options, setup func(*Env) error) (code int) {
	flag.Parse()
	began := time.Now()
	progress := Logf("setup")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := &Env{Ctx: ctx}

	var err error
	if e.Dir, err = os.MkdirTemp("", "kgc-integration-"+opts.Name+"-"); err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(e.Dir)

	cpOpts := opts.ControlPlane
	if cpOpts.Dir == "" {
		cpOpts.Dir = filepath.Join(e.Dir, "controlplane")
	}
	if cpOpts.Logf == nil {
		cpOpts.Logf = Logf("controlplane")
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	startCtx, cancelStart := context.WithTimeout(ctx, timeout)
	e.CP, err = cpproc.Start(startCtx, cpOpts)
	cancelStart()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start control plane:", err)
		return 1
	}
	defer func() {
		if err := e.CP.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
			code = 1
		}
	}()
	progress("control plane up after %s", time.Since(began).Round(time.Millisecond))

	e.Config = rest.CopyConfig(e.CP.Config)
	httpClient, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "http client:", err)
		return 1
	}
	defer httpClient.CloseIdleConnections()
	if e.Kube, err = kubernetes.NewForConfigAndClient(e.Config, httpClient); err == nil {
		if e.Dynamic, err = dynamic.NewForConfigAndClient(e.Config, httpClient); err == nil {
			e.Metadata, err = metadata.NewForConfigAndClient(e.Config, httpClient)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		return 1
	}

	// Ctx is canceled and the cleanups run before the HTTP client's
	// connections are closed and the control plane stops (deferred calls run
	// in reverse).
	defer func() {
		cancel()
		for i := len(e.cleanups) - 1; i >= 0; i-- {
			e.cleanups[i]()
		}
	}()
	if setup != nil {
		if err := setup(e); err != nil {
			fmt.Fprintln(os.Stderr, "setup:", err)
			return 1
		}
		progress("set up after %s", time.Since(began).Round(time.Millisecond))
	}

	code = m.Run()
	for _, check := range e.checks {
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// StartCollector is the package-wide StartCollector: the collector runs
// until the tests are over and then stops before the control plane; if its
// Run returns while the tests run, the package fails.
func (e *Env) StartCollector(cfg *rest.Config, opts kgc.Options, syncTimeout time.Duration) (*Collector, error) {
	c, err := StartCollector(cfg, opts, syncTimeout)
	if err != nil {
		return nil, err
	}
	e.Cleanup(func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	})
	e.checks = append(e.checks, func() error {
		if err := c.Running(); err != nil {
			// Run must block until its context is done; returning early
			// means the later tests ran without a collector.
			return fmt.Errorf("%w, while the tests were running", err)
		}
		return nil
	})
	return c, nil
}

// Collector is a kgc collector whose Run runs in a goroutine of its own.
type Collector struct {
	*kgc.Collector
	cancel context.CancelFunc
	done   chan struct{}
	err    error // what Run returned, once done is closed
}

// StartCollector creates a collector with kgc.New(cfg, opts), runs it until
// Stop, and returns once it has synced. If it does not sync within
// syncTimeout, or its Run returns meanwhile, it is stopped and an error
// returned.
func StartCollector(cfg *rest.Config, opts kgc.Options, syncTimeout time.Duration) (*Collector, error) {
	gc, err := kgc.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("kgc.New: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Collector{Collector: gc, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = gc.Run(ctx)
	}()
	syncCtx, cancelSync := context.WithTimeout(ctx, syncTimeout)
	err = gc.WaitForSync(syncCtx)
	cancelSync()
	if err == nil {
		if err = c.Running(); err != nil {
			err = fmt.Errorf("%w, before it synced", err)
		}
	} else {
		err = fmt.Errorf("kgc WaitForSync: %w", err)
	}
	if err != nil {
		if stopErr := c.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, err
	}
	return c, nil
}

// Running returns nil while Run runs, and an error saying what it returned
// once it has returned.
func (c *Collector) Running() error {
	select {
	case <-c.done:
		return fmt.Errorf("kgc Run returned (%v)", c.err)
	default:
		return nil
	}
}

// Stop cancels Run's context and waits (up to 30s) for Run to return. It
// returns an error if Run does not return in time or returns an error other
// than the context's.
func (c *Collector) Stop() error {
	c.cancel()
	select {
	case <-c.done:
		if c.err != nil && !errors.Is(c.err, context.Canceled) {
			return fmt.Errorf("kgc Run returned: %w", c.err)
		}
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("kgc Run did not return within 30s of its context being canceled")
	}
}

// BuildKGC builds the kgc binary into dir, as a release builds it (static,
// paths trimmed: cpproc.PlainBuildFlags says why), and returns its path. The
// go command's output goes to stderr.
func BuildKGC(dir string) (string, error) {
	began := time.Now()
	path := filepath.Join(dir, "kgc")
	build := plainBuild("-o", path, "github.com/kgc-dev/kgc/cmd/kgc")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building kgc: %w", err)
	}
	Logf("setup")("kgc built in %s", time.Since(began).Round(time.Millisecond))
	return path, nil
}

// BuildKubectl builds kubectl into dir from k8s.io/kubernetes's
// cmd/kubectl at the version this module pins (with the staging modules
// its go.mod replaces; its tool directive keeps kubectl's requirements),
// and returns its path: tests run the kubectl of the Kubernetes version
// kgc is tested against, whether or not one is installed, and CI needs
// nothing but Go for them. Most of its packages are client-go's and
// apimachinery's, which the sandbox builds anyway. The go command's
// output goes to stderr.
func BuildKubectl(dir string) (string, error) {
	began := time.Now()
	path := filepath.Join(dir, "kubectl")
	build := plainBuild("-o", path, "k8s.io/kubernetes/cmd/kubectl")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building kubectl: %w", err)
	}
	Logf("setup")("kubectl built in %s", time.Since(began).Round(time.Millisecond))
	return path, nil
}

// plainBuild is `go build args...` without -race, with the sandbox's flags
// for that (cpproc.PlainBuildFlags).
func plainBuild(args ...string) *exec.Cmd {
	build := exec.Command("go", append(append([]string{"build"}, cpproc.PlainBuildFlags...), args...)...)
	build.Env = append(os.Environ(), cpproc.PlainBuildEnv...)
	return build
}
