package namespaces

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// FinalizerKubernetes is the spec.finalizers entry the namespace lifecycle
// owns (corev1.FinalizerKubernetes): the apiserver adds it to every
// Namespace, and a deleting Namespace goes once it is removed.
const FinalizerKubernetes = corev1.FinalizerKubernetes

// Log keys.
const (
	logKeyNamespace = "namespace"
	logKeyOutcome   = "outcome"
	logKeyRemaining = "remaining"
)

// API is every API call the namespace lifecycle makes (apiops.NamespaceOps
// in production, a fake in unit tests).
type API interface {
	GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error)
	UpdateNamespaceStatus(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error)
	FinalizeNamespace(ctx context.Context, ns *corev1.Namespace) (*corev1.Namespace, error)
	NamespacedResources() ([]*metav1.APIResourceList, error)
	DeleteCollection(ctx context.Context, gvr schema.GroupVersionResource, ns string) error
	DeleteInNamespace(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, uid types.UID) error
	ListInNamespace(ctx context.Context, gvr schema.GroupVersionResource, ns string) ([]metav1.PartialObjectMetadata, error)
}

// Config is what a Controller needs.
type Config struct {
	API API
	// Workers process namespaces in parallel; default 10
	// (kube-controller-manager's --concurrent-namespace-syncs).
	Workers int
	// AdmissionGrace is how long after first observing a namespace
	// deleting kgc waits before it may remove the kubernetes finalizer;
	// default 5s, negative for none (unit tests). See Controller.sync.
	AdmissionGrace time.Duration
	// Recheck is the backstop delay before a namespace with content left
	// is checked again when no observed deletion wakes it sooner; default 15s.
	Recheck time.Duration
	// Observed, optional, answers from kgc's graph how many objects of a
	// resource (of kind) it holds in namespace ns, and whether that count
	// is complete: the resource is monitored, not failing, and a complete
	// list of it has been applied. A resource the graph shows complete and
	// empty gets no DELETECOLLECTION (or per-object DELETEs): only the
	// confirming quorum LIST, and the deletion after all if that LIST
	// finds something (the graph lags the API server). Nil: every resource
	// is deleted.
	Observed func(ns string, gvr schema.GroupVersionResource, kind string) (n int, complete bool)
	// Metrics is optional.
	Metrics *metrics.Metrics
	// QueueMetrics, optional, is told about the queue too, besides
	// Metrics (metrics.Metrics.Queues).
	QueueMetrics workqueue.MetricsProvider
	// Clock is optional (the real clock).
	Clock clock.WithTicker
	// History, optional, keeps the record of the lifecycle's deletions
	// and finalizer removals beside the collector's writes
	// (docs/history.md); each is also logged at the default verbosity.
	// Status condition updates are neither.
	History *history.Ring
}

// Controller is the namespace lifecycle: a Sink for the graph builder's
// observations and a pool of workers (see the package doc).
type Controller struct {
	cfg   Config
	api   API
	clock clock.WithTicker
	queue workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// deleting are the namespaces observed deleting and not observed gone,
	// by name, with when kgc first observed each (by UID: a name is reused
	// by a new namespace).
	deleting map[string]seen
}

type seen struct {
	uid  types.UID
	when time.Time
}

// New returns a Controller; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.API == nil {
		return nil, errors.New("namespaces: API is required")
	}
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("namespaces: workers must not be negative, got %d", cfg.Workers)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 10
	}
	if cfg.AdmissionGrace == 0 {
		cfg.AdmissionGrace = 5 * time.Second
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = 15 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	// Per-namespace exponential backoff for failures (5 ms doubling to a
	// minute), under an overall bucket, the shape kube-controller-manager
	// gives its namespace queue.
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Minute),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
	q := workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{
		Name: metrics.QueueNamespace, MetricsProvider: cfg.Metrics.Queues(cfg.QueueMetrics), Clock: cfg.Clock,
	})
	return &Controller{cfg: cfg, api: cfg.API, clock: cfg.Clock, queue: q, deleting: map[string]seen{}}, nil
}

// contentBatch delays the re-check a deletion inside a deleting namespace
// triggers, so that the deletions of one DELETECOLLECTION (thousands of
// watch events) cost one pass, not thousands.
const contentBatch = 500 * time.Millisecond

// Observed implements builder.Sink. It runs on the graph builder's
// goroutine and never blocks: it only queues.
func (c *Controller) Observed(ev graph.Event, eff graph.Effects) {
	id := ev.Object.Identity
	if id.APIVersion == "v1" && id.Kind == "Namespace" && id.Namespace == "" {
		if ev.Type == graph.Upsert && ev.Object.Deleting {
			c.mu.Lock()
			s, ok := c.deleting[id.Name]
			if !ok || s.uid != id.UID {
				c.deleting[id.Name] = seen{uid: id.UID, when: c.clock.Now()}
			}
			n := len(c.deleting)
			c.mu.Unlock()
			c.cfg.Metrics.NamespacesTerminating(n)
			if !ok || s.uid != id.UID {
				c.queue.Add(id.Name)
			}
			return
		}
	}
	var gone []string
	if ev.Type == graph.Delete {
		gone = append(gone, namespaceOf(ev.Object.Identity.APIVersion, ev.Object.Identity.Kind, ev.Object.Identity.Namespace, ev.Object.Identity.Name))
	}
	for _, a := range eff.Absent {
		gone = append(gone, namespaceOf(a.APIVersion, a.Kind, a.Namespace, a.Name))
	}
	for _, key := range gone {
		if key == "" {
			continue
		}
		ns, nsItself := key[1:], key[0] == '!'
		c.mu.Lock()
		_, tracked := c.deleting[ns]
		if tracked && nsItself {
			delete(c.deleting, ns)
		}
		n := len(c.deleting)
		c.mu.Unlock()
		if !tracked {
			continue
		}
		if nsItself {
			c.cfg.Metrics.NamespacesTerminating(n)
			continue
		}
		c.queue.AddAfter(ns, contentBatch)
	}
}

// namespaceOf returns "!name" for a Namespace, "/ns" for an object in
// namespace ns, "" for any other cluster-scoped object.
func namespaceOf(apiVersion, kind, ns, name string) string {
	switch {
	case apiVersion == "v1" && kind == "Namespace" && ns == "":
		return "!" + name
	case ns != "":
		return "/" + ns
	}
	return ""
}

// Enqueue asks for a pass over namespace name (tests, and a caller that
// knows better than the monitors).
func (c *Controller) Enqueue(name string) { c.queue.Add(name) }

// Run runs the workers until ctx is done, then stops them and returns.
func (c *Controller) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("namespace")
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

// Idle reports whether no namespace is queued or being processed (namespaces
// waiting out a delay are not counted). A test hook.
func (c *Controller) Idle() bool { return c.queue.Len() == 0 }

func (c *Controller) processNext(ctx context.Context) bool {
	name, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(name)
	start := c.clock.Now()
	out := c.sync(ctx, name)
	c.cfg.Metrics.NamespaceSync(out.outcome, c.clock.Since(start))
	logger := klog.FromContext(ctx)
	switch {
	case out.err != nil:
		logger.Error(out.err, "Namespace deletion failed, retrying", logKeyNamespace, name)
		c.queue.AddRateLimited(name)
	case out.after > 0:
		logger.V(2).Info("Namespace deletion waits", logKeyNamespace, name, logKeyRemaining, out.remaining, "recheckAfter", out.after.String())
		c.queue.Forget(name)
		c.queue.AddAfter(name, out.after)
	default:
		logger.V(2).Info("Namespace pass done", logKeyNamespace, name, logKeyOutcome, out.outcome)
		c.queue.Forget(name)
	}
	return true
}

// outcome is what one pass decided.
type outcome struct {
	outcome   string // metrics.Namespace*
	after     time.Duration
	remaining int
	err       error
}

// sync is one pass over namespace name. It acts only on a Namespace that
// has a deletionTimestamp and the kubernetes finalizer in spec.finalizers;
// any other Namespace it leaves alone (as kube-controller-manager does: a
// Namespace whose spec.finalizers is already empty is the apiserver's to
// delete, once its metadata.finalizers are gone too).
//
// Why removing the finalizer is safe. "Nothing is left in the namespace"
// is a negative fact, which kgc concludes only from reads that cannot miss
// an object:
//   - Every namespaced resource is read with a quorum LIST (no
//     resourceVersion: served from etcd, not a cache) after its deletion,
//     in this very pass; the finalizer goes only if every LIST succeeded
//     and found nothing, and discovery was complete (a group that fails
//     discovery, a resource whose LIST fails, a group version that does
//     not parse: the finalizer stays, and the conditions say why). A
//     LIST answering 404 or 405 counts as empty: the resource is not
//     served (a CRD deleted in between).
//   - No object can appear after its resource's LIST: the apiserver's
//     NamespaceLifecycle admission refuses creations in a deleting
//     namespace. It decides from its own Namespace cache, so for a short
//     while after the deletion an apiserver that has not seen it yet may
//     still admit a creation; kgc therefore removes the finalizer only
//     from a pass whose LISTs all started at least AdmissionGrace (5 s,
//     kube-controller-manager's grace too) after kgc first observed the
//     namespace deleting — which is after the deletion happened.
//   - The finalize call carries the resourceVersion of the Namespace as
//     read (and status-updated) at the start of this pass: if the
//     Namespace changed in between, the call fails with a conflict and
//     the pass is repeated.
//
// Why no object outside the namespace is touched: every DELETECOLLECTION,
// DELETE and LIST addresses /namespaces/<name>/<resource> of a resource
// discovery reports namespaced (apiops refuses the empty namespace, which
// would address all of them), and per-object DELETEs carry the listed
// object's UID. Objects' own finalizers are never removed: kgc waits for
// them (NamespaceFinalizersRemaining says which).
func (c *Controller) sync(ctx context.Context, name string) outcome {
	ns, err := c.api.GetNamespace(ctx, name)
	if apierrors.IsNotFound(err) {
		c.forget(name, "")
		return outcome{outcome: metrics.NamespaceSkipped}
	}
	if err != nil {
		return outcome{outcome: metrics.NamespaceFailed, err: fmt.Errorf("reading namespace: %w", err)}
	}
	if ns.DeletionTimestamp == nil {
		c.forget(name, ns.UID)
		return outcome{outcome: metrics.NamespaceSkipped}
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		// The apiserver sets the phase when it marks the namespace
		// deleting; kube-controller-manager makes sure of it anyway.
		up := ns.DeepCopy()
		up.Status.Phase = corev1.NamespaceTerminating
		if ns, err = c.api.UpdateNamespaceStatus(ctx, up); err != nil {
			return outcome{outcome: metrics.NamespaceFailed, err: fmt.Errorf("setting phase Terminating: %w", err)}
		}
	}
	if !slices.Contains(ns.Spec.Finalizers, FinalizerKubernetes) {
		c.forget(name, ns.UID)
		return outcome{outcome: metrics.NamespaceSkipped}
	}
	first := c.firstSeen(name, ns.UID)
	start := c.clock.Now()
	graceLeft := time.Duration(0)
	if c.cfg.AdmissionGrace > 0 {
		graceLeft = first.Add(c.cfg.AdmissionGrace).Sub(start)
	}

	rep := c.deleteContent(ctx, name)

	up := ns.DeepCopy()
	if setConditions(&up.Status, rep.conditions(), metav1.NewTime(c.clock.Now())) {
		if ns, err = c.api.UpdateNamespaceStatus(ctx, up); err != nil {
			return outcome{outcome: metrics.NamespaceFailed, err: fmt.Errorf("updating status conditions: %w", err)}
		}
	}
	if err := rep.err(); err != nil {
		return outcome{outcome: metrics.NamespaceFailed, remaining: rep.remainingTotal(), err: err}
	}
	if n := rep.remainingTotal(); n > 0 {
		return outcome{outcome: metrics.NamespaceWaiting, remaining: n, after: c.cfg.Recheck}
	}
	if graceLeft > 0 {
		return outcome{outcome: metrics.NamespaceWaiting, after: graceLeft}
	}

	fin := ns.DeepCopy()
	fin.Spec.Finalizers = slices.DeleteFunc(fin.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == FinalizerKubernetes })
	_, ferr := c.api.FinalizeNamespace(ctx, fin)
	c.wrote(ctx, history.Record{
		Operation: history.OpFinalizeNamespace, Finalizer: string(FinalizerKubernetes),
		Object:        history.Object{APIVersion: "v1", Kind: "Namespace", Name: name, UID: ns.UID},
		Reason:        "nothing is left in the namespace: every resource in it was listed empty by a quorum read",
		Preconditions: history.Preconditions{UID: ns.UID, ResourceVersion: ns.ResourceVersion},
	}, ferr)
	if ferr != nil && !apierrors.IsNotFound(ferr) {
		return outcome{outcome: metrics.NamespaceFailed, err: fmt.Errorf("removing the %s finalizer: %w", FinalizerKubernetes, ferr)}
	}
	c.cfg.Metrics.NamespaceFinalized(c.clock.Since(first))
	c.forget(name, ns.UID)
	klog.FromContext(ctx).V(1).Info("Namespace emptied; kubernetes finalizer removed", logKeyNamespace, name, "after", c.clock.Since(first).Round(time.Millisecond).String())
	return outcome{outcome: metrics.NamespaceFinalized}
}

// firstSeen returns when kgc first observed namespace name (with uid)
// deleting, recording now if it had not.
func (c *Controller) firstSeen(name string, uid types.UID) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.deleting[name]
	if !ok || s.uid != uid {
		s = seen{uid: uid, when: c.clock.Now()}
		c.deleting[name] = s
		c.cfg.Metrics.NamespacesTerminating(len(c.deleting))
	}
	return s.when
}

// forget drops namespace name from the deleting set (uid "" matches any).
func (c *Controller) forget(name string, uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.deleting[name]; ok && (uid == "" || s.uid == uid) {
		delete(c.deleting, name)
	}
	c.cfg.Metrics.NamespacesTerminating(len(c.deleting))
}
