package gc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
	collector      *kgc.Collector
	watcher        *safetyWatcher
)

// Set KGC_IT_VERBOSE=1 to see the control plane's and kgc's logs.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	start := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir, err := os.MkdirTemp("", "kgc-integration-gc-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Logf: logf("controlplane")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	logf("setup")("control plane up after %s", time.Since(start).Round(time.Millisecond))

	// cp.Config's rate limits are raised already: the test clients are not
	// the bottleneck.
	cfg := rest.CopyConfig(cp.Config)
	if kubeClient, err = kubernetes.NewForConfig(cfg); err == nil {
		if dynamicClient, err = dynamic.NewForConfig(cfg); err == nil {
			metadataClient, err = metadata.NewForConfig(cfg)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}

	collector, err = kgc.New(rest.CopyConfig(cp.Config), kgc.Options{
		Workers:               5,
		DiscoveryResyncPeriod: time.Second,
		Logger:                kgcLogger(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgc.New: %v\n", err)
		return 1
	}
	runCtx, stopCollector := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- collector.Run(runCtx) }()
	// Stop kgc before the control plane (deferred calls run in reverse).
	defer func() {
		stopCollector()
		select {
		case err := <-runDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "kgc Run returned: %v\n", err)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "kgc Run did not return within 30s of its context being canceled")
		}
	}()

	syncCtx, cancelSync := context.WithTimeout(ctx, 60*time.Second)
	err = collector.WaitForSync(syncCtx)
	cancelSync()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgc WaitForSync: %v\n", err)
		return 1
	}
	select {
	case err := <-runDone:
		fmt.Fprintf(os.Stderr, "kgc Run returned before the tests started: %v\n", err)
		return 1
	default:
	}
	logf("setup")("kgc synced after %s", time.Since(start).Round(time.Millisecond))

	// Like kgc, the watcher is stopped before the control plane.
	watchCtx, stopWatcher := context.WithCancel(ctx)
	defer stopWatcher()
	watcher, err = startSafetyWatcher(watchCtx, metadataClient)
	if err != nil {
		fmt.Fprintf(os.Stderr, "safety watcher: %v\n", err)
		return 1
	}

	code := m.Run()

	select {
	case err := <-runDone:
		// Run must block until its context is done; returning early means the
		// later tests ran without a collector.
		fmt.Fprintf(os.Stderr, "kgc Run returned while the tests were running: %v\n", err)
		code = 1
	default:
	}
	return code
}

func logf(component string) func(string, ...any) {
	return func(format string, args ...any) {
		if verbose {
			log.Printf(component+": "+format, args...)
		}
	}
}

func kgcLogger() logr.Logger {
	if !verbose {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) {
		log.Printf("kgc: %s %s", prefix, args)
	}, funcr.Options{Verbosity: 4})
}
