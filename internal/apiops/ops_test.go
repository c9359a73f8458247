package apiops

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

// lastPatch returns the last call, which must be a PATCH of type pt.
func lastPatch(t *testing.T, c *metadatafake.FakeMetadataClient, pt types.PatchType) []byte {
	t.Helper()
	p, ok := lastAction(t, c).(clienttesting.PatchActionImpl)
	if !ok {
		t.Fatalf("last call is %T, want a PATCH", lastAction(t, c))
	}
	if p.GetPatchType() != pt {
		t.Fatalf("patch type %s, want %s", p.GetPatchType(), pt)
	}
	return p.GetPatch()
}

// jsonPatch decodes a JSON patch into its operations.
func jsonPatch(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	var ops []map[string]any
	if err := json.Unmarshal(data, &ops); err != nil {
		t.Fatalf("patch %s: %v", data, err)
	}
	return ops
}

func TestReplaceOwnerReferences(t *testing.T) {
	from := cm("x").OwnerReferences
	keep := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d", UID: "d", BlockOwnerDeletion: new(bool)}
	for _, to := range [][]metav1.OwnerReference{nil, {}, {keep}} {
		ops, c := newOps(t, cm("x"))
		// No resourceVersion: the JSON patch's tests are the preconditions.
		target := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid"}
		got, err := ops.ReplaceOwnerReferences(context.Background(), target, from, to)
		if err != nil {
			t.Fatal(err)
		}
		p := jsonPatch(t, lastPatch(t, c, types.JSONPatchType))
		if len(p) != 3 || p[0]["op"] != "test" || p[0]["path"] != "/metadata/uid" || p[0]["value"] != "x-uid" {
			t.Fatalf("patch %v does not test the uid first", p)
		}
		if p[1]["op"] != "test" || p[1]["path"] != "/metadata/ownerReferences" || len(p[1]["value"].([]any)) != len(from) {
			t.Errorf("patch %v does not test the list it replaces", p)
		}
		if list, ok := p[2]["value"].([]any); p[2]["op"] != "replace" || !ok || len(list) != len(to) {
			t.Errorf("patch %v does not replace the list with %d entries (null would not be a list)", p, len(to))
		}
		if len(got.OwnerReferences) != len(to) || len(got.Finalizers) != 1 {
			t.Errorf("patched object = %+v", got.ObjectMeta)
		}
	}
}

func TestReplaceFinalizers(t *testing.T) {
	for _, to := range [][]string{nil, {}, {"example.com/keep"}} {
		ops, c := newOps(t, cm("x"))
		target := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: "5"}
		got, err := ops.ReplaceFinalizers(context.Background(), target, []string{"example.com/f"}, to)
		if err != nil {
			t.Fatal(err)
		}
		p := jsonPatch(t, lastPatch(t, c, types.JSONPatchType))
		if len(p) != 3 || p[1]["path"] != "/metadata/finalizers" || p[2]["path"] != "/metadata/finalizers" {
			t.Errorf("patch %v", p)
		}
		if len(got.Finalizers) != len(to) || len(got.OwnerReferences) != 1 {
			t.Errorf("patched object = %+v", got.ObjectMeta)
		}
	}
}

// A resource that does not take JSON patches gets a merge patch guarded
// by uid and resourceVersion, and none at all without a resourceVersion.
func TestMergePatchFallback(t *testing.T) {
	for _, rv := range []string{"5", ""} {
		ops, c := newOps(t, cm("x"))
		c.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
			if a.(clienttesting.PatchActionImpl).GetPatchType() == types.JSONPatchType {
				return true, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "x", "json patch not supported", 0, false)
			}
			return false, nil, nil
		})
		target := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: rv}
		_, err := ops.ReplaceFinalizers(context.Background(), target, []string{"example.com/f"}, nil)
		if rv == "" {
			if !errors.Is(err, ErrNoPrecondition) {
				t.Errorf("merge patch without a resourceVersion: err = %v, want ErrNoPrecondition", err)
			}
			if n := len(c.Actions()); n != 1 {
				t.Errorf("%d calls, want only the refused JSON patch", n)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]map[string]any
		if err := json.Unmarshal(lastPatch(t, c, types.MergePatchType), &body); err != nil {
			t.Fatal(err)
		}
		md := body["metadata"]
		if md["uid"] != "x-uid" || md["resourceVersion"] != "5" {
			t.Errorf("merge patch preconditions uid=%v rv=%v", md["uid"], md["resourceVersion"])
		}
		if _, ok := md["ownerReferences"]; ok {
			t.Error("finalizers patch touches ownerReferences")
		}
	}
}

func TestIsStale(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewConflict(gr, "x", errors.New("rv")), true},
		{apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", "testing value /metadata/uid failed", 0, false), true},
		{apierrors.NewNotFound(gr, "x"), false},
		{apierrors.NewInternalError(errors.New("boom")), false},
		{nil, false},
	} {
		if got := IsStale(tc.err); got != tc.want {
			t.Errorf("IsStale(%v) = %v, want %v", tc.err, got, tc.want)
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

func TestRemoveOwnerReference(t *testing.T) {
	two := cm("x")
	two.OwnerReferences = append(two.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "p", UID: "p"})
	target := Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid"}

	ops, c := newOps(t, two.DeepCopy())
	got, err := ops.RemoveOwnerReference(context.Background(), target, "p", []int{1})
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]map[string]any
	if err := json.Unmarshal(lastPatch(t, c, types.StrategicMergePatchType), &body); err != nil {
		t.Fatal(err)
	}
	if body["metadata"]["uid"] != "x-uid" {
		t.Errorf("patch %v lacks the uid precondition", body)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "o" {
		t.Errorf("refs after removing p: %+v", got.OwnerReferences)
	}

	// A custom resource refuses strategic merge patches once; from then on
	// the JSON patch tests the entry's uid at the index it removes.
	ops, c = newOps(t, two.DeepCopy())
	smp := 0
	c.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchActionImpl).GetPatchType() == types.StrategicMergePatchType {
			smp++
			return true, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "x", "no strategic merge patch", 0, false)
		}
		return false, nil, nil
	})
	if _, err = ops.RemoveOwnerReference(context.Background(), target, "p", []int{1}); err != nil {
		t.Fatal(err)
	}
	p := jsonPatch(t, lastPatch(t, c, types.JSONPatchType))
	if len(p) != 3 || p[1]["path"] != "/metadata/ownerReferences/1/uid" || p[1]["value"] != "p" || p[2]["op"] != "remove" {
		t.Errorf("fallback patch %v", p)
	}
	if got, err = ops.RemoveOwnerReference(context.Background(), target, "o", []int{0}); err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 0 {
		t.Errorf("refs after removing both: %+v", got.OwnerReferences)
	}
	if smp != 1 {
		t.Errorf("%d strategic merge patches, want 1 (the refusal is remembered)", smp)
	}
}

// The fallback removes every entry naming the owner, last first.
func TestRemoveOwnerReferenceFallbackDuplicates(t *testing.T) {
	dup := cm("x")
	dup.OwnerReferences = append(dup.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "p", UID: "p"}, dup.OwnerReferences[0])
	ops, c := newOps(t, dup)
	c.PrependReactor("patch", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.(clienttesting.PatchActionImpl).GetPatchType() == types.StrategicMergePatchType {
			return true, nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "x", "no strategic merge patch", 0, false)
		}
		return false, nil, nil
	})
	got, err := ops.RemoveOwnerReference(context.Background(), Target{Resource: configMaps, Namespace: "a", Name: "x", UID: "x-uid"}, "o", []int{0, 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "p" {
		t.Errorf("refs = %+v, want only p's", got.OwnerReferences)
	}
}
