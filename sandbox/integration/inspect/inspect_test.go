package inspect

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/internal/inspect"
)

// TestExplainStuckForeground: an owner deleted in the foreground, whose
// blocking dependent kgc deleted but a custom finalizer holds. explain names
// the dependent and its finalizer, and says nothing in kgc removes it.
func TestExplainStuckForeground(t *testing.T) {
	tc := newTestCase(t)
	gc := startKGC(t)
	owner := tc.configMap("owner")
	mid := tc.secret("mid", ownedBy(owner, true))
	held := tc.configMap("held", ownedBy(mid, true), withFinalizers(holdFinalizer))
	loose := tc.configMap("loose", ownedBy(owner, false))
	// kgc deletes mid in the foreground only if it knows mid has a
	// dependent: with held still on its way, mid would go at once.
	tc.waitObserved(gc, owner, mid, held, loose)

	tc.remove(owner, metav1.DeletePropagationForeground)
	tc.waitFor("kgc to delete the held dependent", func() (bool, error) {
		m, err := tc.get(held)
		return err == nil && m.DeletionTimestamp != nil, err
	})
	// mid waits in the foreground for held.
	tc.waitFor("the middle object to wait for its dependents", func() (bool, error) {
		m, err := tc.get(mid)
		return err == nil && m.DeletionTimestamp != nil && slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents), err
	})

	out, errOut, err := kgcCLI(t, app.InspectDeps{}, "explain", owner.arg(), "-n", tc.ns, "--kubeconfig", kubeconfigPath)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, errOut)
	}
	t.Logf("kgc explain %s:\n%s", owner.arg(), out)
	for _, want := range []string{
		"Verdict: wait-for-dependents",
		"Waiting for blocking dependents",
		"Secret/mid -n " + tc.ns,
		"ConfigMap/held -n " + tc.ns,
		"Stuck on:\n  - ConfigMap/held -n " + tc.ns + ": held by finalizer(s) " + holdFinalizer + ": nothing in kgc will remove this; whoever owns it must",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q", want)
		}
	}
	if strings.Contains(out, "ConfigMap/loose") {
		t.Errorf("a non-blocking dependent kgc deleted already is still listed")
	}

	// The same as JSON, and the dependent's own explanation.
	out, _, err = kgcCLI(t, app.InspectDeps{}, "explain", "cm", owner.name, "-n", tc.ns, "--kubeconfig", kubeconfigPath, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var e inspect.Explanation
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	if len(e.WaitingFor) != 1 || e.WaitingFor[0].Object.Name != "mid" || len(e.WaitingFor[0].WaitingFor) != 1 ||
		e.WaitingFor[0].WaitingFor[0].Object.UID != held.uid || !slices.Equal(e.WaitingFor[0].WaitingFor[0].UnhandledFinalizers, []string{holdFinalizer}) {
		t.Errorf("explain -o json: %s", out)
	}
	out, _, err = kgcCLI(t, app.InspectDeps{}, "explain", "configmaps/"+held.name, "-n", tc.ns, "--kubeconfig", kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Verdict: wait-for-finalizers") || !strings.Contains(out, holdFinalizer) {
		t.Errorf("explain of the held dependent:\n%s", out)
	}

	// Releasing the finalizer lets the whole Foreground deletion finish.
	release(tc.ctx, t, held)
	tc.waitFor("the owner to be gone", func() (bool, error) {
		_, err := tc.get(owner)
		return apierrors.IsNotFound(err), client(err)
	})
}

// client ignores NotFound.
func client(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// previewTree builds, in tc's namespace and cluster-wide:
//
//	ClusterRole root
//	├─ ConfigMap a (blocking)
//	│  ├─ Secret p1 (blocking)
//	│  ├─ Secret p2 (blocking; second, live owner: ConfigMap keeper)
//	│  └─ ConfigMap b (blocking; finalizer example.com/keep)
//	│     └─ Secret p3 (blocking)
//	└─ ClusterRole c2 (blocking)
//	   └─ ConfigMap d
func previewTree(tc *testCase) (root obj, all []obj) {
	root = tc.clusterRole("root")
	a := tc.configMap("a", ownedBy(root, true))
	keeper := tc.configMap("keeper")
	p1 := tc.secret("p1", ownedBy(a, true))
	p2 := tc.secret("p2", ownedBy(a, true), ownedBy(keeper, false))
	b := tc.configMap("b", ownedBy(a, true), withFinalizers(holdFinalizer))
	p3 := tc.secret("p3", ownedBy(b, true))
	c2 := tc.clusterRole("c2", ownedBy(root, true))
	d := tc.configMap("d", ownedBy(c2, false))
	return root, []obj{root, a, keeper, p1, p2, b, p3, c2, d}
}

func resourceVersions(tc *testCase, objs []obj) map[types.UID]string {
	tc.t.Helper()
	out := map[types.UID]string{}
	for _, o := range objs {
		m, err := tc.get(o)
		if err != nil {
			tc.t.Fatalf("get %s: %v", o.key(), err)
		}
		out[o.uid] = m.ResourceVersion
	}
	return out
}

func uidSet(os []*inspect.Object) []string {
	var s []string
	for _, o := range os {
		s = append(s, string(o.UID))
	}
	sort.Strings(s)
	return s
}

// outcome is what a deletion did to a set of objects, as observed.
type outcome struct {
	deleted, orphaned, blocked []string
}

func observe(tc *testCase, objs []obj) (outcome, error) {
	uids := map[types.UID]bool{}
	for _, o := range objs {
		uids[o.uid] = true
	}
	var out outcome
	for _, o := range objs {
		m, err := tc.get(o)
		if apierrors.IsNotFound(err) {
			out.deleted = append(out.deleted, string(o.uid))
			continue
		}
		if err != nil {
			return out, err
		}
		if m.DeletionTimestamp != nil {
			out.blocked = append(out.blocked, string(o.uid))
		}
		// Orphaned: lost a reference it had when the test built the tree.
		orig := origRefs[o.uid]
		for _, r := range orig {
			if !slices.ContainsFunc(m.OwnerReferences, func(x metav1.OwnerReference) bool { return x.UID == r }) {
				out.orphaned = append(out.orphaned, string(o.uid))
				break
			}
		}
	}
	sort.Strings(out.deleted)
	sort.Strings(out.orphaned)
	sort.Strings(out.blocked)
	return out, nil
}

// origRefs: the owner UIDs of every object when it was built.
var origRefs = map[types.UID][]types.UID{}

func recordRefs(tc *testCase, objs []obj) {
	for _, o := range objs {
		m, err := tc.get(o)
		if err != nil {
			tc.t.Fatal(err)
		}
		var refs []types.UID
		for _, r := range m.OwnerReferences {
			refs = append(refs, r.UID)
		}
		origRefs[o.uid] = refs
	}
}

// TestPreviewMatchesDeletion: for each cascade mode, the preview changes
// nothing (no write request, every resourceVersion unchanged), and what kgc
// then does when the object is really deleted is what the preview said.
func TestPreviewMatchesDeletion(t *testing.T) {
	gc := startKGC(t)
	for _, mode := range []struct {
		cascade string
		policy  metav1.DeletionPropagation
		// expected, by name, to pin the preview itself too
		deleted, orphaned, blocked []string
	}{
		{"background", metav1.DeletePropagationBackground, []string{"root", "a", "c2", "p1", "d"}, []string{"p2"}, []string{"b"}},
		{"foreground", metav1.DeletePropagationForeground, []string{"p1", "p3", "d", "c2"}, []string{"p2"}, []string{"root", "a", "b"}},
		{"orphan", metav1.DeletePropagationOrphan, []string{"root"}, []string{"a", "c2"}, nil},
	} {
		t.Run(mode.cascade, func(t *testing.T) {
			tc := newTestCase(t)
			root, all := previewTree(tc)
			recordRefs(tc, all)
			byUID := map[string]string{}
			for _, o := range all {
				n := o.name
				if o.namespace == "" {
					n = strings.TrimPrefix(n, tc.ns+"-")
				}
				byUID[string(o.uid)] = n
			}
			names := func(uids []string) []string {
				var s []string
				for _, u := range uids {
					s = append(s, byUID[u])
				}
				sort.Strings(s)
				return s
			}
			before := resourceVersions(tc, all)

			var wc writeCounter
			out, errOut, err := kgcCLI(t, app.InspectDeps{WrapConfig: wc.wrap}, "preview", "delete", "clusterrole/"+root.name,
				"--cascade="+mode.cascade, "--kubeconfig", kubeconfigPath, "-o", "json")
			if err != nil {
				t.Fatalf("preview: %v\n%s", err, errOut)
			}
			text, _, err := kgcCLI(t, app.InspectDeps{WrapConfig: wc.wrap}, "preview", "delete", "clusterroles.rbac.authorization.k8s.io", root.name,
				"--cascade="+mode.cascade, "--kubeconfig", kubeconfigPath)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kgc preview delete --cascade=%s:\n%s", mode.cascade, text)
			if n := wc.writes.Load(); n != 0 || wc.reads.Load() == 0 {
				t.Errorf("preview made %d write request(s) (%v) and %d reads; want 0 writes", n, wc.seen, wc.reads.Load())
			}
			if after := resourceVersions(tc, all); !maps.Equal(before, after) {
				t.Errorf("resourceVersions changed by the preview: %v -> %v", before, after)
			}

			var p inspect.Preview
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatalf("preview -o json: %v\n%s", err, out)
			}
			var blocked []string
			for _, h := range p.Blocked {
				blocked = append(blocked, string(h.Object.UID))
			}
			sort.Strings(blocked)
			want := outcome{deleted: uidSet(p.Deleted), orphaned: uidSet(p.Orphaned), blocked: blocked}
			sorted := func(s []string) []string { s = slices.Clone(s); sort.Strings(s); return s }
			if got := names(want.deleted); !slices.Equal(got, sorted(mode.deleted)) {
				t.Errorf("preview deletes %v, want %v", got, sorted(mode.deleted))
			}
			if got := names(want.orphaned); !slices.Equal(got, sorted(mode.orphaned)) {
				t.Errorf("preview orphans %v, want %v", got, sorted(mode.orphaned))
			}
			if got := names(want.blocked); !slices.Equal(got, sorted(mode.blocked)) {
				t.Errorf("preview blocks %v, want %v", got, sorted(mode.blocked))
			}

			// Now for real, with kgc running, once it has observed the whole
			// tree (the preview read it from the API server; kgc's watches
			// of different resources are not ordered).
			tc.waitObserved(gc, all...)
			tc.remove(root, mode.policy)
			var got outcome
			err = pollOutcome(tc, all, want, &got)
			// A sentinel: garbage created after the deletion; once kgc has
			// collected it, kgc has had its chance to do more.
			sentinelOwner := tc.configMap("sentinel-owner")
			sentinel := tc.configMap("sentinel", ownedBy(sentinelOwner, false))
			tc.remove(sentinelOwner, metav1.DeletePropagationBackground)
			tc.waitFor("kgc to collect the sentinel", func() (bool, error) {
				_, err := tc.get(sentinel)
				return apierrors.IsNotFound(err), client(err)
			})
			final, oerr := observe(tc, all)
			if err != nil || oerr != nil || !equalOutcome(final, want) {
				t.Errorf("the deletion did not do what the preview said (%v, %v):\n deleted  %v, preview %v\n orphaned %v, preview %v\n blocked  %v, preview %v",
					err, oerr, names(final.deleted), names(want.deleted), names(final.orphaned), names(want.orphaned), names(final.blocked), names(want.blocked))
			}
		})
	}
}

func equalOutcome(a, b outcome) bool {
	return slices.Equal(a.deleted, b.deleted) && slices.Equal(a.orphaned, b.orphaned) && slices.Equal(a.blocked, b.blocked)
}

// pollOutcome waits until the observed outcome is want; got is the last
// observation.
func pollOutcome(tc *testCase, all []obj, want outcome, got *outcome) error {
	return pollUntil(tc, func() (bool, error) {
		o, err := observe(tc, all)
		if err != nil {
			return false, err
		}
		*got = o
		return equalOutcome(o, want), nil
	})
}

// TestTree: the text and JSON forms of a known graph, and the errors.
func TestTree(t *testing.T) {
	tc := newTestCase(t)
	top := tc.clusterRole("top")
	a := tc.configMap("a", ownedBy(top, true))
	tc.secret("s1", ownedBy(a, true))
	tc.secret("s2", ownedBy(a, false), withFinalizers(holdFinalizer))
	tc.configMap("orphan-ref", ownedBy(a, false), ownedBy(obj{apiVersion: "v1", kind: "ConfigMap", name: "ghost", uid: "00000000-0000-4000-8000-00000000dead"}, false))

	out, errOut, err := kgcCLI(t, app.InspectDeps{}, "tree", "configmap/a", "-n", tc.ns, "--kubeconfig", kubeconfigPath)
	if err != nil {
		t.Fatalf("tree: %v\n%s", err, errOut)
	}
	t.Logf("kgc tree configmap/a:\n%s", out)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	wants := []struct{ name, rest string }{
		{"NAME", "STATUS"},
		{"↑ ClusterRole.rbac.authorization.k8s.io/" + top.name, "LIVE"},
		{"ConfigMap/a", "LIVE"},
		{"├─ConfigMap/orphan-ref", "LIVE"},
		{"├─Secret/s1", "dependent,blocking"},
		{"└─Secret/s2", "FINALIZERS=" + holdFinalizer},
	}
	if len(lines) != len(wants) {
		t.Fatalf("tree has %d lines, want %d:\n%s", len(lines), len(wants), out)
	}
	for i, w := range wants {
		if !strings.Contains(lines[i], w.name) || !strings.Contains(lines[i], w.rest) {
			t.Errorf("line %d = %q, want %q ... %q", i, lines[i], w.name, w.rest)
		}
	}
	if !strings.HasPrefix(lines[1], "-") || !strings.HasPrefix(lines[2], tc.ns) {
		t.Errorf("namespace column: %q / %q", lines[1], lines[2])
	}

	out, _, err = kgcCLI(t, app.InspectDeps{}, "tree", "cm/orphan-ref", "-n", tc.ns, "--kubeconfig", kubeconfigPath, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var tr inspect.TreeNode
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("tree -o json: %v\n%s", err, out)
	}
	if tr.Object.Name != "orphan-ref" || len(tr.Owners) != 2 || tr.Owners[0].Object.Name != "a" || tr.Owners[0].Ref != "solid" ||
		len(tr.Owners[0].Owners) != 1 || tr.Owners[0].Owners[0].Object.Name != top.name ||
		tr.Owners[1].Ref != "dangling" || !slices.Equal(tr.Owners[1].Markers, []string{"DANGLING"}) {
		t.Errorf("tree -o json:\n%s", out)
	}

	// Errors name what was not found and fail.
	for _, tcase := range []struct {
		args []string
		want string
	}{
		{[]string{"tree", "widgets/x"}, `the server doesn't have a resource type "widgets"`},
		{[]string{"tree", "configmap/nope", "-n", tc.ns}, `configmaps "nope" not found in namespace "` + tc.ns + `"`},
		{[]string{"explain", "clusterrole/nope"}, `clusterroles.rbac.authorization.k8s.io "nope" not found`},
	} {
		_, _, err := kgcCLI(t, app.InspectDeps{}, append(tcase.args, "--kubeconfig", kubeconfigPath)...)
		if err == nil || !strings.Contains(err.Error(), tcase.want) {
			t.Errorf("kgc %v: %v, want an error mentioning %s", tcase.args, err, tcase.want)
		}
	}
}

// TestServerMode: explain and tree asking a running kgc (its Handler) give
// the answers they give from the API server.
func TestServerMode(t *testing.T) {
	tc := newTestCase(t)
	c := startKGC(t)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	owner := tc.configMap("owner")
	dep := tc.secret("dep", ownedBy(owner, true), withFinalizers(holdFinalizer))
	tc.waitObserved(c, owner, dep)
	tc.remove(owner, metav1.DeletePropagationForeground)
	tc.waitFor("kgc to delete the dependent", func() (bool, error) {
		m, err := tc.get(dep)
		return err == nil && m.DeletionTimestamp != nil, err
	})

	// This build's graph endpoint serves JSON: any error fails, the
	// answer of an older kgc (inspect.ErrNoJSONGraph) and a graph that
	// does not decode (inspect.ErrBadJSONGraph) included.
	out, errOut, err := kgcCLI(t, app.InspectDeps{}, "explain", owner.arg(), "-n", tc.ns, "--kgc-url", srv.URL)
	if err != nil {
		t.Fatalf("explain --server: %v\n%s", err, errOut)
	}
	// kgc's graph lags the API server a little: poll until it shows the
	// dependent being deleted.
	tc.waitFor("kgc's graph to show the held dependent", func() (bool, error) {
		out, _, err = kgcCLI(t, app.InspectDeps{}, "explain", owner.arg(), "-n", tc.ns, "--kgc-url", srv.URL)
		return err == nil && strings.Contains(out, "held by finalizer(s) "+holdFinalizer), err
	})
	for _, want := range []string{"Verdict: wait-for-dependents", "Secret/dep -n " + tc.ns, "whoever owns it must"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain --kgc-url lacks %q:\n%s", want, out)
		}
	}
	out, _, err = kgcCLI(t, app.InspectDeps{}, "tree", owner.arg(), "-n", tc.ns, "--kgc-url", srv.URL, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var tr inspect.TreeNode
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Object.UID != owner.uid || len(tr.Dependents) != 1 || tr.Dependents[0].Object.UID != dep.uid || !tr.Dependents[0].Blocking {
		t.Errorf("tree --kgc-url -o json:\n%s", out)
	}
}

// TestExplainOwnerClassification: references into another namespace, to an
// unserved kind, from a cluster-scoped object to a namespaced owner, each
// classified and explained like kgc decides them.
func TestExplainOwnerClassification(t *testing.T) {
	tc := newTestCase(t)
	other := newTestCase(t)
	realOwner := other.configMap("real")
	live := tc.configMap("live")
	elsewhere := obj{apiVersion: "v1", kind: "ConfigMap", name: "real", uid: realOwner.uid}
	widget := obj{apiVersion: "example.com/v1", kind: "Widget", name: "w", uid: "00000000-0000-4000-8000-0000000beef0"}
	tc.configMap("dangling", ownedBy(elsewhere, false))
	tc.configMap("unserved", ownedBy(widget, false), ownedBy(elsewhere, false))
	tc.configMap("kept", ownedBy(live, false), ownedBy(elsewhere, false))
	cr := tc.clusterRole("invalid", ownedBy(live, false))

	explain := func(args ...string) string {
		t.Helper()
		out, errOut, err := kgcCLI(t, app.InspectDeps{}, append(args, "--kubeconfig", kubeconfigPath)...)
		if err != nil {
			t.Fatalf("explain %v: %v\n%s", args, err, errOut)
		}
		return out
	}
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"explain", "cm/dangling", "-n", tc.ns}, []string{"Verdict: delete (policy Background)", "DANGLING", `in namespace "` + other.ns + `"`, "OwnerRefInvalidNamespace"}},
		{[]string{"explain", "cm/unserved", "-n", tc.ns}, []string{"Verdict: keep-and-retry", "UNRESOLVABLE", "no API serves kind Widget"}},
		{[]string{"explain", "cm/kept", "-n", tc.ns}, []string{"Verdict: remove-references", "SOLID", "ConfigMap/real (dangling)"}},
		{[]string{"explain", "clusterrole/" + cr.name}, []string{"Verdict: keep", "INVALID", "cluster-scoped object cannot be owned by a namespaced ConfigMap"}},
		{[]string{"explain", "cm/live", "-n", tc.ns}, []string{"Verdict: keep", "no ownerReferences"}},
	} {
		out := explain(c.args...)
		for _, w := range c.wants {
			if !strings.Contains(out, w) {
				t.Errorf("kgc %v lacks %q:\n%s", c.args, w, out)
			}
		}
	}
}
