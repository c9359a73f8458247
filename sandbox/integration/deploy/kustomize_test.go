package deploy

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	authorizationv1 "k8s.io/api/authorization/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// kustomizeDir holds the kustomize base and overlays (kubectl apply -k).
	kustomizeDir = "kustomize"
	// installManager is the field manager that applies the renderings.
	installManager = "kgc-install-test"
	// monitoringRule is the PrometheusRule the monitoring overlay installs.
	monitoringRule = "deploy/monitoring/prometheusrule.yaml"
	// serviceAccountTokenFile is where a pod's service account token is
	// mounted: Prometheus scrapes kgc with its own.
	serviceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// pinnedImage is the base's image: a release tag, as docs/releasing.md's
// workflow pushes it.
var pinnedImage = regexp.MustCompile(`^ghcr\.io/kgc-dev/kgc:v\d+\.\d+\.\d+$`)

// kustomizations are the base and every overlay, relative to kustomizeDir.
var kustomizations = []string{"base", "overlays/ha", "overlays/shadow", "overlays/namespace-lifecycle", "overlays/monitoring"}

// render builds dir (relative to the repository root) as `kubectl apply -k`
// does: kustomize's default options, whose load restrictions keep every
// file a kustomization names inside its own directory — what users get
// without --load-restrictor.
func render(t *testing.T, dir string) []manifest {
	t.Helper()
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	data, err := resources.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return decodeManifests(t, dir, data)
}

// objectID names an object across renderings: group, kind, namespace, name.
func objectID(o *unstructured.Unstructured) string {
	return o.GroupVersionKind().GroupKind().String() + " " + objectKey(o)
}

// sameJSON reports whether two objects serialize to the same JSON.
func sameJSON(t *testing.T, a, b *unstructured.Unstructured) bool {
	t.Helper()
	ja, err := json.Marshal(a.Object)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

// TestKustomizeBase checks that the base is deploy/ — every object of its
// top-level files, unchanged — but for the Deployment's image, pinned to a
// release tag the changelog names. deploy/Kustomization lists the files:
// one left out, or one too many, fails here.
func TestKustomizeBase(t *testing.T) {
	base := render(t, kustomizeDir+"/base")
	rendered := map[string]manifest{}
	for _, m := range base {
		rendered[objectID(m.obj)] = m
	}
	plain := loadManifests(t)
	if len(base) != len(plain) {
		t.Errorf("the base renders %d objects, deploy/ has %d: deploy/Kustomization must list exactly deploy/'s files", len(base), len(plain))
	}
	var image string
	for _, m := range plain {
		r, ok := rendered[objectID(m.obj)]
		if !ok {
			t.Errorf("%s is not in the base: list its file in deploy/Kustomization", m)
			continue
		}
		want := m.obj.DeepCopy()
		if want.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(r.obj.Object, "spec", "template", "spec", "containers")
			if len(containers) != 1 {
				t.Fatalf("the base's Deployment has %d containers, want 1", len(containers))
			}
			image, _ = containers[0].(map[string]any)["image"].(string)
			wantContainers, _, _ := unstructured.NestedSlice(want.Object, "spec", "template", "spec", "containers")
			wantContainers[0].(map[string]any)["image"] = image
			if err := unstructured.SetNestedSlice(want.Object, wantContainers, "spec", "template", "spec", "containers"); err != nil {
				t.Fatal(err)
			}
		}
		if !sameJSON(t, want, r.obj) {
			t.Errorf("the base's %s differs from deploy/'s beyond the image:\n got %v\nwant %v", objectID(m.obj), r.obj.Object, want.Object)
		}
	}
	checkCoherent(t, base, pinnedImage)

	// The pinned version is one the changelog names: the release it
	// describes next ("(v0.1.0)") or one it records ("## [0.1.0]").
	tag := image[strings.LastIndex(image, ":")+1:]
	changelog, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "("+tag+")") && !strings.Contains(string(changelog), "## ["+strings.TrimPrefix(tag, "v")+"]") {
		t.Errorf("the base pins %s, a version CHANGELOG.md does not name", image)
	}
}

// TestKustomizeOverlays renders the base and every overlay, server-side
// applies each rendering to the API server (kinds it does not serve, the
// Prometheus Operator's, are only rendered), checks the objects with
// TestManifestsCoherent's checks, parses the Deployment's arguments as
// `kgc run` does, and checks what each overlay promises. The
// namespace-lifecycle and shadow overlays then run kgc in-process with the
// options their arguments give `kgc run`, as the rendered service account
// (impersonated), with exactly the rendered roles.
func TestKustomizeOverlays(t *testing.T) {
	inBase := map[string]bool{}
	for _, m := range render(t, kustomizeDir+"/base") {
		inBase[objectID(m.obj)] = true
	}
	a := newApplier(t, adminConfig)
	a.manager = installManager
	for _, name := range kustomizations {
		t.Run(name, func(t *testing.T) {
			rendered := render(t, kustomizeDir+"/"+name)
			var core, extra []manifest
			for _, m := range rendered {
				if inBase[objectID(m.obj)] {
					core = append(core, m)
				} else {
					extra = append(extra, m)
				}
			}
			in := checkCoherent(t, core, pinnedImage)
			skipped, pod := applyRendering(t, a, rendered, inBase)
			if len(skipped) > 0 && name != "overlays/monitoring" {
				t.Errorf("the API server serves no %q", skipped)
			}
			args := in.deployment.Spec.Template.Spec.Containers[0].Args
			opts := runOptions(t, args)
			kinds := func() []string {
				var out []string
				for _, m := range extra {
					out = append(out, m.obj.GetKind())
				}
				slices.Sort(out)
				return out
			}()

			switch name {
			case "base":
				if len(extra) > 0 {
					t.Errorf("the base has objects of its own: %q", kinds)
				}
				if opts.DryRun || opts.NamespaceLifecycle || opts.Breaker == nil {
					t.Errorf("the base's kgc: DryRun=%v NamespaceLifecycle=%v Breaker=%v, want a collecting kgc with the breaker", opts.DryRun, opts.NamespaceLifecycle, opts.Breaker)
				}

			case "overlays/ha":
				if !slices.Equal(kinds, []string{"PodDisruptionBudget"}) {
					t.Fatalf("ha adds %q, want a PodDisruptionBudget", kinds)
				}
				checkHA(t, in, typed[policyv1.PodDisruptionBudget](t, extra[0]), pod)

			case "overlays/shadow":
				if len(extra) > 0 {
					t.Errorf("shadow adds %q, want nothing but --dry-run", kinds)
				}
				if !slices.Contains(args, "--dry-run") {
					t.Errorf("shadow's args %q lack --dry-run", args)
				}
				// What `kgc run --dry-run` completes and validates: no
				// holds (refused with DryRun), no namespace lifecycle.
				if !opts.DryRun || opts.Breaker != nil || opts.HoldRestored || opts.NamespaceLifecycle {
					t.Errorf("shadow's kgc: DryRun=%v Breaker=%v HoldRestored=%v NamespaceLifecycle=%v, want shadow mode alone", opts.DryRun, opts.Breaker, opts.HoldRestored, opts.NamespaceLifecycle)
				}
				shadowMakesNoWrite(t, in, opts)

			case "overlays/namespace-lifecycle":
				if !slices.Contains(args, "--namespace-lifecycle") || !opts.NamespaceLifecycle {
					t.Errorf("namespace-lifecycle's args %q: want --namespace-lifecycle (NamespaceLifecycle=%v)", args, opts.NamespaceLifecycle)
				}
				checkOptionalRole(t, extra, in)
				collectAsRendered(t, in, opts)

			case "overlays/monitoring":
				if !slices.Equal(kinds, []string{"PrometheusRule", "ServiceMonitor"}) {
					t.Fatalf("monitoring adds %q, want a PrometheusRule and a ServiceMonitor", kinds)
				}
				slices.Sort(skipped)
				if !slices.Equal(skipped, []string{"PrometheusRule", "ServiceMonitor"}) {
					t.Logf("applied to the API server despite no Prometheus Operator: %q", skipped)
				}
				checkMonitoring(t, in, extra)
			}
		})
	}
}

// applyRendering server-side applies a rendering as installManager, the
// Namespace first as kubectl does, and a Pod of the Deployment's template
// with a dry run (Pod Security and priority admission judge Pods, not
// Deployments). It returns the kinds the API server does not serve, which
// are left out, and the dry-run Pod as admitted. When the test ends it
// removes what it applied beyond the base's Namespace and roles (which
// the other tests apply too, with the same values): the overlays' own
// objects, so that the next tests meet the base's permissions, and the
// workload objects, whose pinned image the other tests' applies of
// deploy/ would conflict with.
func applyRendering(t *testing.T, a *applier, rendered []manifest, inBase map[string]bool) (skipped []string, pod *unstructured.Unstructured) {
	t.Helper()
	ordered := slices.Clone(rendered)
	slices.SortStableFunc(ordered, func(x, y manifest) int {
		isNS := func(m manifest) bool { return m.obj.GetKind() == "Namespace" }
		switch {
		case isNS(x) && !isNS(y):
			return -1
		case isNS(y) && !isNS(x):
			return 1
		}
		return 0
	})
	for _, m := range ordered {
		ri, err := a.resource(m.obj)
		if meta.IsNoMatchError(err) {
			skipped = append(skipped, m.obj.GetKind())
			continue
		} else if err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		a.applyClean(t, "apply "+m.String(), m.obj, false)
		if !inBase[objectID(m.obj)] || !slices.Contains(rbacKinds, m.obj.GetKind()) {
			t.Cleanup(func() {
				err := ri.Delete(context.Background(), m.obj.GetName(), metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("removing %s: %v", m, err)
				}
			})
		}
		if m.obj.GetKind() == "Deployment" {
			pod = a.applyClean(t, "dry run a Pod of "+m.String(), podFromTemplate(t, m.obj), true)
		}
	}
	if pod == nil {
		t.Fatal("no Deployment in the rendering")
	}
	return skipped, pod
}

// runOptions returns the library options `kgc run` collects with, given a
// container's args (`run` first): kgc run's own flag parsing, completion
// and validation, so that an overlay's flags are refused here as the
// binary would refuse them.
func runOptions(t *testing.T, args []string) kgc.Options {
	t.Helper()
	opts, _ := parseRun(t, args)
	return opts
}

// parseRun is runOptions, also returning kgc run's flags as parsed (which
// were given, and their values).
func parseRun(t *testing.T, args []string) (kgc.Options, *pflag.FlagSet) {
	t.Helper()
	if len(args) == 0 || args[0] != "run" {
		t.Fatalf("container args %q: want `run` first", args)
	}
	var got *kgc.Options
	cmd := app.NewRunCommand(func(_ context.Context, o *app.RunOptions) error {
		lib := o.LibraryOptions()
		got = &lib
		return nil
	})
	cmd.SetArgs(args[1:])
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(t.Context()); err != nil || got == nil {
		t.Fatalf("kgc %q: %v", args, err)
	}
	return *got, cmd.Flags()
}

// checkHA checks the ha overlay's promises: two replicas never on the same
// node, replaced one at a time, a budget that keeps one through drains,
// and the critical priority, which the API server resolved for a Pod.
func checkHA(t *testing.T, in installed, pdb *policyv1.PodDisruptionBudget, pod *unstructured.Unstructured) {
	t.Helper()
	d := in.deployment
	tmpl := labels.Set(d.Spec.Template.Labels)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	spec := d.Spec.Template.Spec
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName = %q, want system-cluster-critical", spec.PriorityClassName)
	}
	if p, ok, _ := unstructured.NestedInt64(pod.Object, "spec", "priority"); !ok || p <= 0 {
		t.Errorf("the API server gave a Pod of the template priority %d (set: %v), want system-cluster-critical's", p, ok)
	}
	var spread bool
	if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
		for _, term := range spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err == nil && term.TopologyKey == "kubernetes.io/hostname" && sel.Matches(tmpl) {
				spread = true
			}
		}
	}
	if !spread {
		t.Errorf("affinity %+v: want a required pod anti-affinity of kgc's pods by kubernetes.io/hostname", spec.Affinity)
	}
	// One pod per node: a surge pod could find no node on a two-node
	// cluster, so the rollout replaces one at a time.
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("rolling update %+v: want maxSurge 0, maxUnavailable 1", d.Spec.Strategy.RollingUpdate)
	}
	if pdb.Namespace != d.Namespace || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget %s/%s: minAvailable %v, maxUnavailable %v; want minAvailable 1 in %s", pdb.Namespace, pdb.Name, pdb.Spec.MinAvailable, pdb.Spec.MaxUnavailable, d.Namespace)
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(tmpl) {
		t.Errorf("PodDisruptionBudget selector %+v does not select kgc's pods %v (%v)", pdb.Spec.Selector, tmpl, err)
	}
}

// checkMonitoring checks the monitoring overlay's objects, which the API
// server cannot take without the Prometheus Operator: the ServiceMonitor
// scrapes the metrics Service's HTTPS port with the scraper's service
// account token, and the PrometheusRule is deploy/monitoring's.
func checkMonitoring(t *testing.T, in installed, extra []manifest) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, monitoringRule))
	if err != nil {
		t.Fatal(err)
	}
	rules := decodeManifests(t, monitoringRule, data)
	svc := in.service
	for _, m := range extra {
		if m.obj.GetNamespace() != svc.Namespace {
			t.Errorf("%s: in namespace %q, want %q", m, m.obj.GetNamespace(), svc.Namespace)
		}
		switch m.obj.GetKind() {
		case "PrometheusRule":
			// The rules; the metadata is the installer's (the chart's
			// labels are Helm's).
			if len(rules) != 1 || !reflect.DeepEqual(rules[0].obj.Object["spec"], m.obj.Object["spec"]) {
				t.Errorf("%s's rules differ from %s", m, monitoringRule)
			}
		case "ServiceMonitor":
			o := m.obj.Object
			matchLabels, _, _ := unstructured.NestedStringMap(o, "spec", "selector", "matchLabels")
			if len(matchLabels) == 0 || !labels.SelectorFromSet(matchLabels).Matches(labels.Set(svc.Labels)) {
				t.Errorf("%s selects %v, not the Service %s (labels %v)", m, matchLabels, svc.Name, svc.Labels)
			}
			names, _, _ := unstructured.NestedStringSlice(o, "spec", "namespaceSelector", "matchNames")
			if !slices.Equal(names, []string{svc.Namespace}) {
				t.Errorf("%s looks in namespaces %q, want [%s]", m, names, svc.Namespace)
			}
			var https string
			for _, p := range svc.Spec.Ports {
				if p.Port == securePortNumber {
					https = p.Name
				}
			}
			endpoints, _, _ := unstructured.NestedSlice(o, "spec", "endpoints")
			if len(endpoints) != 1 {
				t.Fatalf("%s: %d endpoints, want 1", m, len(endpoints))
			}
			ep := endpoints[0].(map[string]any)
			skip, _, _ := unstructured.NestedBool(ep, "tlsConfig", "insecureSkipVerify")
			if ep["port"] != https || https == "" || ep["scheme"] != "https" || ep["path"] != "/metrics" || ep["bearerTokenFile"] != serviceAccountTokenFile || !skip {
				t.Errorf("%s endpoint %v: want port %q (the Service's %d), scheme https, path /metrics, bearerTokenFile %s, and no verification of kgc's self-signed certificate",
					m, ep, https, securePortNumber, serviceAccountTokenFile)
			}
		}
	}
}

// renderedIdentity returns the rendered service account's config, once the
// API server's authorizer has the rendered bindings: impersonation, so that
// every request is checked against exactly the roles the rendering grants.
func renderedIdentity(t *testing.T, in installed) *rest.Config {
	t.Helper()
	cfg := impersonating(in.serviceAccount.Namespace, in.serviceAccount.Name)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: "default"}, true)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"}, false)
	return cfg
}

// collectAsRendered runs kgc with opts (the namespace-lifecycle overlay's)
// as the rendered service account, through TestRBACSufficient's cascades
// and leader election, then deletes a namespace with it.
func collectAsRendered(t *testing.T, in installed, opts kgc.Options) {
	t.Helper()
	cfg := renderedIdentity(t, in)
	waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "deletecollection", Resource: "configmaps", Namespace: "default"}, true)
	collectAs(t, cfg, opts)

	t.Run("namespace deletion", func(t *testing.T) {
		checkLifecycleCalls(t, emptyNamespaceAs(t, cfg, opts))
	})
}

// shadowMakesNoWrite runs kgc with opts (the shadow overlay's) as the
// rendered service account: of a Background cascade no other collector
// does (the sandbox runs none), it decides the dependents' deletions,
// counts them as shadow decisions, and deletes nothing.
func shadowMakesNoWrite(t *testing.T, in installed, opts kgc.Options) {
	t.Helper()
	cfg := renderedIdentity(t, in)
	reg := prometheus.NewRegistry()
	opts.Registerer, opts.Logger = reg, testenv.Logger("kgc-shadow")
	gc, err := kgc.Start(t.Context(), cfg, opts)
	if err != nil {
		t.Fatalf("starting kgc as %s: %v", cfg.Impersonate.UserName, err)
	}
	t.Cleanup(gc.Stop)

	ns := createNamespace(t)
	owner := createConfigMap(t, ns, "owner")
	deps := createDependents(t, ns, owner, 3, false)
	for _, d := range deps {
		waitInGraph(t, gc, d)
	}
	deleteConfigMap(t, owner, metav1.DeletePropagationBackground)
	var decided float64
	err = wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		decided = counterSum(t, reg, "kgc_shadow_decisions_total", "operation", "delete")
		return decided >= float64(len(deps)), nil
	})
	if err != nil {
		t.Fatalf("shadow kgc decided %v deletions within %s, want %d", decided, waitTimeout, len(deps))
	}
	// A write would have been sent with the decision: give a stray one the
	// time a collecting kgc needs to finish such a cascade many times over.
	time.Sleep(negativeWindow)
	for _, d := range deps {
		if get(t, d) == nil {
			t.Errorf("shadow kgc's dependent %s is gone", d)
		}
	}
	gc.Stop()
	for k, n := range requestsByVerb(t, reg) {
		verb, _, _ := strings.Cut(k, " ")
		if n > 0 && slices.Contains([]string{"delete", "deletecollection", "patch", "update", "create"}, verb) {
			t.Errorf("shadow kgc sent %v %s requests", n, k)
		}
	}
}

// counterSum sums the counter name's series whose label has value.
func counterSum(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
