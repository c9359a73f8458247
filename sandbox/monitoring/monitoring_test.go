package monitoring

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// repoRoot is the repository's root, where deploy/ and docs/ are.
const repoRoot = "../.."

const (
	rulePath      = "deploy/monitoring/prometheusrule.yaml"
	dashboardPath = "deploy/monitoring/grafana-dashboard.json"
	kcmContract   = "internal/metrics/testdata/kcm-collector-series.json"
	// runbookURL is where each alert's runbook_url points: the page
	// docs/runbooks/<alert>.md on the main branch.
	runbookURL = "https://github.com/kgc-dev/kgc/blob/main/docs/runbooks/"
)

// targetLabels are the labels Prometheus attaches to every series of a
// target when it scrapes it (the static job and instance, and those the
// Prometheus Operator's ServiceMonitor and PodMonitor add), which
// expressions may select and aggregate on besides a series' own.
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// family is a metric family kgc exports.
type family struct {
	labels []string
	// histogram: the family is exposed as <name>_bucket, _sum and _count.
	histogram bool
	// values are the only values a label takes, where they are known.
	values map[string][]string
}

// exported returns every metric family kgc exports, by name.
func exported(t *testing.T) map[string]family {
	t.Helper()
	out := map[string]family{}

	// kgc's own, from the registry a collector registers them on. Its
	// descriptors name every family, a labelled one with no series yet
	// too (monitors before the first discovery, API requests before the
	// first request); Gather tells the types of those it has samples for.
	rec := &describingRegisterer{Registry: prometheus.NewRegistry()}
	if _, err := kgc.New(&rest.Config{Host: "http://127.0.0.1:1"}, kgc.Options{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	gathered, err := rec.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, mf := range gathered {
		types[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	for _, d := range rec.descs {
		name, labels := parseDesc(t, d)
		out[name] = family{labels: labels, histogram: types[name] == "histogram"}
	}
	if len(out) == 0 {
		t.Fatal("kgc registered no metric")
	}

	// kube-controller-manager's, which kgc run exports on top through
	// component-base's process-wide registry; the contract is what
	// sandbox/integration/signals checks the binary against.
	data, err := os.ReadFile(filepath.Join(repoRoot, kcmContract))
	if err != nil {
		t.Fatal(err)
	}
	var contract []struct {
		Name   string              `json:"name"`
		Type   string              `json:"type"`
		Labels []string            `json:"labels"`
		Select map[string][]string `json:"select"`
	}
	if err := json.Unmarshal(data, &contract); err != nil {
		t.Fatalf("%s: %v", kcmContract, err)
	}
	for _, s := range contract {
		if f, ok := out[s.Name]; ok && !slices.Equal(f.labels, s.Labels) {
			t.Errorf("%s: kgc's registry has labels %q, the contract %q", s.Name, f.labels, s.Labels)
		}
		out[s.Name] = family{labels: s.Labels, histogram: s.Type == "histogram", values: s.Select}
	}
	return out
}

// describingRegisterer registers on its registry and records the
// descriptors of what it registers.
type describingRegisterer struct {
	*prometheus.Registry
	descs []*prometheus.Desc
}

func (r *describingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// descString matches what prometheus.Desc's String says: the one way
// client_golang shows a descriptor's name and variable labels.
var descString = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), .*, variableLabels: \{([^{}]*)\}\}$`)

// parseDesc returns a descriptor's metric name and its labels, sorted.
func parseDesc(t *testing.T, d *prometheus.Desc) (string, []string) {
	t.Helper()
	m := descString.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("cannot read the descriptor %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		t.Fatalf("descriptor %s: %v", d, err)
	}
	var labels []string
	for l := range strings.SplitSeq(m[2], ",") {
		// A constrained label shows as c(name).
		if l = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "c("), ")"); l != "" {
			labels = append(labels, l)
		}
	}
	slices.Sort(labels)
	return name, labels
}

// checkExpr parses expr as PromQL and returns what is wrong with the series
// it selects: a name kgc does not export, a label its family lacks, a value
// its label never takes.
func checkExpr(expr string, families map[string]family) []string {
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	selected := 0
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selected++
		if vs.Name == "" {
			problems = append(problems, fmt.Sprintf("%s selects no metric by name", vs))
			return nil
		}
		f, suffix, ok := lookup(vs.Name, families)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: kgc exports no series %s", vs, vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			switch {
			case m.Name == labels.MetricName:
			case m.Name == "le" && suffix == "_bucket":
			case slices.Contains(targetLabels, m.Name):
			case !slices.Contains(f.labels, m.Name):
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s (it has %q)", vs, vs.Name, m.Name, f.labels))
			case f.values[m.Name] != nil && !slices.ContainsFunc(f.values[m.Name], m.Matches):
				problems = append(problems, fmt.Sprintf("%s: %s matches none of the values %q of %s", vs, m, f.values[m.Name], m.Name))
			}
		}
		return nil
	})
	if selected == 0 {
		problems = append(problems, "selects no series")
	}
	return problems
}

// lookup finds the family a series name belongs to: its own, or a
// histogram's whose _bucket, _sum or _count series it is.
func lookup(name string, families map[string]family) (family, string, bool) {
	if f, ok := families[name]; ok {
		return f, "", true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if f, ok := families[base]; ok && f.histogram {
				return f, suffix, true
			}
		}
	}
	return family{}, "", false
}

// prometheusRule is the part of a PrometheusRule this test reads; its
// spec's groups are a Prometheus rule file's.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Groups []any `json:"groups"`
	} `json:"spec"`
}

// readRules reads the PrometheusRule and validates its groups as
// Prometheus validates a rule file: the fields, durations, label names
// and annotation templates.
func readRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, rulePath))
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatalf("%s: %v", rulePath, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" {
		t.Fatalf("%s: a %s %s named %q, want a monitoring.coreos.com/v1 PrometheusRule", rulePath, pr.APIVersion, pr.Kind, pr.Metadata.Name)
	}
	if pr.Metadata.Namespace != "kgc-system" {
		t.Errorf("%s: in namespace %q, want kgc's, kgc-system", rulePath, pr.Metadata.Namespace)
	}
	groups, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(groups, false, model.UTF8Validation)
	for _, err := range errs {
		t.Errorf("%s: %v", rulePath, err)
	}
	if rgs == nil || len(rgs.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulePath)
	}
	return rgs
}

// TestAlerts checks every alert of the PrometheusRule: its expression
// selects only series kgc exports, and it says how bad it is, what
// happened, and where its runbook is.
func TestAlerts(t *testing.T) {
	families := exported(t)
	alerts := 0
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a recording rule %s; only alerts are shipped", g.Name, r.Record)
				continue
			}
			alerts++
			for _, p := range checkExpr(r.Expr, families) {
				t.Errorf("alert %s: %s", r.Alert, p)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			if want := runbookURL + r.Alert + ".md"; r.Annotations["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, "docs", "runbooks", r.Alert+".md")); err != nil {
				t.Errorf("alert %s: no runbook: %v", r.Alert, err)
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("%s has no alerts", rulePath)
	}
}

// dashboard is the part of a Grafana dashboard this test reads.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// grafanaIntervals are the interval variables Grafana replaces before it
// sends an expression to Prometheus; a duration stands for each here.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// TestDashboard checks every panel target of the Grafana dashboard as
// TestAlerts checks the alerts' expressions.
func TestDashboard(t *testing.T) {
	families := exported(t)
	data, err := os.ReadFile(filepath.Join(repoRoot, dashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: want a title and a uid", dashboardPath)
	}
	targets := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no target", p.Title)
			}
			for _, tg := range p.Targets {
				targets++
				for _, problem := range checkExpr(grafanaIntervals.Replace(tg.Expr), families) {
					t.Errorf("panel %q, target %s: %s", p.Title, tg.RefID, problem)
				}
			}
		}
	}
	walk(d.Panels)
	if targets == 0 {
		t.Fatalf("%s has no panel targets", dashboardPath)
	}
}

// TestCheckExpr shows that the checks above can fail: series kgc does not
// export, inside absent() too, labels they lack, and values they never
// take are each found.
func TestCheckExpr(t *testing.T) {
	families := exported(t)
	for expr, want := range map[string]string{
		`rate(kgc_no_such_series_total[5m]) > 0`:                                 "kgc exports no series kgc_no_such_series_total",
		`absent(kgc_build_information)`:                                          "kgc exports no series kgc_build_information",
		`kgc_operations_total_bucket`:                                            "kgc exports no series kgc_operations_total_bucket",
		`kgc_orphan_journal_writes_total{result="error"}`:                        "has no label result",
		`workqueue_depth{name="garbage_collector_attempt_to_delete_typo"}`:       "matches none of the values",
		`sum(rate(kgc_operations_total[5m]`:                                      "unclosed",
		`max(kgc_monitor_state{state="failing"}) == 1 and up{job="kgc"} == 1`:    "kgc exports no series up",
		`histogram_quantile(0.9, rate(kgc_cascade_duration_seconds_bucket[5m]))`: "",
	} {
		got := strings.Join(checkExpr(expr, families), "; ")
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("checkExpr(%s) = %q, want %q", expr, got, want)
		}
	}
}
