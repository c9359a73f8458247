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
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const chromiumPath = "/usr/bin/chromium"

// Shared by the package's tests; set up by TestMain.
var (
	kubeClient kubernetes.Interface
	kgcURL     string // kgc's handler on a local listener
	setupSkip  string // why the tests cannot run here
)

func TestMain(m *testing.M) {
	if _, err := os.Stat(chromiumPath); err != nil {
		// The tests skip or fail (KGC_REQUIRE_CHROMIUM=1) with this reason;
		// no control plane is started for nothing.
		setupSkip = fmt.Sprintf("%s not found (%v): install Debian's chromium (apt-get install -y chromium)", chromiumPath, err)
		os.Exit(m.Run())
	}
	os.Exit(testenv.Main(m, testenv.Options{Name: "ui"}, setup))
}

func setup(env *testenv.Env) error {
	kubeClient = env.Kube
	// Start's context also bounds kgc's life, so the wait for sync is bounded
	// by a watchdog instead of a timeout.
	ctx, cancel := context.WithCancel(env.Ctx)
	env.Cleanup(cancel)
	watchdog := time.AfterFunc(90*time.Second, cancel)
	gc, err := kgc.Start(ctx, rest.CopyConfig(env.Config), kgc.Options{Workers: 5, DiscoveryResyncPeriod: time.Second})
	watchdog.Stop()
	if err != nil {
		return fmt.Errorf("kgc.Start: %w", err)
	}
	env.Cleanup(gc.Stop) // before the control plane stops
	srv := httptest.NewServer(gc.Handler())
	env.Cleanup(srv.Close)
	kgcURL = srv.URL
	return nil
}
