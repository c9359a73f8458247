package collector

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
)

// attemptToDeleteItem decides an item and carries its write out at once,
// as a worker and the write pool do together.
func (c *Collector) attemptToDeleteItem(ctx context.Context, uid types.UID) error {
	w, err := c.planDeleteItem(ctx, uid)
	if err != nil || w == nil {
		return err
	}
	return w(ctx)
}
