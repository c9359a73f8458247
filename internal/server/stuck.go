package server

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/rules"
)

// StuckReport is `kgc stuck --ask-kgc` computed in-process: the same View
// (inspect.ServerView over the graph endpoint's answers, here without
// HTTP) and the same classification. It reads the deleting nodes from the
// graph's index of them and the components of those deleting for longer
// than olderThan, never the whole graph. mapper, when set, recognizes
// owner kinds no API serves, as the collector does.
func StuckReport(ctx context.Context, src Source, mapper meta.RESTMapper, p rules.Policy, olderThan time.Duration) (*inspect.StuckReport, error) {
	v := inspect.NewGraphView(Fetcher(src))
	v.Mapper = mapper
	return inspect.Stuck(ctx, p, v, inspect.StuckOptions{OlderThan: olderThan})
}
