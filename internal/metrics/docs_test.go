package metrics

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kgc-dev/kgc/internal/buildinfo"
)

type docRow struct {
	typ    string
	labels []string
}

// readDocs parses the table of docs/metrics.md.
func readDocs(t *testing.T) map[string]docRow {
	t.Helper()
	data, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `((?:kgc|garbagecollector)_[a-z_]+)` \\| (counter|gauge|histogram|summary) \\|([^|]*)\\|")
	out := map[string]docRow{}
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		out[m[1]] = docRow{typ: m[2], labels: labels}
	}
	if len(out) == 0 {
		t.Fatal("no metric rows found in docs/metrics.md")
	}
	return out
}

// exercise records one sample in every metric, so that every family shows
// up in Gather with its type and labels.
func exercise(t *testing.T, m *Metrics) {
	t.Helper()
	m.Operation(OpDelete, OutcomeSuccess)
	m.Unresolvable("kind_not_served")
	m.CascadeDone(1)
	m.NamespaceSync(NamespaceFinalized, 1)
	m.NamespaceFinalized(1)
	m.NamespacesTerminating(1)
	m.BreakerTripped("unobserved-owners")
	m.JournalWrite(JournalWritten, 3)
	p := m.QueueMetricsProvider()
	p.NewDepthMetric("q").Inc()
	p.NewAddsMetric("q").Inc()
	p.NewLatencyMetric("q").Observe(1)
	p.NewWorkDurationMetric("q").Observe(1)
	p.NewUnfinishedWorkSecondsMetric("q").Set(1)
	p.NewLongestRunningProcessorSecondsMetric("q").Set(1)
	p.NewRetriesMetric("q").Inc()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	client := &http.Client{Transport: m.InstrumentTransport(http.DefaultTransport)}
	res, err := client.Get(srv.URL + "/api/v1/namespaces/ns/configmaps/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
}

func TestDocsMatchCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Sources{
		Graph:             func() GraphCounts { return GraphCounts{Observed: 1} },
		Monitors:          func() []MonitorState { return []MonitorState{{Resource: "v1/configmaps", Synced: true}} },
		DiscoveryFailures: func() []string { return []string{"broken.example.com/v1beta1"} },
		Writes:            func() (int, int) { return 3, 40 },
		Stuck:             func() (map[string]int, float64, bool) { return map[string]int{"finalizer": 2}, 600, true },
		Startup: func() StartupProgress {
			return StartupProgress{ResourcesListed: 1, ResourcesTotal: 2, ObjectsListed: 5}
		},
		Breaker: func() BreakerState {
			return BreakerState{Signals: []BreakerSignal{{Signal: "unobserved-owners", Tripped: true, Counted: 201, Limit: 200}}, Held: map[string]int{HeldRestored: 1}}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	docs := readDocs(t)
	seen := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		seen[name] = true
		doc, ok := docs[name]
		if !ok {
			t.Errorf("metric %s is not documented in docs/metrics.md", name)
			continue
		}
		if typ := strings.ToLower(f.GetType().String()); typ != doc.typ {
			t.Errorf("metric %s is a %s in code, a %s in docs/metrics.md", name, typ, doc.typ)
		}
		var labels []string
		for _, lp := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		slices.Sort(labels)
		if !slices.Equal(labels, doc.labels) {
			t.Errorf("metric %s has labels %v in code, %v in docs/metrics.md", name, labels, doc.labels)
		}
	}
	for name := range docs {
		if !seen[name] {
			t.Errorf("docs/metrics.md documents %s, which the code does not export", name)
		}
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	m, err := New(nil, Sources{})
	if err != nil || m != nil {
		t.Fatalf("New(nil) = %v, %v; want nil, nil", m, err)
	}
	m.Operation(OpDelete, OutcomeSuccess)
	m.Unresolvable("invalid")
	m.CascadeDone(1)
	if m.QueueMetricsProvider() != nil {
		t.Error("nil metrics returned a queue metrics provider")
	}
	rt := http.DefaultTransport
	if m.InstrumentTransport(rt) != rt {
		t.Error("nil metrics wrapped the transport")
	}
}

func TestVerb(t *testing.T) {
	for _, tc := range []struct{ method, url, want string }{
		{"GET", "/api/v1/namespaces/ns/configmaps/x", "get"},
		{"GET", "/api/v1/namespaces/ns/configmaps", "list"},
		{"GET", "/api/v1/configmaps?watch=true", "watch"},
		{"GET", "/apis/apps/v1/deployments?watch=1&resourceVersion=5", "watch"},
		{"GET", "/api/v1/namespaces", "list"},
		{"GET", "/api/v1/namespaces/ns", "get"},
		{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin", "get"},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", "delete"},
		{"DELETE", "/api/v1/namespaces/ns/pods", "deletecollection"},
		{"PATCH", "/apis/example.com/v1/namespaces/ns/widgets/w", "patch"},
		{"POST", "/api/v1/namespaces/ns/events", "create"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/kgc", "update"},
		{"GET", "/api", "discovery"},
		{"GET", "/apis", "discovery"},
		{"GET", "/apis/apps/v1", "discovery"},
		{"GET", "/openapi/v2", "discovery"},
	} {
		req := httptest.NewRequest(tc.method, tc.url, nil)
		if got := Verb(req); got != tc.want {
			t.Errorf("Verb(%s %s) = %s, want %s", tc.method, tc.url, got, tc.want)
		}
	}
}

// Every documented metric but the request counter (whose label values are
// the server's status codes) is exported before anything happened.
func TestDocumentedMetricsExistFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Sources{Graph: func() GraphCounts { return GraphCounts{} }, Monitors: func() []MonitorState { return nil }, DiscoveryFailures: func() []string { return nil }, Writes: func() (int, int) { return 0, 40 },
		Stuck:   func() (map[string]int, float64, bool) { return map[string]int{"finalizer": 0}, 0, true },
		Startup: func() StartupProgress { return StartupProgress{} },
		Breaker: func() BreakerState {
			return BreakerState{Signals: []BreakerSignal{{Signal: "unobserved-owners"}, {Signal: "dangling-fraction"}}}
		}}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
	}
	for name := range readDocs(t) {
		if strings.HasPrefix(name, "kgc_workqueue_") || name == "kgc_api_requests_total" || name == "kgc_monitor_synced" || name == "kgc_monitor_state" {
			continue // created with their queues / first request / first monitor
		}
		if !seen[name] {
			t.Errorf("%s is not exported until something happens", name)
		}
	}
}

// kgc_build_info is 1, labelled with what buildinfo reports.
func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Sources{}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	b := buildinfo.Get()
	want := map[string]string{"version": b.Version, "revision": b.Revision, "builddate": b.BuildDate, "goversion": b.GoVersion}
	for _, f := range families {
		if f.GetName() != "kgc_build_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("kgc_build_info has %d series, want 1", len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(got, want) || m.GetGauge().GetValue() != 1 {
			t.Errorf("kgc_build_info%v %v, want %v 1", got, m.GetGauge().GetValue(), want)
		}
		return
	}
	t.Error("kgc_build_info not exported")
}

// TestDocsAnswerKCMSeries: docs/metrics.md answers every series of the
// contract (testdata/kcm-collector-series.json, read from a real
// kube-controller-manager by sandbox/integration/signals, which also
// checks that kgc exports each), with its labels, and nothing else.
func TestDocsAnswerKCMSeries(t *testing.T) {
	b, err := os.ReadFile("testdata/kcm-collector-series.json")
	if err != nil {
		t.Fatal(err)
	}
	var contract []struct {
		Name   string   `json:"name"`
		Labels []string `json:"labels"`
	}
	if err := json.Unmarshal(b, &contract); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## kube-controller-manager's series\n")
	if !ok {
		t.Fatal("docs/metrics.md has no section \"kube-controller-manager's series\"")
	}
	row := regexp.MustCompile("^\\| `([a-z_]+)` \\|([^|]*)\\|")
	documented := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		slices.Sort(labels)
		documented[m[1]] = labels
	}
	if len(contract) == 0 {
		t.Fatal("the contract lists no series")
	}
	for _, s := range contract {
		labels, ok := documented[s.Name]
		if !ok {
			t.Errorf("docs/metrics.md does not answer kube-controller-manager's %s", s.Name)
			continue
		}
		if !slices.Equal(labels, s.Labels) {
			t.Errorf("docs/metrics.md gives %s the labels %v, kube-controller-manager %v", s.Name, labels, s.Labels)
		}
		delete(documented, s.Name)
	}
	for name := range documented {
		t.Errorf("docs/metrics.md answers %s, which the contract does not list", name)
	}
}
