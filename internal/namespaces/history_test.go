package namespaces

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// Every deletion and finalizer removal of the lifecycle is in the write
// history, with what it deleted, why, its preconditions and its outcome:
// a DELETECOLLECTION per resource (a refused one too), the per-object
// DELETEs that replace a refused one, and the namespace's finalize.
func TestWritesAreRecorded(t *testing.T) {
	f := newFake("ns", FinalizerKubernetes)
	f.dcForbidden = map[schema.GroupVersionResource]bool{cmGVR: true}
	f.add(podsGVR, "ns", "p")
	f.add(cmGVR, "ns", "a")
	ring := history.NewRing(100)
	c, err := New(Config{API: f, AdmissionGrace: -1, History: ring})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	if out := c.sync(context.Background(), "ns"); out.err != nil || out.outcome != metrics.NamespaceFinalized {
		t.Fatalf("outcome %+v, want finalized\n%s", out, f.callLog())
	}
	recs, _ := ring.Query(history.Filter{})
	find := func(op, resourceKind, name string) *history.Record {
		for i := range recs {
			r := &recs[i]
			if r.Operation == op && (resourceKind == "" || r.Object.Kind == resourceKind) && r.Object.Name == name {
				return r
			}
		}
		t.Errorf("no %s record of %s %q in %+v", op, resourceKind, name, recs)
		return &history.Record{}
	}
	if r := find(history.OpDeleteCollection, "Pod", ""); r.Outcome != history.OutcomeSuccess || r.Object.Namespace != "ns" || r.Reason == "" {
		t.Errorf("pods' DELETECOLLECTION: %+v", r)
	}
	if r := find(history.OpDeleteCollection, "ConfigMap", ""); r.Outcome != history.OutcomeError || r.Error == "" {
		t.Errorf("configmaps' refused DELETECOLLECTION: %+v, want outcome error with the error", r)
	}
	if r := find(history.OpDelete, "ConfigMap", "a"); r.Outcome != history.OutcomeSuccess || r.Object.UID == "" || r.Preconditions.UID != r.Object.UID {
		t.Errorf("configmap a's DELETE: %+v, want success with a uid precondition", r)
	}
	if r := find(history.OpFinalizeNamespace, "Namespace", "ns"); r.Outcome != history.OutcomeSuccess || r.Preconditions.ResourceVersion == "" || r.Finalizer != string(FinalizerKubernetes) {
		t.Errorf("the namespace's finalize: %+v, want success with its resourceVersion", r)
	}
	for _, r := range recs {
		if r.Time.IsZero() || r.Seq == 0 {
			t.Errorf("record without time or sequence: %+v", r)
		}
	}
}
