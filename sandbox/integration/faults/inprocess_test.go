package faults

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// startInProcess runs kgc in-process (package kgc) with every request going
// through ft, and returns once it has synced. A cleanup stops it.
func startInProcess(t *testing.T, ft *faultproxy.Transport, qps float32, burst int) *kgc.Collector {
	t.Helper()
	gc := startInProcessNoWait(t, ft, qps, burst)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := gc.WaitForSync(ctx); err != nil {
		t.Fatalf("kgc did not sync: %v", err)
	}
	return gc
}

// startInProcessNoWait is startInProcess without waiting for the sync.
func startInProcessNoWait(t *testing.T, ft *faultproxy.Transport, qps float32, burst int) *kgc.Collector {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	// kgc keeps the caller's WrapTransport and wraps more around it, so
	// the fault transport sits right before the network.
	cfg.WrapTransport = ft.Wrap
	gc, err := kgc.Start(context.Background(), cfg, kgc.Options{
		Workers:               10,
		DiscoveryResyncPeriod: 5 * time.Second,
		QPS:                   qps,
		Burst:                 burst,
		Logger:                testenv.Logger("kgc[" + t.Name() + "]"),
	})
	if err != nil {
		t.Fatalf("starting kgc: %v", err)
	}
	t.Cleanup(gc.Stop)
	return gc
}
