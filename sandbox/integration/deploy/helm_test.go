package deploy

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// chartDir is kgc's Helm chart.
	chartDir = "charts/kgc"
	// chartRelease is the release name the tests install as, the install
	// guide's (`helm install kgc ./charts/kgc -n kgc-system`): the chart
	// then names its objects as deploy/ does.
	chartRelease = "kgc"
	// chartRule is the chart's copy of monitoringRule.
	chartRule = chartDir + "/files/prometheusrule.yaml"
	// haValues are the chart's values for kustomize/overlays/ha's install.
	haValues = chartDir + "/values-ha.yaml"
)

// loadChart loads the chart directory as `helm install ./charts/kgc` does.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.LoadDir(filepath.Join(repoRoot, chartDir))
	if err != nil {
		t.Fatalf("loading %s: %v", chartDir, err)
	}
	return ch
}

// renderChartErr renders the chart as `helm install kgc ./charts/kgc -n
// kgc-system` with vals (the user's values, merged over values.yaml) would:
// the values checked against values.schema.json, every template rendered.
// It returns the objects in file-name order, and NOTES.txt.
func renderChartErr(t *testing.T, vals map[string]any) ([]manifest, string, error) {
	t.Helper()
	ch := loadChart(t)
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{Name: chartRelease, Namespace: kgcNamespace, Revision: 1, IsInstall: true}, nil)
	if err != nil {
		return nil, "", err
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, "", err
	}
	var out []manifest
	var notes string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		rel := strings.TrimPrefix(name, ch.Name()+"/")
		if filepath.Base(name) == "NOTES.txt" {
			notes = files[name]
			continue
		}
		out = append(out, decodeManifests(t, filepath.Join(chartDir, rel), []byte(files[name]))...)
	}
	return out, notes, nil
}

// renderChart is renderChartErr for values that must render.
func renderChart(t *testing.T, vals map[string]any) []manifest {
	t.Helper()
	out, notes, err := renderChartErr(t, vals)
	if err != nil {
		t.Fatalf("rendering %s with %v: %v", chartDir, vals, err)
	}
	if strings.TrimSpace(notes) == "" {
		t.Errorf("%s with %v renders no NOTES.txt", chartDir, vals)
	}
	return out
}

// chartObjects splits a rendering into the objects checkCoherent knows —
// with deploy/'s Namespace first, which the chart leaves to
// deploy/00-namespace.yaml — and the rest.
func chartObjects(t *testing.T, rendered []manifest) (core, extra []manifest) {
	t.Helper()
	inBase := map[string]bool{}
	for _, m := range render(t, kustomizeDir+"/base") {
		if m.obj.GetKind() == "Namespace" {
			core = append(core, m)
			continue
		}
		inBase[objectID(m.obj)] = true
	}
	for _, m := range rendered {
		if m.obj.GetKind() == "Namespace" {
			t.Errorf("%s: the chart renders a Namespace; deploy/00-namespace.yaml makes it, with its Pod Security label", m)
		}
		if inBase[objectID(m.obj)] {
			core = append(core, m)
		} else {
			extra = append(extra, m)
		}
	}
	return core, extra
}

// readValues reads a values file of the chart (relative to the repository).
func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{}
	if err := yaml.Unmarshal(data, &vals); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return vals
}

// withValue returns vals with the dotted path set to v, creating tables.
func withValue(vals map[string]any, path string, v any) map[string]any {
	out := map[string]any{}
	if vals != nil {
		data, _ := json.Marshal(vals)
		_ = json.Unmarshal(data, &out)
	}
	m := out
	keys := strings.Split(path, ".")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
	return out
}

// valueAt returns the value at a dotted path of vals.
func valueAt(vals map[string]any, path string) (any, bool) {
	var v any = vals
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// leaves returns the dotted paths of vals' non-table values (a list or an
// empty table is a leaf).
func leaves(vals map[string]any, prefix string) []string {
	var out []string
	for k, v := range vals {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			out = append(out, leaves(m, prefix+k+".")...)
			continue
		}
		out = append(out, prefix+k)
	}
	slices.Sort(out)
	return out
}

// chartDeployment returns a rendering's Deployment.
func chartDeployment(t *testing.T, rendered []manifest) *unstructured.Unstructured {
	t.Helper()
	for _, m := range rendered {
		if m.obj.GetKind() == "Deployment" {
			return m.obj
		}
	}
	t.Fatal("the chart renders no Deployment")
	return nil
}

// containerArgs returns the Deployment's kgc container's arguments.
func containerArgs(t *testing.T, d *unstructured.Unstructured) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("the Deployment has %d containers, want 1", len(containers))
	}
	var args []string
	for _, a := range containers[0].(map[string]any)["args"].([]any) {
		args = append(args, a.(string))
	}
	return args
}

// TestHelmChart checks the chart's metadata and that its default rendering
// is the kustomize base's install: the same objects (but the Namespace,
// which deploy/00-namespace.yaml makes, and the breaker operator's
// Role of deploy/operators/, which the chart adds), each RBAC object with
// the base's rules, role and subjects, and a Deployment running the base's
// image with exactly the base's arguments. The labels differ, by design:
// the chart's are Helm's (app.kubernetes.io/instance, helm.sh/chart, …).
func TestHelmChart(t *testing.T) {
	ch := loadChart(t)
	base := render(t, kustomizeDir+"/base")
	baseDeployment := chartDeployment(t, base)
	image := baseDeployment.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"].(string)
	tag := image[strings.LastIndex(image, ":")+1:]
	md := ch.Metadata
	if md.APIVersion != chart.APIVersionV2 || md.Name != "kgc" || md.Version != "0.1.0" || md.AppVersion != tag {
		t.Errorf("Chart.yaml: apiVersion %q, name %q, version %q, appVersion %q; want v2, kgc, 0.1.0 and the base's image tag %q", md.APIVersion, md.Name, md.Version, md.AppVersion, tag)
	}

	rendered := renderChart(t, nil)
	core, extra := chartObjects(t, rendered)
	in := checkCoherent(t, core, pinnedImage)

	// The base's objects, by identity; the chart's extra is the breaker
	// operator's Role, the same as deploy/operators'.
	baseObjs := map[string]*unstructured.Unstructured{}
	for _, m := range base {
		baseObjs[objectID(m.obj)] = m.obj
	}
	for _, m := range core[1:] {
		delete(baseObjs, objectID(m.obj))
	}
	for id := range baseObjs {
		if !strings.HasPrefix(id, "Namespace ") {
			t.Errorf("the chart does not render the base's %s", id)
		}
	}
	operators := loadManifestsIn(t, breakerOperatorDir)
	if len(extra) != 1 || len(operators) != 1 || objectID(extra[0].obj) != objectID(operators[0].obj) {
		t.Fatalf("the chart renders %v beyond the base, want only %s's Role", extra, breakerOperatorDir)
	}
	if got, want := typed[rbacv1.Role](t, extra[0]), typed[rbacv1.Role](t, operators[0]); !reflect.DeepEqual(got.Rules, want.Rules) {
		t.Errorf("%s rules = %+v, want %s's %+v", extra[0], got.Rules, breakerOperatorDir, want.Rules)
	}

	// What the API server authorizes by and what kgc runs with are the
	// base's; only metadata differs.
	renderedByID := map[string]*unstructured.Unstructured{}
	for _, m := range core {
		renderedByID[objectID(m.obj)] = m.obj
	}
	for _, m := range base {
		got := renderedByID[objectID(m.obj)]
		if got == nil {
			continue
		}
		for _, field := range []string{"rules", "roleRef", "subjects"} {
			if !reflect.DeepEqual(got.Object[field], m.obj.Object[field]) {
				t.Errorf("%s: %s = %v, want the base's %v", m, field, got.Object[field], m.obj.Object[field])
			}
		}
	}
	if got, want := containerArgs(t, chartDeployment(t, rendered)), containerArgs(t, baseDeployment); !slices.Equal(got, want) {
		t.Errorf("the chart's kgc run arguments %q, want the base's %q", got, want)
	}
	wantContainer := baseDeployment.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0]
	gotContainer := chartDeployment(t, rendered).Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0]
	if !reflect.DeepEqual(gotContainer, wantContainer) {
		t.Errorf("the chart's container differs from the base's:\n got %v\nwant %v", gotContainer, wantContainer)
	}
	spec := in.deployment.Spec.Template.Spec
	if spec.PriorityClassName != "" || in.deployment.Spec.Strategy.Type != "" {
		t.Errorf("priorityClassName %q, strategy %+v: want the base's (none)", spec.PriorityClassName, in.deployment.Spec.Strategy)
	}
	// The base's preference for other nodes, selecting the release's pods.
	aa := spec.Affinity.PodAntiAffinity
	if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) > 0 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Fatalf("pod anti-affinity %+v: want the base's one preference", aa)
	}
	term := aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
	if err != nil || term.TopologyKey != "kubernetes.io/hostname" || !sel.Matches(labels.Set(in.deployment.Spec.Template.Labels)) {
		t.Errorf("pod anti-affinity term %+v: want kgc's pods by kubernetes.io/hostname (%v)", term, err)
	}
	if slices.ContainsFunc(rendered, func(m manifest) bool { return m.obj.GetKind() == "PodDisruptionBudget" }) {
		t.Error("the default values render a PodDisruptionBudget; the base has none")
	}
	for _, m := range rendered {
		l := m.obj.GetLabels()
		for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
			if l[k] == "" {
				t.Errorf("%s: no label %s", m, k)
			}
		}
	}
}

// TestHelmValuesSchema checks that values.schema.json refuses what a typo
// or a wrong type would silently ignore or break, with an error naming the
// key, and that every object of the schema closes its properties (but for
// the Kubernetes objects it passes through, which the API server checks).
func TestHelmValuesSchema(t *testing.T) {
	for _, c := range []struct {
		name string
		vals map[string]any
		want []string // in the error
	}{
		{"misspelled top-level key", map[string]any{"replicass": 3}, []string{"replicass"}},
		{"misspelled nested key", map[string]any{"breaker": map[string]any{"enabeld": false}}, []string{"enabeld", "breaker"}},
		{"string for an integer", map[string]any{"replicas": "two"}, []string{"replicas", "integer"}},
		{"string for a boolean", map[string]any{"shadow": map[string]any{"enabled": "yes"}}, []string{"shadow", "boolean"}},
		{"not a duration", map[string]any{"leaderElection": map[string]any{"leaseDuration": "15"}}, []string{"leaseDuration"}},
		{"unknown preset", map[string]any{"podAntiAffinity": "always"}, []string{"podAntiAffinity"}},
		{"zero QPS", map[string]any{"kubeAPI": map[string]any{"qps": 0}}, []string{"qps"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := renderChartErr(t, c.vals)
			if err == nil {
				t.Fatalf("values %v render", c.vals)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("values %v: error %q does not name %q", c.vals, err, w)
				}
			}
			t.Logf("%v", err)
		})
	}

	data, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("values.schema.json: $schema %v, want draft-07", schema["$schema"])
	}
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		if s["type"] == "object" {
			desc, _ := s["description"].(string)
			passThrough := strings.Contains(desc, "a Kubernetes object") || path == ".global"
			if ap, ok := s["additionalProperties"]; !passThrough && (!ok || ap == true) {
				t.Errorf("values.schema.json%s: an object without additionalProperties false (or a schema for them)", path)
			}
		}
		for _, key := range []string{"properties", "patternProperties"} {
			props, _ := s[key].(map[string]any)
			for k, p := range props {
				walk(path+"."+k, p.(map[string]any))
			}
		}
		for _, key := range []string{"items", "additionalProperties"} {
			if sub, ok := s[key].(map[string]any); ok {
				walk(path+"["+key+"]", sub)
			}
		}
	}
	walk("", schema)
}

// flagValues maps each values field that sets a kgc run flag to the flag,
// with a value other than the default. tlsSecretName, which sets two
// flags and a volume, is TestHelmFlags' own case.
var flagValues = []struct {
	path  string
	value any
	flag  string
}{
	{"leaderElection.enabled", false, "leader-elect"},
	{"leaderElection.resourceName", "kgc-blue", "leader-elect-resource-name"},
	{"leaderElection.leaseDuration", "30s", "leader-elect-lease-duration"},
	{"leaderElection.renewDeadline", "12s", "leader-elect-renew-deadline"},
	{"leaderElection.retryPeriod", "4s", "leader-elect-retry-period"},
	{"kubeAPI.qps", -1, "kube-api-qps"},
	{"kubeAPI.burst", 100, "kube-api-burst"},
	{"kubeAPI.contentType", "application/vnd.kubernetes.protobuf", "kube-api-content-type"},
	{"workers.concurrentGCSyncs", 40, "concurrent-gc-syncs"},
	{"workers.maxWritesInflight", 100, "max-writes-inflight"},
	{"breaker.enabled", false, "deletion-breaker"},
	{"breaker.window", "30m", "breaker-window"},
	// Large enough to print in exponent form as a float.
	{"breaker.unobservedOwners", 2000000, "breaker-unobserved-owners"},
	{"breaker.vanishedMinimum", 0, "breaker-vanished-minimum"},
	{"breaker.rollback", false, "breaker-rollback"},
	{"breaker.danglingFraction", 0.05, "breaker-dangling-fraction"},
	{"breaker.danglingMinimum", 500, "breaker-dangling-minimum"},
	{"breaker.holdRestoredReferences", false, "hold-restored-references"},
	{"orphanJournal.enabled", false, "orphan-journal"},
	{"orphanJournal.ttl", "1h", "orphan-journal-ttl"},
	{"namespaceLifecycle.enabled", true, "namespace-lifecycle"},
	{"shadow.enabled", true, "dry-run"},
	{"shadow.window", "5m", "shadow-window"},
	{"serving.securePort", 10443, "secure-port"},
	{"serving.profiling", true, "profiling"},
	{"logging.format", "json", "logging-format"},
	{"logging.verbosity", 2, "v"},
}

// flagGroups are the values.yaml tables of kgc run's flags: each of their
// fields must be in flagValues (or be tlsSecretName).
var flagGroups = []string{"leaderElection", "kubeAPI", "workers", "breaker", "orphanJournal", "namespaceLifecycle", "shadow", "serving", "logging"}

// TestHelmFlags checks each values field against the kgc run flag it
// claims: values.yaml's default is the flag's default (so that the chart,
// which passes a flag only away from its default, runs kgc as the values
// say), and another value reaches kgc run as that flag, parsed and
// validated by kgc run itself, so that every flag the Deployment passes is
// a real one. Every field of the flag groups is covered.
func TestHelmFlags(t *testing.T) {
	defaults := readValues(t, chartDir+"/values.yaml")
	covered := map[string]bool{"serving.tlsSecretName": true}
	for _, f := range flagValues {
		covered[f.path] = true
	}
	for _, g := range flagGroups {
		table, _ := defaults[g].(map[string]any)
		if len(table) == 0 {
			t.Errorf("values.yaml has no %s", g)
		}
		for _, leaf := range leaves(table, g+".") {
			if !covered[leaf] {
				t.Errorf("values.yaml's %s maps to no flag in flagValues", leaf)
			}
		}
	}

	_, fresh := parseRun(t, []string{"run"})
	for _, f := range flagValues {
		t.Run(f.path, func(t *testing.T) {
			def, ok := valueAt(defaults, f.path)
			if !ok {
				t.Fatalf("values.yaml has no %s", f.path)
			}
			fl := fresh.Lookup(f.flag)
			if fl == nil {
				t.Fatalf("kgc run has no --%s", f.flag)
			}
			// kgc run's default, as the flag prints it, against values.yaml's.
			want := fl.DefValue
			if f.flag == "leader-elect" {
				want = "true" // kgc run's default in a cluster (no kubeconfig)
			}
			if got := canonical(t, f.flag, def); got != want {
				t.Errorf("values.yaml's %s is %v (--%s=%s), kgc run's default is %s", f.path, def, f.flag, got, want)
			}

			rendered := renderChart(t, withValue(nil, f.path, f.value))
			args := containerArgs(t, chartDeployment(t, rendered))
			_, fs := parseRun(t, args)
			got := fs.Lookup(f.flag)
			if !got.Changed {
				t.Fatalf("%s=%v: args %q do not pass --%s", f.path, f.value, args, f.flag)
			}
			if want := canonical(t, f.flag, f.value); got.Value.String() != want {
				t.Errorf("%s=%v: --%s is %s, want %s (args %q)", f.path, f.value, f.flag, got.Value.String(), want, args)
			}
			for _, a := range args[1:] {
				if !strings.HasPrefix(a, "--") {
					t.Errorf("argument %q is not a --flag", a)
				}
			}
		})
	}

	t.Run("extraArgs", func(t *testing.T) {
		args := containerArgs(t, chartDeployment(t, renderChart(t, map[string]any{"extraArgs": []any{"--write-history-size=20000", "--gc-percent=75"}})))
		_, fs := parseRun(t, args)
		if v := fs.Lookup("write-history-size").Value.String(); v != "20000" {
			t.Errorf("--write-history-size = %s from extraArgs (args %q)", v, args)
		}
		if v := fs.Lookup("gc-percent").Value.String(); v != "75" {
			t.Errorf("--gc-percent = %s from extraArgs (args %q)", v, args)
		}
	})

	t.Run("tlsSecretName", func(t *testing.T) {
		d := chartDeployment(t, renderChart(t, map[string]any{"serving": map[string]any{"tlsSecretName": "kgc-tls"}}))
		_, fs := parseRun(t, containerArgs(t, d))
		cert, key := fs.Lookup("tls-cert-file").Value.String(), fs.Lookup("tls-private-key-file").Value.String()
		volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		mounts, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "volumeMounts")
		if len(volumes) != 1 || len(mounts) != 1 {
			t.Fatalf("volumes %v, mounts %v: want the Secret's", volumes, mounts)
		}
		secret, _, _ := unstructured.NestedString(volumes[0].(map[string]any), "secret", "secretName")
		dir := mounts[0].(map[string]any)["mountPath"].(string)
		if secret != "kgc-tls" || cert != dir+"/tls.crt" || key != dir+"/tls.key" {
			t.Errorf("Secret %q mounted at %s; --tls-cert-file=%s --tls-private-key-file=%s", secret, dir, cert, key)
		}
	})

	t.Run("shadow", func(t *testing.T) {
		// Shadow mode with the defaults: kgc turns the breaker and the
		// hold off itself, and leads on its own Lease, which the roles
		// for people name.
		rendered := renderChart(t, map[string]any{"shadow": map[string]any{"enabled": true}})
		opts, _ := parseRun(t, containerArgs(t, chartDeployment(t, rendered)))
		if !opts.DryRun || opts.Breaker != nil || opts.HoldRestored {
			t.Errorf("shadow: DryRun=%v Breaker=%v HoldRestored=%v, want shadow mode alone", opts.DryRun, opts.Breaker, opts.HoldRestored)
		}
		for _, m := range rendered {
			if m.obj.GetKind() != "Role" || !strings.HasSuffix(m.obj.GetName(), "-inspector") && !strings.HasSuffix(m.obj.GetName(), "-breaker-operator") {
				continue
			}
			names, _, _ := unstructured.NestedStringSlice(m.obj.Object["rules"].([]any)[0].(map[string]any), "resourceNames")
			if !slices.Equal(names, []string{"kgc-shadow"}) {
				t.Errorf("%s names the Lease %q, want the shadow kgc's [kgc-shadow]", m, names)
			}
		}
		_, _, err := renderChartErr(t, map[string]any{"shadow": map[string]any{"enabled": true}, "namespaceLifecycle": map[string]any{"enabled": true}})
		if err == nil || !strings.Contains(err.Error(), "exclude each other") {
			t.Errorf("shadow with the namespace lifecycle: %v, want a refusal", err)
		}
	})

	t.Run("image", func(t *testing.T) {
		const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		for _, c := range []struct {
			image map[string]any
			want  string
		}{
			{map[string]any{"repository": "registry.example.com/kgc", "tag": "dev"}, "registry.example.com/kgc:dev"},
			{map[string]any{"digest": digest}, "ghcr.io/kgc-dev/kgc@" + digest},
			{map[string]any{"tag": "v0.1.0", "digest": digest, "pullPolicy": "Always"}, "ghcr.io/kgc-dev/kgc:v0.1.0@" + digest},
		} {
			d := chartDeployment(t, renderChart(t, map[string]any{"image": c.image}))
			containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
			if got := containers[0].(map[string]any)["image"]; got != c.want {
				t.Errorf("image values %v: image %v, want %s", c.image, got, c.want)
			}
		}
	})
}

// canonical returns v as kgc run's flag prints it once set to v.
func canonical(t *testing.T, flag string, v any) string {
	t.Helper()
	_, fs := parseRun(t, []string{"run"})
	s := fmt.Sprint(v)
	if f, ok := v.(float64); ok {
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	if err := fs.Set(flag, s); err != nil {
		t.Fatalf("--%s=%s: %v", flag, s, err)
	}
	return fs.Lookup(flag).Value.String()
}

// TestHelmInstall server-side applies the chart's default rendering to the
// API server, as helm install does (the objects, into the namespace
// deploy/00-namespace.yaml makes), and runs kgc in-process with the
// options its arguments give kgc run, as the rendered service account
// (impersonated), with exactly the rendered roles: leader election on the
// Lease, then Background, Foreground and Orphan cascades.
func TestHelmInstall(t *testing.T) {
	rendered := renderChart(t, nil)
	core, _ := chartObjects(t, rendered)
	in := checkCoherent(t, core, pinnedImage)
	a := newApplier(t, adminConfig)
	a.manager = installManager
	applyRendering(t, a, append(core[:1:1], rendered...), baseObjectIDs(t))
	opts := runOptions(t, in.deployment.Spec.Template.Spec.Containers[0].Args)
	if opts.DryRun || opts.NamespaceLifecycle || opts.Breaker == nil {
		t.Errorf("the chart's kgc: DryRun=%v NamespaceLifecycle=%v Breaker=%v, want a collecting kgc with the breaker", opts.DryRun, opts.NamespaceLifecycle, opts.Breaker)
	}
	collectAs(t, renderedIdentity(t, in), opts)
}

// baseObjectIDs are the kustomize base's objects, which applyRendering
// leaves in place (but for the workloads) for the other tests.
func baseObjectIDs(t *testing.T) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range render(t, kustomizeDir+"/base") {
		ids[objectID(m.obj)] = true
	}
	return ids
}

// TestHelmHA renders the chart with values-ha.yaml, the ha overlay's
// install, applies it and checks the overlay's promises (TestKustomizeOverlays'
// checkHA): two replicas that never share a node, replaced one at a time,
// a PodDisruptionBudget, the critical priority as the API server resolves
// it. A budget is rendered only with more than one replica.
func TestHelmHA(t *testing.T) {
	rendered := renderChart(t, readValues(t, haValues))
	core, extra := chartObjects(t, rendered)
	in := checkCoherent(t, core, pinnedImage)
	var pdb *policyv1.PodDisruptionBudget
	for _, m := range extra {
		if m.obj.GetKind() == "PodDisruptionBudget" {
			pdb = typed[policyv1.PodDisruptionBudget](t, m)
		}
	}
	if pdb == nil {
		t.Fatalf("%s renders no PodDisruptionBudget", haValues)
	}
	a := newApplier(t, adminConfig)
	a.manager = installManager
	_, pod := applyRendering(t, a, append(core[:1:1], rendered...), baseObjectIDs(t))
	checkHA(t, in, pdb, pod)

	one := withValue(readValues(t, haValues), "replicas", 1)
	for _, m := range renderChart(t, one) {
		if m.obj.GetKind() == "PodDisruptionBudget" {
			t.Errorf("one replica renders %s, which would block every drain", m)
		}
	}
}

// TestHelmOptionalObjects renders what the chart adds on request: the
// Prometheus Operator's objects (checked as the monitoring overlay's, the
// rule the same as deploy/monitoring's, whose copy in the chart must be
// byte for byte that file), the namespace lifecycle's role and flag (as
// the namespace-lifecycle overlay's), and a NetworkPolicy, which the API
// server takes.
func TestHelmOptionalObjects(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(repoRoot, monitoringRule))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(repoRoot, chartRule))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from %s: copy it (cp %s %s)", chartRule, monitoringRule, monitoringRule, chartRule)
	}

	t.Run("monitoring", func(t *testing.T) {
		rendered := renderChart(t, map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
			"prometheusRule": map[string]any{"enabled": true},
		})
		core, extra := chartObjects(t, rendered)
		in := checkCoherent(t, core, pinnedImage)
		extra = slices.DeleteFunc(extra, func(m manifest) bool { return m.obj.GetKind() == "Role" })
		var kinds []string
		for _, m := range extra {
			kinds = append(kinds, m.obj.GetKind())
		}
		slices.Sort(kinds)
		if !slices.Equal(kinds, []string{"PrometheusRule", "ServiceMonitor"}) {
			t.Fatalf("monitoring values add %q, want a PrometheusRule and a ServiceMonitor", kinds)
		}
		checkMonitoring(t, in, extra)
		for _, m := range extra {
			if m.obj.GetKind() == "ServiceMonitor" && m.obj.GetLabels()["release"] != "prometheus" {
				t.Errorf("%s: labels %v lack serviceMonitor.labels", m, m.obj.GetLabels())
			}
		}
	})

	t.Run("namespace lifecycle", func(t *testing.T) {
		rendered := renderChart(t, map[string]any{"namespaceLifecycle": map[string]any{"enabled": true}})
		core, extra := chartObjects(t, rendered)
		in := checkCoherent(t, core, pinnedImage)
		extra = slices.DeleteFunc(extra, func(m manifest) bool { return m.obj.GetKind() == "Role" })
		checkOptionalRole(t, extra, in)
		if opts := runOptions(t, in.deployment.Spec.Template.Spec.Containers[0].Args); !opts.NamespaceLifecycle {
			t.Error("namespaceLifecycle.enabled: kgc run without --namespace-lifecycle")
		}
	})

	t.Run("network policy", func(t *testing.T) {
		from := []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "monitoring"}}}}
		rendered := renderChart(t, map[string]any{"networkPolicy": map[string]any{"enabled": true, "ingressFrom": from}})
		core, extra := chartObjects(t, rendered)
		in := checkCoherent(t, core, pinnedImage)
		var np *unstructured.Unstructured
		for _, m := range extra {
			if m.obj.GetKind() == "NetworkPolicy" {
				np = m.obj
			}
		}
		if np == nil {
			t.Fatal("networkPolicy.enabled renders no NetworkPolicy")
		}
		sel, _, _ := unstructured.NestedStringMap(np.Object, "spec", "podSelector", "matchLabels")
		if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(in.deployment.Spec.Template.Labels)) {
			t.Errorf("NetworkPolicy selects %v, not kgc's pods", sel)
		}
		ingress, _, _ := unstructured.NestedSlice(np.Object, "spec", "ingress")
		if len(ingress) != 1 || !reflect.DeepEqual(ingress[0].(map[string]any)["from"], from) {
			t.Errorf("NetworkPolicy ingress %v, want one rule from %v", ingress, from)
		}
		a := newApplier(t, adminConfig)
		a.applyClean(t, "dry run "+objectID(np), np, true)
	})
}

// collectAs runs kgc with opts as cfg (a rendered service account's
// identity), through client-go leader election on the rendered Role and
// TestRBACSufficient's cascades.
func collectAs(t *testing.T, cfg *rest.Config, opts kgc.Options) {
	t.Helper()
	t.Run("leader election", func(t *testing.T) { leaderElection(t, cfg) })
	opts.Registerer, opts.Logger = prometheus.NewRegistry(), testenv.Logger("kgc")
	gc, err := kgc.Start(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("starting kgc as %s: %v", cfg.Impersonate.UserName, err)
	}
	t.Cleanup(gc.Stop)
	cascades(t, gc)
	gc.Stop()
}

// TestHelmValuesDocumented checks that the chart's README lists every
// value of values.yaml (a table's row may stand for the fields below it).
func TestHelmValuesDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for line := range strings.Lines(string(readme)) {
		first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		if !ok || !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, name := range strings.Split(first, ", ") {
			documented[strings.Trim(name, "`")] = true
		}
	}
	for _, leaf := range leaves(readValues(t, chartDir+"/values.yaml"), "") {
		var found bool
		for p := leaf; p != "" && !found; {
			found = documented[p]
			i := strings.LastIndex(p, ".")
			if i < 0 {
				break
			}
			p = p[:i]
		}
		if !found {
			t.Errorf("%s/README.md does not list the value %s", chartDir, leaf)
		}
	}
}
