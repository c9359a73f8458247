package inspect

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// TestResolveOwnerTable pins the live classification to the collector's
// rules (design.md): solid, waiting, dangling (incl. a UID under other
// coordinates), unresolvable, invalid.
func TestResolveOwnerTable(t *testing.T) {
	c := newCluster(t)
	rs := c.add(rsR, "a", "rs")
	fg := c.add(deployR, "a", "fg", deleting(), finalizers(metav1.FinalizerDeleteDependents))
	orphaning := c.add(deployR, "a", "orph", deleting(), finalizers(metav1.FinalizerOrphanDependents))
	held := c.add(deployR, "a", "held", deleting(), finalizers("example.com/keep"))
	c.add(cmR, "a", "reused") // uid-reused, not the one referenced below
	other := c.add(cmR, "b", "elsewhere")
	ns := c.add(nsR, "", "a")
	cr := c.add(crR, "", "cr")
	ctx := context.Background()
	v := c.view()

	nsDep := &Object{APIVersion: "v1", Kind: "Pod", Namespace: "a", Name: "p", UID: "p"}
	clDep := &Object{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "c", UID: "c"}
	r := func(apiVersion, kind, name string, uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: typesUID(uid)}
	}
	for _, tc := range []struct {
		name      string
		dep       *Object
		ref       metav1.OwnerReference
		want      rules.OwnerState
		reason    string
		elsewhere string
	}{
		{"solid", nsDep, r("apps/v1", "ReplicaSet", "rs", string(rs.UID)), rules.Solid, "exists", ""},
		{"solid via an unserved version of a served kind", nsDep, r("apps/v9", "ReplicaSet", "rs", string(rs.UID)), rules.Solid, "exists", ""},
		{"waiting: foreground deletion", nsDep, r("apps/v1", "Deployment", "fg", string(fg.UID)), rules.Waiting, "foreground", ""},
		{"owner held by a custom finalizer is solid", nsDep, r("apps/v1", "Deployment", "held", string(held.UID)), rules.Solid, "not in the foreground", ""},
		{"orphaning owner is solid", nsDep, r("apps/v1", "Deployment", "orph", string(orphaning.UID)), rules.Solid, "orphan", ""},
		{"dangling: missing", nsDep, r("apps/v1", "ReplicaSet", "gone", "uid-gone"), rules.Dangling, "no ReplicaSet.apps named \"gone\"", ""},
		{"dangling: other uid at the coordinates", nsDep, r("v1", "ConfigMap", "reused", "uid-old"), rules.Dangling, "different object", ""},
		{"dangling: uid in another namespace", nsDep, r("v1", "ConfigMap", "elsewhere", string(other.UID)), rules.Dangling, "OwnerRefInvalidNamespace", "b"},
		{"unresolvable kind", nsDep, r("example.com/v1", "Widget", "w", "uid-w"), rules.Unresolvable, "no API serves", ""},
		{"invalid apiVersion", nsDep, r("a/b/c", "Widget", "w", "uid-w"), rules.Invalid, "malformed", ""},
		{"invalid: cluster-scoped dependent, namespaced owner", clDep, r("apps/v1", "ReplicaSet", "rs", string(rs.UID)), rules.Invalid, "cluster-scoped", ""},
		{"cluster-scoped owner of a namespaced dependent", nsDep, r("v1", "Namespace", "a", string(ns.UID)), rules.Solid, "exists", ""},
		{"cluster-scoped owner of a cluster-scoped dependent", clDep, r("rbac.authorization.k8s.io/v1", "ClusterRole", "cr", string(cr.UID)), rules.Solid, "exists", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.ResolveOwner(ctx, tc.dep, tc.ref)
			if err != nil {
				t.Fatal(err)
			}
			if got.State != tc.want {
				t.Errorf("state = %s, want %s (%s)", got.State, tc.want, got.Reason)
			}
			if !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("reason %q does not mention %q", got.Reason, tc.reason)
			}
			if got.ElsewhereNamespace != tc.elsewhere {
				t.Errorf("elsewhere = %q, want %q", got.ElsewhereNamespace, tc.elsewhere)
			}
			if (got.State == rules.Solid || got.State == rules.Waiting) != (got.Owner != nil) {
				t.Errorf("owner = %v for state %s", got.Owner, got.State)
			}
		})
	}
	if w := c.writes(); len(w) > 0 {
		t.Errorf("resolving wrote: %v", w)
	}
}

func TestLookupKinds(t *testing.T) {
	c := newCluster(t)
	c.add(rsR, "a", "web")
	c.add(nsR, "", "a")
	v := c.view()
	ctx := context.Background()
	for _, kind := range []string{"replicaset", "replicasets", "ReplicaSet", "replicasets.apps", "replicasets.v1.apps", "ReplicaSet.apps"} {
		o, err := v.Lookup(ctx, kind, "a", "web")
		if err != nil {
			t.Errorf("%s: %v", kind, err)
			continue
		}
		if o.Kind != "ReplicaSet" || o.APIVersion != "apps/v1" || o.Namespace != "a" || o.UID != "uid-web" {
			t.Errorf("%s: got %+v", kind, o)
		}
	}
	// A cluster-scoped kind ignores the namespace.
	if o, err := v.Lookup(ctx, "namespace", "other", "a"); err != nil || o.Namespace != "" {
		t.Errorf("namespace/a: %+v, %v", o, err)
	}
	if _, err := v.Lookup(ctx, "widgets", "a", "web"); !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), `"widgets"`) {
		t.Errorf("unknown kind: %v", err)
	}
	if _, err := v.Lookup(ctx, "rs.apps", "a", "web"); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("short name without an expander: %v", err)
	}
	_, err := v.Lookup(ctx, "replicaset", "a", "nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("missing object: %v", err)
	}
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		kind, name string
		err        bool
	}{
		{[]string{"deployment/web"}, "deployment", "web", false},
		{[]string{"deployments.apps/web"}, "deployments.apps", "web", false},
		{[]string{"configmap", "x"}, "configmap", "x", false},
		{[]string{"web"}, "", "", true},
		{[]string{"a/b/c"}, "", "", true},
		{[]string{"/x"}, "", "", true},
		{[]string{"cm/x", "y"}, "", "", true},
		{nil, "", "", true},
	} {
		k, n, err := ParseTarget(tc.args)
		if (err != nil) != tc.err || k != tc.kind || n != tc.name {
			t.Errorf("ParseTarget(%q) = %q, %q, %v", tc.args, k, n, err)
		}
	}
}

func TestDependentsScopes(t *testing.T) {
	c := newCluster(t)
	ns := c.add(nsR, "", "a")
	rs := c.add(rsR, "a", "rs")
	c.add(podR, "a", "p1", owned(rs, true))
	c.add(podR, "b", "p2", owned(rs, true)) // same UID, other namespace: not its dependent
	c.add(cmR, "a", "cm1", owned(ns, false))
	c.add(cmR, "b", "cm2", owned(ns, false))
	c.add(crR, "", "cr", owned(rs, false)) // cluster-scoped naming a namespaced owner: shown
	v := c.view()
	ctx := context.Background()
	names := func(os []*Object) string {
		var s []string
		for _, o := range os {
			s = append(s, o.Namespace+"/"+o.Name)
		}
		return strings.Join(s, " ")
	}
	d, err := v.Dependents(ctx, rs)
	if err != nil || names(d) != "/cr a/p1" {
		t.Errorf("dependents of rs: %q, %v", names(d), err)
	}
	d, err = v.Dependents(ctx, ns)
	if err != nil || names(d) != "a/cm1 b/cm2" {
		t.Errorf("dependents of namespace: %q, %v", names(d), err)
	}
}

func TestLiveViewListBound(t *testing.T) {
	c := newCluster(t)
	rs := c.add(rsR, "a", "rs")
	for _, n := range []string{"p1", "p2", "p3"} {
		c.add(podR, "a", n, owned(rs, true))
	}
	v := c.view()
	v.MaxObjects = 2
	if _, err := v.Dependents(context.Background(), rs); err == nil || !strings.Contains(err.Error(), "--ask-kgc") {
		t.Errorf("want an error past MaxObjects, got %v", err)
	}
}

// TestLiveViewListFailure: a resource that cannot be listed is reported,
// and the others still answer.
func TestLiveViewListFailure(t *testing.T) {
	c := newCluster(t)
	rs := c.add(rsR, "a", "rs")
	c.add(podR, "a", "p1", owned(rs, true))
	c.client.PrependReactor("list", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("conversion webhook unavailable")
	})
	v := c.view()
	d, err := v.Dependents(context.Background(), rs)
	if err != nil || len(d) != 1 || d[0].Name != "p1" {
		t.Fatalf("dependents: %v, %v", d, err)
	}
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "configmaps") || !strings.Contains(v.Warnings[0], "webhook") {
		t.Errorf("warnings: %q", v.Warnings)
	}
}
