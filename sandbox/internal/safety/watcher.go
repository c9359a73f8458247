package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
)

// The labels the safety watcher reads.
const (
	// LabelTest names the test an object belongs to (by its namespace); the
	// watcher sees only objects that carry it.
	LabelTest = "kgc.test/test"
	// LabelProtected marks, with "true", an object kgc must never delete
	// while its test runs.
	LabelProtected = "kgc.test/protected"
	// LabelMarker marks the barrier's marker objects.
	LabelMarker = "kgc.test/marker"
)

// Watcher records every deletion, or start of deletion, of a protected
// object, charged to its test.
type Watcher struct {
	stream     *Stream
	mu         sync.Mutex
	violations map[string][]string // test → what happened
	closed     map[string]bool     // tests whose check has run
}

// Start starts a Watcher over resources; it stops once ctx is done.
func Start(ctx context.Context, client metadata.Interface, resources []schema.GroupVersionResource) (*Watcher, error) {
	w := &Watcher{violations: map[string][]string{}, closed: map[string]bool{}}
	var err error
	w.stream, err = Watch(ctx, client, StreamOptions{Resources: resources, Selector: LabelTest, MarkerLabel: LabelMarker}, w.observe)
	if err != nil {
		return nil, err
	}
	return w, nil
}

func (w *Watcher) observe(ev Event) {
	m := ev.Object
	var what string
	switch {
	case ev.Type == Deleted:
		what = "deleted"
	case ev.Type == Updated && m.DeletionTimestamp != nil:
		what = "started deletion (deletionTimestamp set)"
	default:
		return
	}
	if m.Labels[LabelProtected] != "true" {
		return
	}
	test := m.Labels[LabelTest]
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed[test] {
		return
	}
	w.violations[test] = append(w.violations[test], fmt.Sprintf("protected %s %s/%s (uid %s) %s at %s; metadata: %s",
		ev.Resource.Resource, m.Namespace, m.Name, m.UID, what, time.Now().Format(time.RFC3339Nano), Describe(m)))
}

// Check waits until the watcher has caught up with the present (see
// Stream.Sync; createMarker must label its object LabelTest=test), then
// closes test's account — later deletions, a test's own cleanup, are not
// charged to it — and returns what went wrong during the test: each
// deletion of a protected object, and a barrier that failed.
func (w *Watcher) Check(ctx context.Context, test string, timeout time.Duration, createMarker MarkerFunc) []string {
	var problems []string
	if err := w.stream.Sync(ctx, timeout, createMarker); err != nil {
		problems = append(problems, "barrier: "+err.Error())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed[test] = true
	return append(problems, w.violations[test]...)
}

// Describe shows the metadata a deletion judgement rests on:
// deletionTimestamp, finalizers and ownerReferences.
func Describe(m *metav1.PartialObjectMetadata) string {
	if m == nil {
		return "<absent>"
	}
	b, err := json.Marshal(struct {
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp,omitempty"`
		Finalizers        []string                `json:"finalizers,omitempty"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	}{m.DeletionTimestamp, m.Finalizers, m.OwnerReferences})
	if err != nil {
		return err.Error()
	}
	return string(b)
}
