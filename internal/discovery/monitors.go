package discovery

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/graph"
)

// Monitors runs one metadata informer per resource and feeds every
// observation to a single callback.
type Monitors struct {
	client  metadata.Interface
	observe func(graph.Event)

	mu      sync.Mutex
	running map[schema.GroupVersionResource]*monitor
}

type monitor struct {
	resource Resource
	reg      cache.ResourceEventHandlerRegistration
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	lastErr error // the last list or watch error
}

// Status is one monitor's state.
type Status struct {
	Synced bool
	// LastError is the monitor's last list or watch error. A monitor that
	// has not synced and has an error is failing: it cannot list its resource.
	LastError error
}

// Failing reports whether the monitor cannot list its resource.
func (s Status) Failing() bool { return !s.Synced && s.LastError != nil }

// NewMonitors returns a manager whose monitors call observe for each event.
// observe must not block for long: it runs on the informer's goroutine.
func NewMonitors(client metadata.Interface, observe func(graph.Event)) *Monitors {
	return &Monitors{client: client, observe: observe, running: make(map[schema.GroupVersionResource]*monitor)}
}

// Sync makes the running monitors match want: it starts monitors for new
// resources and stops those for resources no longer wanted, except where
// keep says a resource's absence is not to be trusted (its group failed
// discovery). A Kind change for a running GVR restarts its monitor.
func (m *Monitors) Sync(ctx context.Context, want map[schema.GroupVersionResource]Resource, keep func(schema.GroupVersionResource) bool) (added, removed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	logger := klog.FromContext(ctx)
	for gvr, mon := range m.running {
		r, ok := want[gvr]
		if ok && r == mon.resource {
			continue
		}
		if !ok && keep != nil && keep(gvr) {
			continue
		}
		m.stopLocked(gvr, mon)
		removed++
		logger.V(2).Info("Stopped monitor", "resource", gvr.String())
	}
	for gvr, r := range want {
		if _, ok := m.running[gvr]; ok {
			continue
		}
		mon, err := m.start(ctx, r)
		if err != nil {
			logger.Error(err, "Cannot start monitor", "resource", gvr.String())
			continue
		}
		m.running[gvr] = mon
		added++
		logger.V(2).Info("Started monitor", "resource", gvr.String())
	}
	return added, removed
}

func (m *Monitors) start(ctx context.Context, r Resource) (*monitor, error) {
	inf := metadatainformer.NewFilteredMetadataInformer(m.client, r.GVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	if err := inf.SetTransform(leanMetadata); err != nil {
		return nil, fmt.Errorf("setting transform for %s: %w", r.GVR, err)
	}
	apiVersion := r.APIVersion()
	toEvent := func(t graph.EventType, obj any) (graph.Event, bool) {
		return toGraphEvent(t, obj, apiVersion, r.Kind)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ev, ok := toEvent(graph.Upsert, obj); ok {
				m.observe(ev)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if sameVersion(oldObj, newObj) {
				return
			}
			if replaced(oldObj, newObj) { // deleted and re-created under the same name
				if ev, ok := toEvent(graph.Delete, oldObj); ok {
					m.observe(ev)
				}
			}
			if ev, ok := toEvent(graph.Upsert, newObj); ok {
				m.observe(ev)
			}
		},
		DeleteFunc: func(obj any) {
			if ev, ok := toEvent(graph.Delete, obj); ok {
				m.observe(ev)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("adding handler for %s: %w", r.GVR, err)
	}
	mctx, cancel := context.WithCancel(ctx)
	mon := &monitor{resource: r, reg: reg, informer: inf, cancel: cancel, done: make(chan struct{})}
	// Remember list/watch errors so a failing resource is visible; the
	// reflector itself keeps retrying with backoff.
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, rf *cache.Reflector, err error) {
		mon.mu.Lock()
		mon.lastErr = err
		mon.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, rf, err)
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("setting watch error handler for %s: %w", r.GVR, err)
	}
	go func() {
		defer close(mon.done)
		inf.RunWithContext(mctx)
	}()
	return mon, nil
}

func (m *Monitors) stopLocked(gvr schema.GroupVersionResource, mon *monitor) {
	_ = mon.informer.RemoveEventHandler(mon.reg)
	mon.cancel()
	<-mon.done
	delete(m.running, gvr)
}

// Stop stops every monitor and waits for them to end.
func (m *Monitors) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for gvr, mon := range m.running {
		m.stopLocked(gvr, mon)
	}
}

// Status reports, per running monitor, whether it has delivered its initial
// list and its last list/watch error.
func (m *Monitors) Status() map[schema.GroupVersionResource]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[schema.GroupVersionResource]Status, len(m.running))
	for gvr, mon := range m.running {
		mon.mu.Lock()
		out[gvr] = Status{Synced: mon.reg.HasSynced(), LastError: mon.lastErr}
		mon.mu.Unlock()
	}
	return out
}

// HasSynced reports whether every running monitor delivered its initial list.
func (m *Monitors) HasSynced() bool {
	for _, st := range m.Status() {
		if !st.Synced {
			return false
		}
	}
	return true
}

// Len returns the number of running monitors.
func (m *Monitors) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.running)
}

// stripMetadata keeps only what kgc decides from, so that the informer
// stores hold no labels, annotations or managedFields. (The monitors now
// store the leaner Meta, see leanMetadata in lean.go.)
func stripMetadata(obj any) (any, error) {
	pom, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: pom.TypeMeta}
	out.Name, out.Namespace, out.UID = pom.Name, pom.Namespace, pom.UID
	out.ResourceVersion = pom.ResourceVersion
	out.OwnerReferences = pom.OwnerReferences
	out.Finalizers = pom.Finalizers
	out.DeletionTimestamp = pom.DeletionTimestamp
	return out, nil
}
