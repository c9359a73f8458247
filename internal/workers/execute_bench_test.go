package workers

import (
	"context"
	"fmt"
	"io"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/go-logr/logr"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
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
// DELETE call (answered at once), metrics, the write's record (its log
// line, to a logger that discards it, and the history ring) and the write
// log again. history=off leaves the ring out (--write-history-size=0).
func BenchmarkCollectDanglingDependent(b *testing.B) {
	// log=off: a logger that is disabled (what the record costs to make);
	// log=text: klog's text format written to nowhere (what the V(0) line
	// costs to format).
	text := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(io.Discard)))
	for _, tc := range []struct {
		name   string
		size   int
		logger logr.Logger
	}{
		{"history=on/log=off", 10000, logr.Discard()},
		{"history=off/log=off", 0, logr.Discard()},
		{"history=on/log=text", 10000, text},
	} {
		b.Run(tc.name, func(b *testing.B) { benchmarkCollectDanglingDependent(b, history.NewRing(tc.size), tc.logger) })
	}
}

func benchmarkCollectDanglingDependent(b *testing.B, ring *history.Ring, logger logr.Logger) {
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
	c := &Workers{graph: g, ops: &apiops.Ops{Client: api}, cfg: Config{Metrics: m, Resource: resource, History: ring}}
	c.resolver = &resolver{graph: g, mapper: fakeapi.NewMapper(), absent: newAbsentCache(16384), metrics: m}
	ctx := klog.NewContext(context.Background(), logger)
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
