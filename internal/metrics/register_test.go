package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kgc-dev/kgc/internal/metrics"
)

// Registration is all or nothing: a New that meets a clash halfway leaves
// none of its collectors behind, and Unregister undoes a New that
// succeeded.
func TestRegistrationIsAllOrNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	// Clashes with one of the last of kgc's collectors.
	clash := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kgc_namespace_terminating", Help: "Namespaces kgc observes deleting whose kubernetes finalizer it has not removed yet."})
	reg.MustRegister(clash)
	if _, err := metrics.New(reg, metrics.Sources{}); err == nil {
		t.Fatal("registering over a clashing metric succeeded")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kgc_namespace_terminating" {
			t.Errorf("a failed New left %s registered", mf.GetName())
		}
	}
	reg.Unregister(clash)
	m, err := metrics.New(reg, metrics.Sources{})
	if err != nil {
		t.Fatalf("registering once the clash is gone: %v", err)
	}
	m.Unregister()
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("after Unregister: %d metric families left (err %v)", len(mfs), err)
	}
	var none *metrics.Metrics
	none.Unregister() // a nil *Metrics (no registry) has nothing to undo
}
