package workers

import (
	"context"

	"github.com/kgc-dev/kgc/internal/graph"
	"k8s.io/apimachinery/pkg/types"
)

// attemptToDeleteItem decides an item and carries its write out at once,
// as a worker and the write pool do together.
func (c *Workers) attemptToDeleteItem(ctx context.Context, uid types.UID) error {
	w, err := c.planDeleteItem(ctx, uid)
	if err != nil || w == nil {
		return err
	}
	return w(ctx)
}

// apply applies ev to the graph and hands the effects to w, as the graph
// builder does.
func (w *Workers) apply(ev graph.Event) { w.Observed(ev, w.graph.Apply(ev)) }
