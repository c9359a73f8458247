package discovery

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
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
	// handlers counts event handlers added to informers and not yet removed
	// (a test hook for leaks: it must equal the number of monitors).
	handlers int
}

type monitor struct {
	resource Resource
	reg      cache.ResourceEventHandlerRegistration
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	lastErr error  // the last list or watch error
	errRV   string // the informer's last synced resourceVersion when lastErr happened
}

// status reads the monitor's state. An error counts until the informer makes
// progress after it: a successful list, or a watch event or bookmark, moves
// its last synced resourceVersion.
func (mon *monitor) status() Status {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	st := Status{Synced: mon.reg.HasSynced()}
	if mon.lastErr != nil && mon.informer.LastSyncResourceVersion() == mon.errRV {
		st.LastError = mon.lastErr
	}
	return st
}

// Status is one monitor's state.
type Status struct {
	// Synced: the monitor delivered its initial list.
	Synced bool
	// LastError is the monitor's last list or watch error, if it has made
	// no progress since (while it is set and unchanged, the resource is
	// failing: it cannot be listed or watched).
	LastError error
}

// Failing reports whether the monitor's list or watch fails: it has an
// error and made no progress since. A synced monitor can fail too (a
// conversion webhook that breaks later); its cache is then stale.
func (s Status) Failing() bool { return s.LastError != nil }

// Monitor states, as State reports them.
const (
	StateSynced  = "synced"
	StateSyncing = "syncing"
	StateFailing = "failing"
)

// State names the monitor's state: failing (its list or watch fails),
// synced, or syncing (initial list in progress).
func (s Status) State() string {
	switch {
	case s.Failing():
		return StateFailing
	case s.Synced:
		return StateSynced
	default:
		return StateSyncing
	}
}

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
		m.handlers++
		added++
		logger.V(2).Info("Started monitor", "resource", gvr.String())
	}
	return added, removed
}

func (m *Monitors) start(ctx context.Context, r Resource) (*monitor, error) {
	inf := cache.NewSharedIndexInformer(newListWatch(m.client, r.GVR), &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
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
		mon.errRV = inf.LastSyncResourceVersion()
		mon.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, rf, err)
	}); err != nil {
		cancel()
		_ = inf.RemoveEventHandler(reg)
		return nil, fmt.Errorf("setting watch error handler for %s: %w", r.GVR, err)
	}
	go func() {
		defer close(mon.done)
		inf.RunWithContext(mctx)
	}()
	return mon, nil
}

// listWatch lists and watches one resource's metadata. It differs from
// client-go's metadata informer in two ways, both so that a broken resource
// fails fast and visibly instead of hanging in client-side retries:
//
//   - No streaming list (WatchList): the initial state comes from a plain
//     LIST.
//   - The LIST asks for the latest state (resourceVersion "") where the
//     reflector would ask for "any" ("0"). A resource whose watch cache cannot
//     initialize (a CRD whose conversion webhook is down) answers "0" with
//     429 + Retry-After, which the REST client retries for many seconds
//     before the reflector sees an error; "" is served from etcd when the
//     cache is not ready, and returns the real error (the webhook failure)
//     at once. When the cache is ready, "" is served from it (consistent
//     reads from cache), so the cost is small.
type listWatch struct {
	*cache.ListWatch
}

// IsWatchListSemanticsUnSupported tells the reflector not to use WatchList.
func (listWatch) IsWatchListSemanticsUnSupported() bool { return true }

// monitorListPageSize is the page size of the monitors' LISTs.
const monitorListPageSize = 5000

func newListWatch(client metadata.Interface, gvr schema.GroupVersionResource) listWatch {
	res := client.Resource(gvr).Namespace(metav1.NamespaceAll)
	list := func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		if opts.ResourceVersion == "0" {
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
		}
		// The reflector pages by 500. Every page is a request under kgc's
		// client budget (kube-controller-manager's: 40 QPS), so 100k
		// objects would take 200 requests, 5 s, before kgc is useful.
		// The reflector gathers all pages into one list anyway, so larger
		// pages cost no extra memory; they only bound each response.
		if opts.Limit > 0 && opts.Limit < monitorListPageSize {
			opts.Limit = monitorListPageSize
		}
		return res.List(ctx, opts)
	}
	return listWatch{&cache.ListWatch{
		ListFunc: func(opts metav1.ListOptions) (runtime.Object, error) {
			return list(context.Background(), opts)
		},
		WatchFunc: func(opts metav1.ListOptions) (watch.Interface, error) {
			return res.Watch(context.Background(), opts)
		},
		ListWithContextFunc:  list,
		WatchFuncWithContext: res.Watch,
	}}
}

// stopLocked removes the monitor's handler, stops its informer and waits
// until the informer's goroutines have ended, so that a resource that comes
// and goes (a CRD deleted and recreated) leaves nothing behind.
func (m *Monitors) stopLocked(gvr schema.GroupVersionResource, mon *monitor) {
	if err := mon.informer.RemoveEventHandler(mon.reg); err == nil {
		m.handlers--
	}
	mon.cancel()
	<-mon.done
	delete(m.running, gvr)
}

// RestartFailing restarts the monitors of the resources match selects that
// are failing and never synced, and returns how many it restarted. A fresh
// reflector lists at once instead of waiting out the backoff of the failed
// one, so a resource that was just fixed (a CRD's conversion webhook
// repaired, an APIService's backend back) is collected right away. Monitors
// that synced are left alone: restarting them would drop their cache, and
// with it any deletion that happens before the new list.
func (m *Monitors) RestartFailing(ctx context.Context, match func(schema.GroupVersionResource) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for gvr, mon := range m.running {
		if st := mon.status(); st.Synced || !st.Failing() || !match(gvr) {
			continue
		}
		m.stopLocked(gvr, mon)
		fresh, err := m.start(ctx, mon.resource)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot restart monitor", "resource", gvr.String())
			continue
		}
		m.running[gvr] = fresh
		m.handlers++
		n++
		klog.FromContext(ctx).V(2).Info("Restarted failing monitor", "resource", gvr.String())
	}
	return n
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
// list and its current list/watch error, if any.
func (m *Monitors) Status() map[schema.GroupVersionResource]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[schema.GroupVersionResource]Status, len(m.running))
	for gvr, mon := range m.running {
		out[gvr] = mon.status()
	}
	return out
}

// Handlers returns the number of event handlers the monitors registered
// and have not removed; it equals Len unless a handler leaked.
func (m *Monitors) Handlers() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.handlers
}

// Settled reports whether every running monitor either delivered its
// initial list or is failing (its list or watch returned an error; the
// reflector keeps retrying it with backoff).
func (m *Monitors) Settled() bool {
	for _, st := range m.Status() {
		if !st.Synced && !st.Failing() {
			return false
		}
	}
	return true
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
