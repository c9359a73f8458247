package model

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// safetyWatcher is the test's independent judge of kgc's deletions. It does
// not use any kgc code: it watches every involved resource and keeps, for
// each object, the sequence of states it went through, each stamped with the
// resourceVersion of the change.
//
// Assumption: one etcd backs the whole apiserver, so resourceVersions are
// etcd revisions and comparable across resources (every write is one etcd
// transaction with its own revision). That makes "the owner's state at the
// moment the dependent was deleted" well defined: the owner's latest state
// with a smaller revision. The watches of different resources deliver their
// events in no particular order relative to each other, so judgement is
// made after a barrier (see sync), not as events arrive.
type safetyWatcher struct {
	mu       sync.Mutex
	objects  map[types.UID]*history
	markers  map[string]chan struct{}
	unknowns map[string]int // run → deletions seen only as DeletedFinalStateUnknown
}

// history is what the watcher knows about one object.
type history struct {
	id     ident
	run    string
	states []objState
}

// objState is one observed state of an object.
type objState struct {
	rv         uint64
	gone       bool
	deleting   bool
	refs       []metav1.OwnerReference
	finalizers []string
}

func (s objState) String() string {
	var refs []string
	for _, r := range s.refs {
		refs = append(refs, fmt.Sprintf("%s/%s(uid %s, block=%v)", r.Kind, r.Name, r.UID, r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion))
	}
	return fmt.Sprintf("{rv %d gone=%v deleting=%v finalizers=%v refs=[%s]}", s.rv, s.gone, s.deleting, s.finalizers, strings.Join(refs, ", "))
}

func startSafetyWatcher(ctx context.Context, client metadata.Interface) (*safetyWatcher, error) {
	w := &safetyWatcher{objects: map[types.UID]*history{}, markers: map[string]chan struct{}{}, unknowns: map[string]int{}}
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = labelSeed })
	for _, k := range allKinds {
		inf := factory.ForResource(k.gvr).Informer()
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { w.observe(k, o, false) },
			UpdateFunc: func(_, o any) { w.observe(k, o, false) },
			DeleteFunc: func(o any) { w.observe(k, o, true) },
		})
		if err != nil {
			return nil, err
		}
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for gvr, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %s did not sync", gvr)
		}
	}
	return w, nil
}

func (w *safetyWatcher) observe(k kindInfo, o any, deleted bool) {
	unknown := false
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o, unknown = d.Obj, true
	}
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if token := m.Labels[labelMarker]; token != "" {
		if ch, ok := w.markers[token]; ok && !deleted {
			close(ch)
			delete(w.markers, token)
		}
		return
	}
	run := m.Labels[labelSeed]
	if unknown {
		// The final state was missed (watch gap): the deletion's revision
		// is unknown and cannot be judged. Counted and reported.
		w.unknowns[run]++
		return
	}
	rv, err := strconv.ParseUint(m.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	h := w.objects[m.UID]
	if h == nil {
		h = &history{id: ident{kind: k, namespace: m.Namespace, name: m.Name, uid: m.UID}, run: run}
		w.objects[m.UID] = h
	}
	h.states = append(h.states, objState{
		rv:         rv,
		gone:       deleted,
		deleting:   m.DeletionTimestamp != nil,
		refs:       m.OwnerReferences,
		finalizers: m.Finalizers,
	})
}

// sync returns once the watcher has seen every change made before it was
// called: it creates one marker object per watched resource and waits for
// each to come back through the watch.
func (w *safetyWatcher) sync(ctx context.Context, namespace string) error {
	token := fmt.Sprintf("%d", time.Now().UnixNano())
	var pending []chan struct{}
	var created []ident
	defer func() {
		for _, o := range created {
			_ = o.meta().Delete(context.WithoutCancel(ctx), o.name, metav1.DeleteOptions{})
		}
	}()
	for _, k := range allKinds {
		tok := k.gvr.Resource + "-" + token
		ch := make(chan struct{})
		w.mu.Lock()
		w.markers[tok] = ch
		w.mu.Unlock()
		o := ident{kind: k, name: "marker-" + tok}
		if k.namespaced {
			o.namespace = namespace
		}
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(k.apiVersion)
		u.SetKind(k.kind)
		u.SetName(o.name)
		u.SetNamespace(o.namespace)
		u.SetLabels(map[string]string{labelSeed: "marker", labelMarker: tok})
		if _, err := o.dynamic().Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s marker: %w", k.kind, err)
		}
		created = append(created, o)
		pending = append(pending, ch)
	}
	timeout := time.After(30 * time.Second)
	for _, ch := range pending {
		select {
		case <-ch:
		case <-timeout:
			return fmt.Errorf("the watcher did not see its markers within 30s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// judge checks every deletion of run's objects that the test did not issue
// itself (testDeleted) and returns the violations: a deletion — its start
// (deletionTimestamp set) or the object's removal — at a revision at which
// one of the object's owners existed and was not being deleted.
func (w *safetyWatcher) judge(run string, testDeleted map[types.UID]bool) (violations []string, judged, unknown int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	uids := make([]types.UID, 0, len(w.objects))
	for uid, h := range w.objects {
		if h.run == run && !testDeleted[uid] {
			uids = append(uids, uid)
		}
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, uid := range uids {
		h := w.objects[uid]
		started := false
		for _, s := range h.states {
			// The start of the deletion and the removal itself are judged;
			// updates of an object already being deleted are not deletions.
			if !(s.gone || (s.deleting && !started)) {
				continue
			}
			started = true
			judged++
			for _, ref := range s.refs {
				oh := w.objects[ref.UID]
				if oh == nil {
					continue // never existed among the watched objects: dangling
				}
				os, ok := oh.stateBefore(s.rv)
				if !ok || os.gone || os.deleting {
					continue
				}
				violations = append(violations, fmt.Sprintf(
					"%s was deleted (state %s) while its owner %s was alive and not being deleted (owner state %s)\n  dependent history: %v\n  owner history: %v",
					h.id, s, oh.id, os, h.states, oh.states))
			}
		}
	}
	return violations, judged, w.unknowns[run]
}

// stateBefore returns the latest state of h at a revision before rv.
func (h *history) stateBefore(rv uint64) (objState, bool) {
	var out objState
	found := false
	for _, s := range h.states {
		if s.rv < rv {
			out, found = s, true
		}
	}
	return out, found
}
