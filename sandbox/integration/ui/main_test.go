package ui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

const chromiumPath = "/usr/bin/chromium"

// Shared by the package's tests; set up by TestMain.
var (
	kubeClient kubernetes.Interface
	kgcURL     string // kgc's handler on a local listener
	setupSkip  string // why the tests cannot run here
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if _, err := os.Stat(chromiumPath); err != nil {
		// The tests skip or fail (KGC_REQUIRE_CHROMIUM=1) with this reason;
		// no control plane is started for nothing.
		setupSkip = fmt.Sprintf("%s not found (%v): install Debian's chromium (apt-get install -y chromium)", chromiumPath, err)
		return m.Run()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "kgc-integration-ui-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start control plane:", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}()
	if kubeClient, err = kubernetes.NewForConfig(rest.CopyConfig(cp.Config)); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	// Start's context also bounds kgc's life, so the wait for sync is bounded
	// by a watchdog instead of a timeout.
	watchdog := time.AfterFunc(90*time.Second, cancel)
	gc, err := kgc.Start(ctx, rest.CopyConfig(cp.Config), kgc.Options{Workers: 5, DiscoveryResyncPeriod: time.Second})
	watchdog.Stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kgc.Start:", err)
		return 1
	}
	defer gc.Stop() // before the control plane stops
	srv := httptest.NewServer(gc.Handler())
	defer srv.Close()
	kgcURL = srv.URL
	return m.Run()
}
