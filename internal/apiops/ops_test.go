package apiops

import (
	"context"
	"encoding/json"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
)

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

func newOps(t *testing.T, objs ...*metav1.PartialObjectMetadata) (*Ops, *metadatafake.FakeMetadataClient) {
	t.Helper()
	c := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	for _, o := range objs {
		gvr := configMaps
		if o.Namespace == "" {
			gvr = namespaces
		}
		if err := c.Tracker().Create(gvr, o, o.Namespace); err != nil {
			t.Fatal(err)
		}
	}
	return &Ops{Client: c}, c
}

func lastAction(t *testing.T, c *metadatafake.FakeMetadataClient) clienttesting.Action {
	t.Helper()
	as := c.Actions()
	if len(as) == 0 {
		t.Fatal("no API call made")
	}
	return as[len(as)-1]
}

func cm(name string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, UID: types.UID(name + "-uid"), ResourceVersion: "5",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "o"}},
		Finalizers:      []string{"example.com/f"},
	}}
}

func TestDeletePreconditions(t *testing.T) {
	tests := []struct {
		name   string
		target Target
		policy metav1.DeletionPropagation
		wantRV bool
	}{
		{"uid and resourceVersion", Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: "5"}, metav1.DeletePropagationBackground, true},
		{"uid only", Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid"}, metav1.DeletePropagationForeground, false},
		{"cluster-scoped", Target{Resource: namespaces, Name: "ns", UID: "ns-uid", ResourceVersion: "5"}, metav1.DeletePropagationOrphan, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops, c := newOps(t, cm("x"), &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "ns", UID: "ns-uid"}})
			if err := ops.Delete(context.Background(), tc.target, tc.policy); err != nil {
				t.Fatal(err)
			}
			d, ok := lastAction(t, c).(clienttesting.DeleteActionImpl)
			if !ok {
				t.Fatalf("last call is %T, want a DELETE", lastAction(t, c))
			}
			if d.GetResource() != tc.target.Resource || d.GetNamespace() != tc.target.Namespace || d.GetName() != tc.target.Name {
				t.Errorf("DELETE %s %s/%s, want %s", d.GetResource(), d.GetNamespace(), d.GetName(), tc.target)
			}
			pre := d.DeleteOptions.Preconditions
			if pre == nil || pre.UID == nil || *pre.UID != tc.target.UID {
				t.Fatalf("preconditions %+v lack uid %s", pre, tc.target.UID)
			}
			if tc.wantRV != (pre.ResourceVersion != nil) || (tc.wantRV && *pre.ResourceVersion != tc.target.ResourceVersion) {
				t.Errorf("resourceVersion precondition = %v, want %v (%s)", pre.ResourceVersion, tc.wantRV, tc.target.ResourceVersion)
			}
			if p := d.DeleteOptions.PropagationPolicy; p == nil || *p != tc.policy {
				t.Errorf("policy = %v, want %s", p, tc.policy)
			}
		})
	}
}

func TestDeleteNotFound(t *testing.T) {
	ops, _ := newOps(t)
	err := ops.Delete(context.Background(), Target{Resource: configMaps, Namespace: "a", Name: "gone", UID: "u"}, metav1.DeletePropagationBackground)
	if !apierrors.IsNotFound(err) {
		t.Errorf("Delete of a missing object = %v, want NotFound", err)
	}
}

// patchBody decodes a merge patch into generic JSON.
func patchBody(t *testing.T, c *metadatafake.FakeMetadataClient) map[string]map[string]any {
	t.Helper()
	p, ok := lastAction(t, c).(clienttesting.PatchActionImpl)
	if !ok {
		t.Fatalf("last call is %T, want a PATCH", lastAction(t, c))
	}
	if p.GetPatchType() != types.MergePatchType {
		t.Errorf("patch type %s, want merge", p.GetPatchType())
	}
	var body map[string]map[string]any
	if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
		t.Fatalf("patch %s: %v", p.GetPatch(), err)
	}
	if len(body) != 1 || body["metadata"] == nil {
		t.Fatalf("patch %s touches more than metadata", p.GetPatch())
	}
	return body
}

func TestSetOwnerReferences(t *testing.T) {
	keep := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "d", BlockOwnerDeletion: new(bool)}
	tests := []struct {
		name     string
		refs     []metav1.OwnerReference
		rv       string
		wantRefs int
	}{
		{"some refs", []metav1.OwnerReference{keep}, "5", 1},
		{"nil removes every ref", nil, "5", 0},
		{"empty removes every ref", []metav1.OwnerReference{}, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ops, c := newOps(t, cm("x"))
			target := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: tc.rv}
			got, err := ops.SetOwnerReferences(context.Background(), target, tc.refs)
			if err != nil {
				t.Fatal(err)
			}
			md := patchBody(t, c)["metadata"]
			if md["uid"] != "x-uid" {
				t.Errorf("patch uid = %v, want the uid precondition", md["uid"])
			}
			if rv, ok := md["resourceVersion"]; (tc.rv != "") != ok || (ok && rv != tc.rv) {
				t.Errorf("patch resourceVersion = %v (present %v), want %q", rv, ok, tc.rv)
			}
			refs, ok := md["ownerReferences"].([]any)
			if !ok || len(refs) != tc.wantRefs {
				t.Errorf("patch ownerReferences = %#v, want a list of %d (an absent field would patch nothing)", md["ownerReferences"], tc.wantRefs)
			}
			if _, ok := md["finalizers"]; ok {
				t.Error("ownerReferences patch touches finalizers")
			}
			if len(got.OwnerReferences) != tc.wantRefs || len(got.Finalizers) != 1 {
				t.Errorf("patched object = %+v", got.ObjectMeta)
			}
		})
	}
}

func TestSetFinalizers(t *testing.T) {
	for _, fins := range [][]string{nil, {}, {"example.com/keep"}} {
		ops, c := newOps(t, cm("x"))
		target := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: "5"}
		got, err := ops.SetFinalizers(context.Background(), target, fins)
		if err != nil {
			t.Fatal(err)
		}
		md := patchBody(t, c)["metadata"]
		list, ok := md["finalizers"].([]any)
		if !ok || len(list) != len(fins) {
			t.Errorf("SetFinalizers(%q): patch finalizers = %#v", fins, md["finalizers"])
		}
		if md["uid"] != "x-uid" || md["resourceVersion"] != "5" {
			t.Errorf("SetFinalizers(%q): preconditions uid=%v rv=%v", fins, md["uid"], md["resourceVersion"])
		}
		if _, ok := md["ownerReferences"]; ok {
			t.Error("finalizers patch touches ownerReferences")
		}
		if len(got.Finalizers) != len(fins) || len(got.OwnerReferences) != 1 {
			t.Errorf("patched object = %+v", got.ObjectMeta)
		}
	}
}

func TestGet(t *testing.T) {
	ops, c := newOps(t, cm("x"), &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "ns", UID: "ns-uid"}})
	got, err := ops.Get(context.Background(), configMaps, "a", "x")
	if err != nil || got.UID != "x-uid" {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if g := lastAction(t, c).(clienttesting.GetActionImpl); g.GetNamespace() != "a" || g.GetName() != "x" {
		t.Errorf("GET %s/%s", g.GetNamespace(), g.GetName())
	}
	got, err = ops.Get(context.Background(), namespaces, "", "ns")
	if err != nil || got.UID != "ns-uid" {
		t.Fatalf("cluster-scoped Get = %+v, %v", got, err)
	}
	if _, err := ops.Get(context.Background(), configMaps, "b", "x"); !apierrors.IsNotFound(err) {
		t.Errorf("Get in another namespace = %v, want NotFound", err)
	}
}

func TestTargetString(t *testing.T) {
	tg := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "u", ResourceVersion: "5"}
	if got, want := tg.String(), "/v1, Resource=configmaps a/x (uid u, rv 5)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}
