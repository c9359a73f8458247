package namespaces

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/history"
)

// wrote finishes rec, the record of one write of the lifecycle that
// returned err: it logs it in one line at the default verbosity and keeps
// it in Config.History, as the collector's workers do with theirs.
func (c *Controller) wrote(ctx context.Context, rec history.Record, err error) {
	switch {
	case err == nil:
		rec.Outcome = history.OutcomeSuccess
	case apierrors.IsNotFound(err):
		rec.Outcome = history.OutcomeNotFound
	case apierrors.IsConflict(err):
		rec.Outcome = history.OutcomeConflict
	default:
		rec.Outcome = history.OutcomeError
		rec.Error = err.Error()
	}
	rec.Time = c.clock.Now()
	kv := []any{"operation", rec.Operation, "object", rec.Object, "reason", rec.Reason, "preconditions", rec.Preconditions, "outcome", rec.Outcome}
	if rec.Error != "" {
		kv = append(kv, "err", rec.Error)
	}
	klog.FromContext(ctx).Info("Namespace lifecycle write", kv...)
	c.cfg.History.Add(&rec)
}

// namespaceDeleting is the reason of every deletion the lifecycle makes.
func namespaceDeleting(ns string) string {
	return "its namespace " + ns + " is being deleted, and kgc's namespace lifecycle empties it"
}
