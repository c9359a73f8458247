package app

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// TestRunRegistryServesBothRegistries: `kgc run`'s /metrics gathers kgc's
// own metrics and component-base's registry without a clash (the Go and
// process collectors are registered once), with kube-controller-manager's
// queue series for kgc's queues.
func TestRunRegistryServesBothRegistries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	reg := newRegistry()
	c, err := kgc.New(&rest.Config{Host: srv.URL}, kgc.Options{Registerer: reg, QueueMetrics: kcmQueueMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering kgc run's registries: %v", err)
	}
	seen := map[string]map[string]bool{} // family → values of its name label
	for _, f := range families {
		names := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" {
					names[l.GetValue()] = true
				}
			}
		}
		seen[f.GetName()] = names
	}
	for _, want := range []string{"kgc_build_info", "garbagecollector_controller_resources_sync_error_total", "go_goroutines", "process_start_time_seconds"} {
		if seen[want] == nil {
			t.Errorf("%s not gathered", want)
		}
	}
	for _, q := range []string{"garbage_collector_attempt_to_delete", "garbage_collector_attempt_to_orphan", "garbage_collector_graph_changes"} {
		for _, f := range []string{"workqueue_depth", "kgc_workqueue_depth"} {
			if !seen[f][q] {
				t.Errorf("%s{name=%q} not gathered", f, q)
			}
		}
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("/metrics: %d %s", rec.Code, rec.Body)
	}
}
