package signals

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

var update = flag.Bool("update", false, "write the contract file from kube-controller-manager's series")

// contractPath is the contract: the series of kube-controller-manager's
// collector, as this test reads them from a real one.
const contractPath = "../../../internal/metrics/testdata/kcm-collector-series.json"

// series is one metric family of the contract.
type series struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Labels are the family's label names.
	Labels []string `json:"labels,omitempty"`
	// Select holds the label values that pick the collector's series out
	// of a family other controllers share (the work queues' names).
	Select map[string][]string `json:"select,omitempty"`
	Help   string              `json:"help"`
	// Buckets are a histogram's upper bounds.
	Buckets []float64 `json:"buckets,omitempty"`
}

// TestKGCExportsKCMCollectorSeries reads the series of
// kube-controller-manager's collector from a real kube-controller-manager
// (in the control plane's process, with the adapters its main loads) after it ran a
// Background and an Orphan cascade, checks them against the contract file,
// then runs the kgc binary against the same apiserver, lets it run the same
// cascades, and checks that its /metrics exports every series of the
// contract with the same type, labels and help, and every Go runtime and
// process series kube-controller-manager exports.
func TestKGCExportsKCMCollectorSeries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := createNamespace(ctx, t)

	runCascades(ctx, t, ns, "kcm")
	kcm, err := controlPlane.GatherMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := collectorSeries(kcm)
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(contractPath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d families to %s", len(got), contractPath)
	}
	contract := readContract(t)
	if diff := diffSeries(contract, got); diff != "" {
		t.Errorf("kube-controller-manager's collector exports other series than the contract (-contract +kube-controller-manager); run with -update if kube-controller-manager changed:\n%s", diff)
	}

	p := testenv.StartProc(t, "kgc", time.Minute, kgcBinary, "run",
		"--kubeconfig", kubeconfigPath,
		"--leader-elect", "--leader-elect-resource-namespace="+ns,
		"--http-address=127.0.0.1:0", "--secure-port=0")
	addr := waitServing(ctx, t, p)
	runCascades(ctx, t, ns, "kgc")

	// A series appears once what it counts has happened (the Lease held,
	// a request sent): wait until every one of the contract is there.
	var kgc map[string]*dto.MetricFamily
	var missing []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		kgc, err = scrape(ctx, addr)
		if err != nil {
			return false, nil //nolint:nilerr // not serving yet; retried
		}
		missing = missing[:0]
		for _, s := range contract {
			if kgc[s.Name] == nil {
				missing = append(missing, s.Name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("kgc does not export %v", missing)
	}
	for _, want := range contract {
		f := kgc[want.Name]
		have := familySeries(f, want.Select)
		if have.Type != want.Type || !slices.Equal(have.Labels, want.Labels) || stripStability(have.Help) != stripStability(want.Help) || !slices.Equal(have.Buckets, want.Buckets) {
			t.Errorf("%s: kgc exports %+v, kube-controller-manager %+v", want.Name, have, want)
		}
		for label, values := range want.Select {
			for _, v := range values {
				if !slices.Contains(have.Select[label], v) {
					t.Errorf("%s: kgc exports no series with %s=%q", want.Name, label, v)
				}
			}
		}
	}
	// The Go runtime's and the process's series come from the same
	// collectors in both (component-base's registry registers them).
	for _, f := range kcm {
		name := f.GetName()
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			continue
		}
		if g := kgc[name]; g == nil || g.GetType() != f.GetType() {
			t.Errorf("kube-controller-manager exports %s (%s), kgc does not", name, f.GetType())
		}
	}
}

// collectorSeries picks kube-controller-manager's collector's series out of
// everything its process exports: its own package's
// (garbagecollector_*), its queues' (workqueue_* with its queue names),
// and those of the client and the leader election it runs with
// (rest_client_*, leader_election_*). The Go runtime's and the process's
// are checked apart (they depend on the Go release, not on
// kube-controller-manager).
func collectorSeries(families []*dto.MetricFamily) []series {
	var out []series
	for _, f := range families {
		name := f.GetName()
		var sel map[string][]string
		switch {
		case strings.HasPrefix(name, "garbagecollector_"), strings.HasPrefix(name, "rest_client_"), strings.HasPrefix(name, "leader_election_"):
		case strings.HasPrefix(name, "workqueue_"):
			sel = map[string][]string{"name": nil}
		default:
			continue
		}
		s := familySeries(f, sel)
		if sel != nil {
			if len(s.Select["name"]) == 0 {
				continue
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// familySeries describes f; for each label of sel, it lists the values of
// f's series that name the garbage collector's queues.
func familySeries(f *dto.MetricFamily, sel map[string][]string) series {
	s := series{Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp()}
	labels := map[string]bool{}
	for i, m := range f.GetMetric() {
		if h := m.GetHistogram(); i == 0 && h != nil {
			for _, b := range h.GetBucket() {
				// The text format lists +Inf, a gathered histogram not.
				if !math.IsInf(b.GetUpperBound(), 1) {
					s.Buckets = append(s.Buckets, b.GetUpperBound())
				}
			}
		}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = true
			if _, ok := sel[l.GetName()]; ok && isCollectorQueue(l.GetValue()) && !slices.Contains(s.Select[l.GetName()], l.GetValue()) {
				if s.Select == nil {
					s.Select = map[string][]string{}
				}
				s.Select[l.GetName()] = append(s.Select[l.GetName()], l.GetValue())
			}
		}
	}
	for l := range labels {
		s.Labels = append(s.Labels, l)
	}
	slices.Sort(s.Labels)
	for _, v := range s.Select {
		slices.Sort(v)
	}
	return s
}

func isCollectorQueue(name string) bool { return strings.HasPrefix(name, "garbage_collector_") }

// stripStability drops component-base's stability prefix ("[ALPHA] "):
// a series kgc's library registers with plain client_golang has the same
// help without it.
func stripStability(help string) string {
	return regexp.MustCompile(`^\[[A-Z]+\] `).ReplaceAllString(help, "")
}

func readContract(t *testing.T) []series {
	t.Helper()
	b, err := os.ReadFile(contractPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []series
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", contractPath, err)
	}
	return out
}

// diffSeries lists the families that differ, one per line.
func diffSeries(want, got []series) string {
	index := func(ss []series) map[string]string {
		m := map[string]string{}
		for _, s := range ss {
			b, _ := json.Marshal(s)
			m[s.Name] = string(b)
		}
		return m
	}
	w, g := index(want), index(got)
	var lines []string
	for name, ws := range w {
		if gs := g[name]; gs != ws {
			lines = append(lines, "- "+ws)
			if gs != "" {
				lines = append(lines, "+ "+gs)
			}
		}
	}
	for name, gs := range g {
		if _, ok := w[name]; !ok {
			lines = append(lines, "+ "+gs)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// runCascades creates two owners with dependents each, deletes one
// Background and one Orphan, and waits until the cluster's collector has
// done both: the first's dependents gone, the second gone and its
// dependents without its reference.
func runCascades(ctx context.Context, t *testing.T, ns, prefix string) {
	t.Helper()
	cms := client.CoreV1().ConfigMaps(ns)
	policies := map[string]metav1.DeletionPropagation{"background": metav1.DeletePropagationBackground, "orphan": metav1.DeletePropagationOrphan}
	for kind, policy := range policies {
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + kind}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", prefix, kind, i),
				OwnerReferences: []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", owner.Name, owner.UID, false)}}}
			if _, err := cms.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for kind := range policies {
			if _, err := cms.Get(ctx, prefix+"-"+kind, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil //nolint:nilerr // still there, or a transient error
			}
			for i := range 3 {
				dep, err := cms.Get(ctx, fmt.Sprintf("%s-%s-%d", prefix, kind, i), metav1.GetOptions{})
				switch {
				case kind == "background" && !apierrors.IsNotFound(err):
					return false, nil //nolint:nilerr // not collected yet
				case kind == "orphan" && (err != nil || len(dep.OwnerReferences) > 0):
					return false, nil //nolint:nilerr // not orphaned yet
				}
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the %s cascades did not finish: %v", prefix, err)
	}
}

func createNamespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	ns := testenv.NamespaceName(t.Name())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// servingRE finds the address in kgc's "Serving plain HTTP" line (the
// loopback listener --http-address asks for), text or JSON.
var servingRE = regexp.MustCompile(`"Serving plain HTTP[^"]*".*address"?[=:]"([^"]+)"`)

// waitServing waits until p serves HTTP and returns its address.
func waitServing(ctx context.Context, t *testing.T, p *testenv.Proc) string {
	t.Helper()
	var addr string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if m := servingRE.FindStringSubmatch(p.Line(t, "Serving plain HTTP")); m != nil {
			addr = m[1]
			return true, nil
		}
		if code, ok := p.Exited(); ok {
			return false, fmt.Errorf("kgc exited %d", code)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("kgc does not serve HTTP: %v", err)
	}
	return addr
}

// scrape reads kgc's /metrics.
func scrape(ctx context.Context, addr string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return nil, fmt.Errorf("/metrics: %s: %s", res.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(res.Body)
}
