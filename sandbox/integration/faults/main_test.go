package faults

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Set up once by TestMain.
var (
	cp             *controlplane.ControlPlane
	kgcBinary      string
	kubeClient     kubernetes.Interface
	metadataClient metadata.Interface
	watcher        *safetyWatcher
)

// Set KGC_IT_VERBOSE=1 to see the control plane's and kgc's logs.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) (code int) {
	flag.Parse()
	began := time.Now()
	dir, err := os.MkdirTemp("", "kgc-integration-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// The binary, exactly as users build it (TestSIGKILLMidForegroundCascade).
	kgcBinary = filepath.Join(dir, "kgc")
	build := exec.Command("go", "build", "-o", kgcBinary, "github.com/kgc-dev/kgc/cmd/kgc")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kgc:", err)
		return 1
	}
	logf("kgc built in %s", time.Since(began).Round(time.Millisecond))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startCtx, cancelStart := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelStart()
	cp, err = controlplane.Start(startCtx, controlplane.Options{
		Dir:  filepath.Join(dir, "controlplane"),
		Logf: logf,
		// Secrets are served by etcd directly: see TestWatchExpiry.
		WatchCacheSizes: []string{"secrets#0"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start control plane:", err)
		return 1
	}
	defer func() {
		// The tests restart the apiserver: the control plane must still
		// stop cleanly.
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
			code = 1
		}
	}()
	logf("control plane up after %s", time.Since(began).Round(time.Millisecond))

	cfg := rest.CopyConfig(cp.Config)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "http client:", err)
		return 1
	}
	// The test's connections end before the control plane stops (deferred
	// calls run in reverse).
	defer httpClient.CloseIdleConnections()
	if kubeClient, err = kubernetes.NewForConfigAndClient(cfg, httpClient); err == nil {
		metadataClient, err = metadata.NewForConfigAndClient(cfg, httpClient)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "clients:", err)
		return 1
	}

	watchCtx, stopWatcher := context.WithCancel(ctx)
	defer stopWatcher()
	if watcher, err = startSafetyWatcher(watchCtx, metadataClient); err != nil {
		fmt.Fprintln(os.Stderr, "safety watcher:", err)
		return 1
	}
	return m.Run()
}

func logf(format string, args ...any) {
	if verbose {
		log.Printf(format, args...)
	}
}
