package builder

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// syncErrors reads garbagecollector_controller_resources_sync_error_total.
func syncErrors(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "garbagecollector_controller_resources_sync_error_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("garbagecollector_controller_resources_sync_error_total not exported")
	return 0
}

// TestResourcesSyncErrorsCountAsKCMCounts: a discovery that finds nothing
// counts one sync error; a change of the monitored resources counts one if
// a monitor has not delivered its first list a resync period later, and
// none when the monitors synced.
func TestResourcesSyncErrorsCountAsKCMCounts(t *testing.T) {
	const period = 30 * time.Second
	for _, tc := range []struct {
		name     string
		failList bool
		want     float64
	}{
		{name: "monitors synced", want: 0},
		{name: "a monitor's list fails", failList: true, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reg := prometheus.NewRegistry()
			m, err := metrics.New(reg, metrics.Sources{})
			if err != nil {
				t.Fatal(err)
			}
			srv := fakeapi.NewServer()
			if tc.failList {
				srv.Client.PrependReactor("list", "deployments", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, errors.New("conversion webhook unavailable")
				})
			}
			disc := &fakeapi.Discovery{Err: errors.New("discovery unavailable")}
			clk := testingclock.NewFakeClock(time.Now())
			b := New(Config{Metadata: srv.Client, Discovery: disc, Mapper: fakeapi.NewMapper(), ResyncPeriod: period, Metrics: m, Clock: clk},
				graph.New(), SinkFunc(func(graph.Event, graph.Effects) {}))
			defer b.Stop()
			go b.Run(ctx)

			if _, _, err := b.Resync(ctx); err == nil {
				t.Fatal("Resync succeeded without discovery")
			}
			if got := syncErrors(t, reg); got != 1 {
				t.Fatalf("a discovery that found nothing counted %v sync errors, want 1", got)
			}

			disc.Mu.Lock()
			disc.Lists, disc.Err = fakeapi.ResourceLists(), nil
			disc.Mu.Unlock()
			if _, _, err := b.Resync(ctx); err != nil {
				t.Fatal(err)
			}
			// Settled: every monitor synced or failing.
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return b.Settled(), nil
			}); err != nil {
				t.Fatal("monitors did not settle")
			}
			b.checkSynced()
			if got := syncErrors(t, reg); got != 1 {
				t.Fatalf("checked before the resync period passed: %v sync errors, want 1", got)
			}
			clk.Step(period)
			b.checkSynced()
			b.checkSynced() // the check is made once per change
			if got := syncErrors(t, reg) - 1; got != tc.want {
				t.Errorf("a resync period after the change: %v sync errors, want %v", got, tc.want)
			}
		})
	}
}

// The sync error counter exists at zero before anything happened.
func TestResourcesSyncErrorsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg, metrics.Sources{}); err != nil {
		t.Fatal(err)
	}
	if got := syncErrors(t, reg); got != 0 {
		t.Errorf("sync errors = %v at start", got)
	}
}
