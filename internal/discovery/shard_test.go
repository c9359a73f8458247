package discovery

import (
	"fmt"
	"hash/fnv"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// The shards split namespaces as FNV-1a does, each namespace to exactly
// one shard, keep every cluster-scoped object and every marker, and a nil
// shard keeps everything.
func TestShard(t *testing.T) {
	const count = 4
	kept := map[string]int{}
	for i := range count {
		s := &Shard{Index: i, Count: count}
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		var got []graph.Event
		observe := s.filter(func(ev graph.Event) { got = append(got, ev) })
		for n := range 100 {
			ns := fmt.Sprintf("scale-%03d", n)
			observe(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{Namespace: ns, Name: "a"}}})
			h := fnv.New32a()
			_, _ = h.Write([]byte(ns))
			if want := h.Sum32()%count == uint32(i); s.keeps(ns) != want {
				t.Errorf("shard %d keeps %s: %v, want %v", i, ns, !want, want)
			}
		}
		observe(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{Name: "cluster-scoped"}}})
		observe(graph.Event{Type: graph.Listed})
		for _, ev := range got {
			if ns := ev.Object.Identity.Namespace; ns != "" {
				kept[ns]++
			}
		}
		if n := len(got); n < 2 || got[n-2].Object.Identity.Name != "cluster-scoped" || got[n-1].Type != graph.Listed {
			t.Errorf("shard %d dropped a cluster-scoped object or a marker: %+v", i, got[max(0, n-2):])
		}
	}
	if len(kept) != 100 {
		t.Errorf("%d of 100 namespaces kept by some shard", len(kept))
	}
	for ns, n := range kept {
		if n != 1 {
			t.Errorf("namespace %s kept by %d shards", ns, n)
		}
	}
	var none *Shard
	calls := 0
	none.filter(func(graph.Event) { calls++ })(graph.Event{Type: graph.Upsert, Object: rules.Object{Identity: rules.Identity{Namespace: "x"}}})
	if calls != 1 {
		t.Error("without a shard, the filter still drops objects")
	}
	for _, bad := range []Shard{{0, 0}, {-1, 2}, {2, 2}} {
		if bad.Validate() == nil {
			t.Errorf("shard %d of %d accepted", bad.Index, bad.Count)
		}
	}
}

// The shard is each Monitors' own: monitors of two shards and one without
// a shard, running at once in one process on one API server, each hand on
// exactly what their own shard keeps.
func TestShardsAreIndependent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var all []string
	for n := range 20 {
		ns := fmt.Sprintf("ns-%02d", n)
		all = append(all, ns)
		obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a", UID: types.UID(ns + "-a"), ResourceVersion: "1"}}
		if err := client.Tracker().Create(configMaps.GVR, obj, ns); err != nil {
			t.Fatal(err)
		}
	}
	shards := []*Shard{{Index: 0, Count: 2}, {Index: 1, Count: 2}, nil}
	recs := make([]*recorder, len(shards))
	for i, s := range shards {
		recs[i] = &recorder{}
		m := NewMonitors(client, recs[i].observe)
		m.SetShard(s)
		defer m.Stop()
		m.Sync(ctx, want(configMaps), nil)
	}
	namespaces := func(r *recorder) []string {
		var out []string
		for _, ev := range r.get() {
			if ev.Type == graph.Upsert {
				out = append(out, ev.Object.Identity.Namespace)
			}
		}
		slices.Sort(out)
		return out
	}
	for i, s := range shards {
		var wantNS []string
		for _, ns := range all {
			if s == nil || s.keeps(ns) {
				wantNS = append(wantNS, ns)
			}
		}
		waitUntil(t, fmt.Sprintf("monitors %d listed", i), func() bool { return len(namespaces(recs[i])) >= len(wantNS) })
		if got := namespaces(recs[i]); !slices.Equal(got, wantNS) {
			t.Errorf("monitors %d (shard %+v) handed on %v, want %v", i, s, got, wantNS)
		}
	}
	if a, b := namespaces(recs[0]), namespaces(recs[1]); len(a) == 0 || len(b) == 0 || len(a)+len(b) != len(all) {
		t.Errorf("the two shards split %d namespaces as %d and %d", len(all), len(a), len(b))
	}
}
