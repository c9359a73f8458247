package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// safetyWatcher watches every test object (label labelTest) for the whole
// package run, over its own connection (no fault injection), and records
// each deletion — or start of deletion — of a protected object, charged to
// the test named by its labelTest label. It catches what a point-in-time
// existence check cannot: a protected object deleted and recreated, or
// deleted after the test looked. Across an apiserver restart its informers
// relist; a deletion missed in the gap still arrives as a deletion.
type safetyWatcher struct {
	mu         sync.Mutex
	violations map[string][]string      // test namespace → what happened
	markers    map[string]chan struct{} // marker token → closed once seen
}

func startSafetyWatcher(ctx context.Context, client metadata.Interface) (*safetyWatcher, error) {
	w := &safetyWatcher{violations: map[string][]string{}, markers: map[string]chan struct{}{}}
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = labelTest })
	for _, k := range []kind{configMaps, secrets} {
		_, err := factory.ForResource(k.gvr()).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { w.observe(k, o, "") },
			UpdateFunc: func(_, o any) {
				if m, ok := o.(*metav1.PartialObjectMetadata); ok && m.DeletionTimestamp != nil {
					w.observe(k, o, "started deletion (deletionTimestamp set)")
				}
			},
			DeleteFunc: func(o any) { w.observe(k, o, "deleted") },
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
	go func() {
		<-ctx.Done()
		factory.Shutdown()
	}()
	return w, nil
}

func (w *safetyWatcher) observe(k kind, o any, what string) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if token := m.Labels[labelMarker]; token != "" {
		if ch, ok := w.markers[token]; ok && what == "" {
			close(ch)
			delete(w.markers, token)
		}
		return
	}
	if what == "" || m.Labels[labelProtected] != "true" {
		return
	}
	test := m.Labels[labelTest]
	w.violations[test] = append(w.violations[test], fmt.Sprintf("protected %s %s/%s (uid %s) %s at %s",
		k.kind, m.Namespace, m.Name, m.UID, what, time.Now().Format(time.RFC3339Nano)))
}

// check waits until the watcher has caught up with the present (a marker
// object of each kind, created now in ns, must come back through its
// watch), then fails t for every protected object of ns that was deleted.
func (w *safetyWatcher) check(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	token := utilrand.String(10)
	for _, k := range []kind{configMaps, secrets} {
		tok := k.resource + "-" + token
		ch := make(chan struct{})
		w.mu.Lock()
		w.markers[tok] = ch
		w.mu.Unlock()
		if _, err := create(ctx, k, ns, "marker-"+tok, map[string]string{labelMarker: tok}); err != nil {
			t.Errorf("safety barrier: creating the %s marker: %v", k.kind, err)
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Errorf("safety barrier: the watcher did not see its %s marker within %s; deletions may have been missed", k.kind, waitTimeout)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations[ns] {
		t.Errorf("safety: %s", v)
	}
}
