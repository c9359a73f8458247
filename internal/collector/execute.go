package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
)

// errRetry asks for a rate-limited re-check without reporting a failure.
var errRetry = errors.New("re-check later")

// attemptToDeleteItem checks one item: a foreground owner waiting for its
// dependents, or a live dependent that may be garbage.
func (c *Collector) attemptToDeleteItem(ctx context.Context, uid types.UID) error {
	it, ok := c.graph.Item(uid)
	if !ok || it.Virtual {
		return nil
	}
	var a Action
	switch {
	case it.DeletingDependents():
		a = decideForegroundOwner(&it)
	case it.Deleting || len(it.OwnerReferences) == 0:
		// Being deleted by someone else, or not a dependent at all.
		return nil
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
			return err
		}
		a = decideDependent(&it, states)
	}
	return c.execute(ctx, &it, a)
}

// execute carries out a decision. It is the only caller of apiops for the
// attempt-to-delete path.
func (c *Collector) execute(ctx context.Context, it *graph.Item, a Action) error {
	logger := klog.FromContext(ctx)
	switch a.Type {
	case Keep:
		if a.Retry {
			return errRetry
		}
		return nil
	case CheckDependents:
		for _, uid := range a.Dependents {
			c.attemptToDelete.Add(uid)
		}
		return nil
	}
	t, err := c.target(it)
	if err != nil {
		return err
	}
	switch a.Type {
	case RemoveReferences:
		logger.V(2).Info("Removing dangling and waiting owner references", "object", it.Identity.String())
		_, err = c.ops.SetOwnerReferences(ctx, t, a.Refs)
		c.record(metrics.OpRemoveRefs, err)
	case RemoveForegroundFinalizer:
		logger.V(2).Info("Dependents gone; removing foregroundDeletion finalizer", "object", it.Identity.String())
		_, err = c.ops.SetFinalizers(ctx, t, a.Finalizers)
		c.record(metrics.OpRemoveFinalizer, err)
	case DeleteItem:
		if a.Unblock {
			logger.V(2).Info("Clearing blockOwnerDeletion to break a cycle", "object", it.Identity.String())
			obj, perr := c.ops.SetOwnerReferences(ctx, t, a.Refs)
			c.record(metrics.OpUnblockRefs, perr)
			if perr != nil {
				return ignoreNotFound(perr)
			}
			t.ResourceVersion = obj.ResourceVersion
		}
		logger.V(2).Info("Deleting garbage", "object", it.Identity.String(), "policy", string(a.Policy))
		err = c.ops.Delete(ctx, t, a.Policy)
		c.record(metrics.OpDelete, err)
	default:
		return fmt.Errorf("unknown action %d", a.Type)
	}
	return ignoreNotFound(err)
}

// attemptToOrphanItem removes an orphaning owner's references from its
// dependents, then its orphan finalizer.
func (c *Collector) attemptToOrphanItem(ctx context.Context, uid types.UID) error {
	owner, ok := c.graph.Item(uid)
	if !ok || owner.Virtual || !owner.Orphaning() {
		return nil
	}
	var errs []error
	for _, d := range owner.Dependents {
		dep, ok := c.graph.Object(d.UID)
		if !ok {
			continue
		}
		refs := slices.DeleteFunc(slices.Clone(dep.OwnerReferences), func(r metav1.OwnerReference) bool { return r.UID == uid })
		if len(refs) == len(dep.OwnerReferences) {
			continue
		}
		t, err := c.target(&graph.Item{Object: dep})
		if err == nil {
			_, err = c.ops.SetOwnerReferences(ctx, t, refs)
			c.record(metrics.OpOrphan, err)
		}
		if err = ignoreNotFound(err); err != nil {
			errs = append(errs, fmt.Errorf("orphaning %s: %w", dep.Identity, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t, err := c.target(&owner)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Dependents orphaned; removing orphan finalizer", "object", owner.Identity.String(), "dependents", len(owner.Dependents))
	_, err = c.ops.SetFinalizers(ctx, t, withoutFinalizer(owner.Finalizers, graph.FinalizerOrphan))
	c.record(metrics.OpRemoveFinalizer, err)
	return ignoreNotFound(err)
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

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
