package namespaces

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kgc-dev/kgc/internal/history"
)

// wrote finishes rec, the record of one write of the lifecycle that
// returned err: it logs it in one line at the default verbosity and keeps
// it in Config.History, as the collector's workers do with theirs.
func (c *Controller) wrote(ctx context.Context, rec history.Record, err error) {
	outcome := history.OutcomeError
	switch {
	case err == nil:
		outcome = history.OutcomeSuccess
	case apierrors.IsNotFound(err):
		outcome = history.OutcomeNotFound
	case apierrors.IsConflict(err):
		outcome = history.OutcomeConflict
	}
	c.cfg.History.Finish(ctx, "Namespace lifecycle write", &rec, outcome, c.clock.Now(), err)
}

// namespaceDeleting is the reason of every deletion the lifecycle makes.
func namespaceDeleting(ns string) string {
	return "its namespace " + ns + " is being deleted, and kgc's namespace lifecycle empties it"
}
