package workers

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// nopDeleter is a metadata client whose DELETEs succeed at once, so that a
// benchmark measures what kgc does around the request, not client-go's
// HTTP. Any other call panics (nil embedded interfaces).
type nopDeleter struct {
	metadata.Interface
	deletes int
}

type nopResource struct {
	metadata.Getter
	d *nopDeleter
}

func (d *nopDeleter) Resource(schema.GroupVersionResource) metadata.Getter {
	return nopResource{d: d}
}

func (r nopResource) Namespace(string) metadata.ResourceInterface { return r }

func (r nopResource) Delete(_ context.Context, _ string, opts metav1.DeleteOptions, _ ...string) error {
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || opts.Preconditions.ResourceVersion == nil {
		panic("DELETE without UID and resourceVersion preconditions")
	}
	r.d.deletes++
	return nil
}

// BenchmarkCollectDanglingDependent is a worker's whole handling of one
// dependent of an owner observed deleted (every object of a Background
// cascade): graph read, write log, classification, decision, target, the
// DELETE call (answered at once), metrics and the write log again.
func BenchmarkCollectDanglingDependent(b *testing.B) {
	const n = 1 << 14
	g := graph.New()
	g.Apply(graph.Event{Type: graph.Upsert, Object: ownerObj})
	uids := make([]types.UID, n)
	for i := range uids {
		dep := depA
		dep.UID, dep.Name = types.UID(fmt.Sprintf("dep-%d", i)), fmt.Sprintf("dep-%d", i)
		uids[i] = dep.UID
		g.Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: dep, ResourceVersion: "7", OwnerReferences: []metav1.OwnerReference{cmRef}}})
	}
	g.Apply(graph.Event{Type: graph.Delete, Object: ownerObj})
	m, err := metrics.New(nil, metrics.Sources{
		Graph:             func() metrics.GraphCounts { return metrics.GraphCounts{} },
		Monitors:          func() []metrics.MonitorState { return nil },
		DiscoveryFailures: func() []string { return nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	api := &nopDeleter{}
	kinds := map[schema.GroupVersionKind]schema.GroupVersionResource{{Version: "v1", Kind: "ConfigMap"}: fakeapi.ConfigMaps}
	resource := func(gvk schema.GroupVersionKind) (schema.GroupVersionResource, bool) {
		gvr, ok := kinds[gvk]
		return gvr, ok
	}
	c := &Workers{graph: g, ops: &apiops.Ops{Client: api}, cfg: Config{Metrics: m, Resource: resource}}
	c.resolver = &resolver{graph: g, mapper: fakeapi.NewMapper(), absent: newAbsentCache(16384), metrics: m}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		uid := uids[i%n]
		if err := c.attemptToDeleteItem(ctx, uid); err != nil {
			b.Fatal(err)
		}
		c.writes.forget(uid) // so that the next round deletes it again
		i++
	}
	if api.deletes != i {
		b.Fatalf("%d DELETEs for %d checks", api.deletes, i)
	}
}
