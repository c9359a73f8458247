package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// errRetry asks for a rate-limited re-check without reporting a failure.
var errRetry = errors.New("re-check later")

// write is an API write that carries out a decision: it makes the call,
// records it, and returns the item's outcome (see conflictOrNil).
type write func(context.Context) error

// planDeleteItem checks one item: a foreground owner waiting for its
// dependents, or a live dependent that may be garbage. It returns the write
// its decision needs, if any; nothing has been written when it returns.
func (c *Collector) planDeleteItem(ctx context.Context, uid types.UID) (write, error) {
	// A foreground owner that is still blocked has nothing to do but, now
	// and then, re-check its dependents: decide that from the graph's
	// blocking count instead of copying every dependent (see
	// dependentsRecheck). An unblocked owner always takes the full path.
	if o, ok := c.graph.Owner(uid); ok && !o.Virtual && o.DeletingDependents &&
		c.graph.BlockingDependents(uid) > 0 && !c.rechecks.due(uid) {
		return nil, nil
	}
	it, ok := c.graph.Item(uid)
	if !ok || it.Virtual {
		return nil, nil
	}
	// Already written to at this version: wait for the informer (see writeLog).
	if skip, stale := c.writes.check(uid, it.ResourceVersion); skip {
		if stale {
			return nil, errRetry
		}
		return nil, nil
	}
	var a Action
	switch {
	case it.DeletingDependents():
		a = decideForegroundOwner(&it)
	case it.Deleting || len(it.OwnerReferences) == 0:
		// Being deleted by someone else, or not a dependent at all.
		return nil, nil
	default:
		states := make([]OwnerState, len(it.OwnerReferences))
		var errs []error
		for i := range it.OwnerReferences {
			s, err := c.resolver.resolve(ctx, it.Identity, &it.OwnerReferences[i])
			states[i] = s
			switch {
			case err != nil:
				errs = append(errs, err)
			case s == Unresolvable || s == Invalid:
				klog.FromContext(ctx).V(1).Info("Owner reference cannot be resolved; keeping object", "object", it.Identity.String(),
					"ownerAPIVersion", it.OwnerReferences[i].APIVersion, "ownerKind", it.OwnerReferences[i].Kind, "state", s.String())
				c.reportUnresolvable(it.Identity, &it.OwnerReferences[i], s)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		a = decideDependent(&it, states)
	}
	return c.plan(ctx, &it, a)
}

// plan turns a decision into the write that carries it out (nil when the
// decision needs none). It is the only caller of apiops for the
// attempt-to-delete path.
func (c *Collector) plan(ctx context.Context, it *graph.Item, a Action) (write, error) {
	switch a.Type {
	case Keep:
		if a.Retry {
			return nil, errRetry
		}
		return nil, nil
	case CheckDependents:
		for _, uid := range a.Dependents {
			c.attemptToDelete.Add(uid)
		}
		return nil, nil
	case RemoveReferences, RemoveForegroundFinalizer, DeleteItem:
	default:
		return nil, fmt.Errorf("unknown action %d", a.Type)
	}
	t, err := c.target(it)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		err := c.execute(ctx, it, t, a)
		c.writes.record(it.Identity.UID, it.ResourceVersion, err)
		return conflictOrNil(err)
	}, nil
}

// execute makes the calls of a write decided for it, at t.
func (c *Collector) execute(ctx context.Context, it *graph.Item, t apiops.Target, a Action) error {
	logger := klog.FromContext(ctx)
	switch a.Type {
	case RemoveReferences:
		if l := logger.V(2); l.Enabled() {
			l.Info("Removing dangling and waiting owner references", "object", it.Identity.String())
		}
		_, err := c.ops.SetOwnerReferences(ctx, t, a.Refs)
		c.record(metrics.OpRemoveRefs, err)
		return err
	case RemoveForegroundFinalizer:
		if l := logger.V(2); l.Enabled() {
			l.Info("Dependents gone; removing foregroundDeletion finalizer", "object", it.Identity.String())
		}
		_, err := c.ops.SetFinalizers(ctx, t, a.Finalizers)
		c.record(metrics.OpRemoveFinalizer, err)
		return err
	}
	if a.Unblock {
		if l := logger.V(2); l.Enabled() {
			l.Info("Clearing blockOwnerDeletion to break a cycle", "object", it.Identity.String())
		}
		obj, err := c.ops.SetOwnerReferences(ctx, t, a.Refs)
		c.record(metrics.OpUnblockRefs, err)
		if err != nil {
			return err
		}
		t.ResourceVersion = obj.ResourceVersion
	}
	// Guarded: the arguments (a formatted identity) would otherwise be
	// built for every collected object even with the line disabled.
	if l := logger.V(2); l.Enabled() {
		l.Info("Deleting garbage", "object", it.Identity.String(), "policy", string(a.Policy))
	}
	err := c.ops.Delete(ctx, t, a.Policy)
	c.record(metrics.OpDelete, err)
	return err
}

// conflictOrNil maps a write's error to the item's outcome: 404 means the
// object is gone (nothing left to do); a 409 means the decision was made
// from a stale version and the item is re-checked, rate-limited, from the
// graph once the informer delivered a newer one (writeLog holds it back
// until then); anything else is retried as a failure.
func conflictOrNil(err error) error {
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return errRetry
	}
	return err
}

// orphanConcurrency bounds the ownerReference patches one orphaning owner
// has in flight: as many as there are workers (the parallelism a background
// cascade's decisions get), so one owner keeps the client's budget busy
// without one goroutine (and connection) per dependent, and without taking
// every write slot from the other cascades.
func (c *Collector) orphanConcurrency() int { return max(c.cfg.Workers, 1) }

// planOrphanItem removes an orphaning owner's references from its
// dependents and returns the write that then removes its orphan finalizer.
// Each patch is decided from the graph and carries the dependent's uid and
// resourceVersion, so a dependent that changed since is rejected (409) and
// the owner is re-checked. Each patch takes a write slot while it runs.
func (c *Collector) planOrphanItem(ctx context.Context, uid types.UID) (write, error) {
	owner, ok := c.graph.Item(uid)
	if !ok || owner.Virtual || !owner.Orphaning() {
		return nil, nil
	}
	if skip, stale := c.writes.check(uid, owner.ResourceVersion); skip {
		if stale {
			return nil, errRetry
		}
		return nil, nil
	}
	var (
		mu    sync.Mutex
		errs  []error
		retry bool
		wg    sync.WaitGroup
		sem   = make(chan struct{}, c.orphanConcurrency())
	)
	for _, d := range owner.Dependents {
		dep, ok := c.graph.Object(d.UID)
		if !ok {
			continue
		}
		if skip, stale := c.writes.check(dep.Identity.UID, dep.ResourceVersion); skip {
			if stale {
				mu.Lock()
				retry = true
				mu.Unlock()
			}
			continue
		}
		refs := slices.DeleteFunc(slices.Clone(dep.OwnerReferences), func(r metav1.OwnerReference) bool { return r.UID == uid })
		if len(refs) == len(dep.OwnerReferences) {
			continue
		}
		t, err := c.target(&graph.Item{Object: dep})
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("orphaning %s: %w", dep.Identity, err))
			mu.Unlock()
			continue
		}
		sem <- struct{}{}
		if !c.acquireSlot(ctx) {
			<-sem
			mu.Lock()
			errs = append(errs, ctx.Err())
			mu.Unlock()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := c.ops.SetOwnerReferences(ctx, t, refs)
			c.releaseSlot()
			c.record(metrics.OpOrphan, err)
			c.writes.record(dep.Identity.UID, dep.ResourceVersion, err)
			if err = conflictOrNil(err); err != nil {
				mu.Lock()
				if errors.Is(err, errRetry) {
					retry = true
				} else {
					errs = append(errs, fmt.Errorf("orphaning %s: %w", dep.Identity, err))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if retry {
		return nil, errRetry
	}
	t, err := c.target(&owner)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		klog.FromContext(ctx).V(2).Info("Dependents orphaned; removing orphan finalizer", "object", owner.Identity.String(), "dependents", len(owner.Dependents))
		_, err := c.ops.SetFinalizers(ctx, t, withoutFinalizer(owner.Finalizers, graph.FinalizerOrphan))
		c.record(metrics.OpRemoveFinalizer, err)
		c.writes.record(uid, owner.ResourceVersion, err)
		return conflictOrNil(err)
	}, nil
}

// record counts one write and its outcome.
func (c *Collector) record(op string, err error) {
	outcome := metrics.OutcomeSuccess
	switch {
	case err == nil:
	case apierrors.IsConflict(err):
		outcome = metrics.OutcomeConflict
	case apierrors.IsNotFound(err):
		outcome = metrics.OutcomeNotFound
	default:
		outcome = metrics.OutcomeError
	}
	c.cfg.Metrics.Operation(op, outcome)
}
