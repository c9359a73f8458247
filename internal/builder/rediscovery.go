package builder

import (
	"context"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/graph"
)

// Event-driven discovery. kgc monitors CustomResourceDefinitions and
// APIServices like any other deletable resource; when the graph builder's
// feed shows one of them change, discovery runs again at once instead of on
// the next periodic resync. The apiserver's discovery document lags the
// change (a CRD is Established before discovery serves it), so each change
// also records what discovery should come to show — the CRD's resource
// present or gone, the APIService's group version present or gone — and
// discovery is retried with a short backoff until it does or the
// expectation expires. The periodic resync stays as the backstop.
const (
	// rediscoveryDebounce gathers the burst of events one change makes (a
	// CRD's create, then its status updates) into one rediscovery.
	rediscoveryDebounce = 50 * time.Millisecond
	// rediscoveryRetryMin and rediscoveryRetryMax bound the backoff between
	// retries while an expectation is unmet.
	rediscoveryRetryMin = 100 * time.Millisecond
	rediscoveryRetryMax = time.Second
	// expectationWindow is how long discovery is retried for one change.
	expectationWindow = 10 * time.Second
)

var (
	crdGroupKind        = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	apiServiceGroupKind = schema.GroupKind{Group: "apiregistration.k8s.io", Kind: "APIService"}
)

// expectKey names what an expectation is about: a CRD's group resource or
// an APIService's group version (exactly one is set).
type expectKey struct {
	gr schema.GroupResource
	gv schema.GroupVersion
}

type expectation struct {
	present  bool
	deadline time.Time
}

// rediscoverer turns CRD and APIService events into rediscovery requests.
type rediscoverer struct {
	kick chan struct{} // capacity 1: a pending request

	mu     sync.Mutex
	expect map[expectKey]expectation
	// groups whose CRDs or APIServices changed recently, until when: their
	// failing monitors are restarted rather than left to their backoff.
	groups map[string]time.Time
	// known holds the UIDs of the CRDs and APIServices seen so far: the
	// first sight of one (at startup, or a new one) is no fix of anything.
	known map[types.UID]struct{}
}

func newRediscoverer() *rediscoverer {
	return &rediscoverer{
		kick: make(chan struct{}, 1), expect: make(map[expectKey]expectation),
		groups: make(map[string]time.Time), known: make(map[types.UID]struct{}),
	}
}

// changedGroups returns the groups changed within the expectation window.
func (r *rediscoverer) changedGroups() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	out := make(map[string]bool, len(r.groups))
	for g, until := range r.groups {
		if now.After(until) {
			delete(r.groups, g)
			continue
		}
		out[g] = true
	}
	return out
}

// observe looks at one monitor event; it must not block (it runs on a
// monitor's goroutine).
func (r *rediscoverer) observe(ev graph.Event) {
	id := ev.Object.Identity
	// Cheap test first: this runs for every event of every resource.
	if id.Kind != crdGroupKind.Kind && id.Kind != apiServiceGroupKind.Kind {
		return
	}
	var key expectKey
	switch id.GroupKind() {
	case crdGroupKind:
		// A CRD is named <plural>.<group>.
		plural, group, ok := strings.Cut(id.Name, ".")
		if !ok {
			return
		}
		key.gr = schema.GroupResource{Group: group, Resource: plural}
	case apiServiceGroupKind:
		// An APIService is named <version>.<group> (the core group's is "v1.").
		version, group, ok := strings.Cut(id.Name, ".")
		if !ok {
			return
		}
		key.gv = schema.GroupVersion{Group: group, Version: version}
	default:
		return
	}
	r.mu.Lock()
	if _, seen := r.known[id.UID]; seen || ev.Type == graph.Delete {
		r.groups[key.gr.Group+key.gv.Group] = time.Now().Add(expectationWindow)
	}
	if ev.Type == graph.Delete {
		delete(r.known, id.UID)
	} else {
		r.known[id.UID] = struct{}{}
	}
	switch {
	case ev.Type == graph.Delete:
		r.expect[key] = expectation{present: false, deadline: time.Now().Add(expectationWindow)}
	case !ev.Object.Deleting:
		r.expect[key] = expectation{present: true, deadline: time.Now().Add(expectationWindow)}
	default:
		// Terminating: discovery may serve it a while longer; one
		// rediscovery now, the delete event sets the expectation.
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// settle drops the expectations the discovered resources meet (or that
// expired) and reports whether any remain.
func (r *rediscoverer) settle(want map[schema.GroupVersionResource]discovery.Resource, failed map[schema.GroupVersion]error, ignored map[schema.GroupResource]struct{}) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.expect) == 0 {
		return false
	}
	grs := make(map[schema.GroupResource]bool, len(want))
	gvs := make(map[schema.GroupVersion]bool)
	for gvr := range want {
		grs[gvr.GroupResource()] = true
		gvs[gvr.GroupVersion()] = true
	}
	for gv := range failed {
		gvs[gv] = true
	}
	now := time.Now()
	for key, e := range r.expect {
		var present bool
		if key.gr.Resource != "" {
			if _, skip := ignored[key.gr]; skip {
				delete(r.expect, key)
				continue
			}
			present = grs[key.gr]
		} else {
			present = gvs[key.gv]
		}
		if present == e.present || now.After(e.deadline) {
			delete(r.expect, key)
		}
	}
	return len(r.expect) > 0
}

// RunDiscovery rediscovers on every CRD or APIService change (retrying
// while discovery lags), and periodically as a backstop, calling periodic
// after each periodic round (the workers re-check the graph's unfinished
// work then). It never holds anything the workers need: monitors are added
// and removed while workers keep running.
func (b *Builder) RunDiscovery(ctx context.Context, periodic func(context.Context)) {
	logger := klog.FromContext(ctx)
	clk := b.clock()
	ticker := clk.NewTicker(b.cfg.ResyncPeriod)
	defer ticker.Stop()
	retry := clk.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := rediscoveryRetryMin
	for {
		isPeriodic := false
		reason := "retry"
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
			isPeriodic, reason = true, "periodic"
		case <-b.rediscover.kick:
			select {
			case <-ctx.Done():
				return
			case <-clk.After(rediscoveryDebounce):
			}
			backoff = rediscoveryRetryMin
			reason = "change"
		case <-retry.C():
		}
		b.busy.Add(1)
		b.checkSynced()
		logger.V(4).Info("Rediscovering", "reason", reason)
		want, failed, err := b.Resync(ctx)
		if err != nil {
			logger.Error(err, "Rediscovery failed")
		}
		pending := want != nil && b.rediscover.settle(want, failed, b.ignored)
		// A change to a CRD or APIService may have fixed its resource: give
		// its failing monitors a fresh start, and keep doing so (with the
		// same backoff) while they fail within the window.
		if groups := b.rediscover.changedGroups(); len(groups) > 0 {
			if b.monitors.RestartFailing(ctx, func(gvr schema.GroupVersionResource) bool { return groups[gvr.Group] }) > 0 {
				pending = true
			}
		}
		if pending {
			retry.Reset(backoff)
			backoff = min(2*backoff, rediscoveryRetryMax)
		}
		if isPeriodic && periodic != nil {
			periodic(ctx)
		}
		b.busy.Add(-1)
	}
}
