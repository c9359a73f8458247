package cluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// recorder keeps every watch event of the objects labelled
// safety.LabelTest in recordedResources, by namespace.
type recorder struct {
	mu     sync.Mutex
	events map[string][]event // namespace → events, in arrival order per resource
}

// event is one watch event, reduced to what the tests judge.
type event struct {
	typ    safety.EventType
	kind   string // the resource
	name   string
	uid    types.UID
	rv     uint64
	owners []metav1.OwnerReference
	// deleting: a deletionTimestamp is set.
	deleting   bool
	finalizers []string
	// unknown: a deletion the watch missed (its rv is not the deletion's).
	unknown bool
}

func startRecorder(ctx context.Context, client metadata.Interface) (*recorder, error) {
	r := &recorder{events: map[string][]event{}}
	_, err := safety.Watch(ctx, client, safety.StreamOptions{
		Resources:   recordedResources,
		Selector:    safety.LabelTest,
		MarkerLabel: safety.LabelMarker,
	}, r.observe)
	return r, err
}

func (r *recorder) observe(ev safety.Event) {
	m := ev.Object
	rv, _ := strconv.ParseUint(m.ResourceVersion, 10, 64)
	e := event{
		typ: ev.Type, kind: ev.Resource.Resource, name: m.Name, uid: m.UID, rv: rv,
		owners: m.OwnerReferences, deleting: m.DeletionTimestamp != nil, finalizers: m.Finalizers,
		unknown: ev.FinalStateUnknown,
	}
	r.mu.Lock()
	r.events[m.Namespace] = append(r.events[m.Namespace], e)
	r.mu.Unlock()
}

// in returns the events of namespace ns so far.
func (r *recorder) in(ns string) []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[ns])
}

// deletionRV returns the resourceVersion (etcd revision) at which the
// object with uid was removed, once the recorder has seen it; ok is false
// before. An error says the watch missed the deletion.
func (r *recorder) deletionRV(ns string, uid types.UID) (rv uint64, ok bool, err error) {
	for _, e := range r.in(ns) {
		if e.uid == uid && e.typ == safety.Deleted {
			if e.unknown {
				return 0, true, fmt.Errorf("the watch missed the deletion of %s %s", e.kind, e.name)
			}
			return e.rv, true, nil
		}
	}
	return 0, false, nil
}

// sawDeletingWith reports whether the recorder saw the object with uid being
// deleted while it had finalizer f.
func (r *recorder) sawDeletingWith(ns string, uid types.UID, f string) bool {
	for _, e := range r.in(ns) {
		if e.uid == uid && e.deleting && slices.Contains(e.finalizers, f) {
			return true
		}
	}
	return false
}
