package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Each monitor has exactly one state set to 1; a monitor that synced and
// then fails is failing, not synced.
func TestMonitorStatePerResource(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(reg, Sources{Monitors: func() []MonitorState {
		return []MonitorState{
			{Resource: "v1/configmaps", Synced: true},
			{Resource: "example.com/v2/widgets", Failing: true},
			{Resource: "broken.example.com/v1beta1/things", Synced: true, Failing: true},
			{Resource: "apps/v1/deployments"},
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := gauges(t, reg)
	for key, v := range map[string]float64{
		"kgc_monitor_state,resource=apps/v1/deployments,state=failing":               0,
		"kgc_monitor_state,resource=apps/v1/deployments,state=synced":                0,
		"kgc_monitor_state,resource=apps/v1/deployments,state=syncing":               1,
		"kgc_monitor_state,resource=broken.example.com/v1beta1/things,state=failing": 1,
		"kgc_monitor_state,resource=broken.example.com/v1beta1/things,state=synced":  0,
		"kgc_monitor_state,resource=broken.example.com/v1beta1/things,state=syncing": 0,
		"kgc_monitor_state,resource=example.com/v2/widgets,state=failing":            1,
		"kgc_monitor_state,resource=example.com/v2/widgets,state=synced":             0,
		"kgc_monitor_state,resource=v1/configmaps,state=synced":                      1,
		"kgc_monitor_state,resource=v1/configmaps,state=failing":                     0,
		"kgc_monitors,state=failing":                                                 2,
		"kgc_monitors,state=synced":                                                  1,
		"kgc_monitors,state=syncing":                                                 1,
	} {
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", key, g, ok, v)
		}
	}
}

// The write gauges report what the source says at scrape time.
func TestWritesInFlightGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	n := 7
	if _, err := New(reg, Sources{Writes: func() (int, int) { return n, 40 }}); err != nil {
		t.Fatal(err)
	}
	if got := gauges(t, reg); got["kgc_writes_in_flight"] != 7 || got["kgc_writes_in_flight_limit"] != 40 {
		t.Errorf("gauges %v, want in flight 7, limit 40", got)
	}
	n = 0
	if got := gauges(t, reg); got["kgc_writes_in_flight"] != 0 {
		t.Errorf("in flight after the writes finished = %v, want 0", got["kgc_writes_in_flight"])
	}
}

// The start-up gauges report the source's progress at scrape time.
func TestStartupProgressGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := StartupProgress{ResourcesListed: 3, ResourcesTotal: 41, ObjectsListed: 120000}
	if _, err := New(reg, Sources{Startup: func() StartupProgress { return p }}); err != nil {
		t.Fatal(err)
	}
	want := func(listed, total, objects float64) {
		t.Helper()
		got := gauges(t, reg)
		if got["kgc_startup_resources_listed"] != listed || got["kgc_startup_resources_total"] != total || got["kgc_startup_objects_listed"] != objects {
			t.Errorf("startup gauges %v, want listed %v, total %v, objects %v", got, listed, total, objects)
		}
	}
	want(3, 41, 120000)
	p = StartupProgress{ResourcesListed: 41, ResourcesTotal: 41, ObjectsListed: 1000000}
	want(41, 41, 1000000)
}

// gauges gathers reg's gauges by name, followed by ",label=value" for each
// label.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue()
		}
	}
	return got
}
