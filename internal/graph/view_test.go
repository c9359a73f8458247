package graph

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// bigGraph builds n nodes: owners (one in five, a fifth of them cluster
// scoped) each with four dependents spread over ten namespaces; every 50th
// owner is deleting in the foreground, every 97th dependent references a
// missing owner too.
func bigGraph(n int) *Graph {
	g := New()
	yes := true
	for i := 0; i < n/5; i++ {
		ns := "ns-" + strconv.Itoa(i%10)
		owner := rules.Object{Identity: rules.Identity{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: ns, Name: "rs-" + strconv.Itoa(i), UID: types.UID(fmt.Sprintf("owner-%07d", i))}}
		if i%5 == 0 {
			owner.Identity.Namespace, owner.Identity.Kind, owner.Identity.APIVersion = "", "ClusterThing", "example.com/v1"
		}
		if i%50 == 0 {
			owner.Deleting, owner.Finalizers = true, []string{rules.FinalizerForeground}
		}
		g.Apply(Event{Type: Upsert, Object: owner})
		for j := 0; j < 4; j++ {
			k := i*4 + j
			dep := rules.Object{
				Identity: rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "pod-" + strconv.Itoa(k), UID: types.UID(fmt.Sprintf("dep-%07d", k))},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: owner.Identity.APIVersion, Kind: owner.Identity.Kind, Name: owner.Identity.Name, UID: owner.Identity.UID,
					Controller: &yes, BlockOwnerDeletion: &yes,
				}},
				Finalizers: []string{"example.com/keep"},
			}
			if k%97 == 0 {
				dep.OwnerReferences = append(dep.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "gone", UID: types.UID(fmt.Sprintf("missing-%07d", k))})
			}
			g.Apply(Event{Type: Upsert, Object: dep})
		}
	}
	return g
}

func withBatch(t testing.TB, n int, hook func()) {
	oldN, oldHook := ViewBatch, afterViewBatch
	ViewBatch, afterViewBatch = n, hook
	t.Cleanup(func() { ViewBatch, afterViewBatch = oldN, oldHook })
}

// oneLock is the reference the batched readers are checked against: one
// read-lock hold copying the whole graph, or (with uids) the connected
// components containing uids, found by a walk over the graph's own keys.
func oneLock(g *Graph, uids ...types.UID) []Node {
	g.mu.RLock()
	defer g.mu.RUnlock()
	selected := g.nodes
	if len(uids) > 0 {
		selected = map[key]*node{}
		var stack []key
		for _, uid := range uids {
			if k, ok := g.lookup(uid); ok {
				stack = append(stack, k)
			}
		}
		for len(stack) > 0 {
			k := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			n := g.nodes[k]
			if _, ok := selected[k]; ok || n == nil {
				continue
			}
			selected[k] = n
			for i := range n.refs {
				stack = append(stack, n.refs[i].uid)
			}
			for dep := range n.dependents.all() {
				stack = append(stack, dep)
			}
		}
	}
	out := make([]Node, 0, len(selected))
	for _, n := range selected {
		out = append(out, g.nodeOf(n))
	}
	return sortNodes(out)
}

// The batched readers copy what one lock hold copies when no writer runs.
func TestNodesMatchOneLockCopy(t *testing.T) {
	withBatch(t, 7, nil)
	g := bigGraph(2000)
	all, total := g.Nodes(nil)
	if total != g.Len() || len(all) != total {
		t.Fatalf("Nodes: %d nodes, total %d; graph has %d", len(all), total, g.Len())
	}
	if want := oneLock(g); !reflect.DeepEqual(all, want) {
		t.Fatalf("Nodes differs from a one-lock copy")
	}
	for i := range all {
		v := &all[i]
		if !slices.IsSorted(v.Dependents) {
			t.Errorf("%s: dependents not sorted", v.Identity)
		}
		if o, ok := g.Object(v.Identity.UID); ok != !v.Virtual || ok && !reflect.DeepEqual(o, v.Object) {
			t.Errorf("%s: Node.Object %+v, Object %+v", v.Identity, v.Object, o)
		}
	}
	owner, _ := g.Item("owner-0000003")
	if v := g.NodesByUID([]types.UID{"owner-0000003", "nope"}); len(v) != 1 || len(v[0].Dependents) != len(owner.Dependents) || len(v[0].Dependents) != 4 {
		t.Errorf("NodesByUID(owner-0000003) = %+v", v)
	}
	roots := []types.UID{"dep-0000097", "owner-0000010", "dep-0000097", "unknown"}
	comp := g.Components(roots)
	if want := oneLock(g, roots...); !reflect.DeepEqual(comp, want) {
		t.Errorf("Components = %d nodes, one-lock walk = %d", len(comp), len(want))
	}
	if len(comp) < 3 || !slices.ContainsFunc(comp, func(n Node) bool { return n.Virtual }) {
		t.Errorf("component of dep-0000097 has %d nodes, want its owner, siblings and placeholder", len(comp))
	}
	if c := g.Components(nil); len(c) != 0 {
		t.Errorf("Components(nil) = %d nodes, want none", len(c))
	}
	ns, _ := g.Nodes(func(id *rules.Identity) bool { return id.Namespace == "ns-3" })
	for _, v := range ns {
		if v.Identity.Namespace != "ns-3" {
			t.Errorf("namespace scan kept %s", v.Identity)
		}
	}
	if len(ns) == 0 {
		t.Errorf("namespace scan found nothing")
	}
}

// Between batches the lock is free: the writer applies events mid-scan, and
// the scan still returns each node once, every node that existed throughout,
// and copies that do not alias the graph.
func TestNodesReleasesLockBetweenBatches(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KGC_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set KGC_TEST_SEED to replay)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	const n, batch = 1000, 16
	var g *Graph
	batches, added := 0, 0
	removed := map[types.UID]bool{}
	withBatch(t, batch, func() {
		batches++
		if !g.mu.TryLock() {
			t.Fatal("the graph's lock is held between batches")
		}
		g.mu.Unlock()
		// The single writer goes on while the view is being taken.
		added++
		g.Apply(Event{Type: Upsert, Object: rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "ns-new", Name: "new", UID: types.UID(fmt.Sprintf("new-%04d", added))}}})
		victim := types.UID(fmt.Sprintf("dep-%07d", rng.IntN(n*4/5)))
		if o, ok := g.Object(victim); ok {
			g.Apply(Event{Type: Delete, Object: o})
			removed[victim] = true
		}
	})
	g = bigGraph(n)
	before := oneLock(g)
	all, _ := g.Nodes(nil)
	// Nodes removed before the scan reached them are not visited.
	if want := (len(before) - len(removed)) / batch; batches < want {
		t.Errorf("%d batches for %d nodes (%d removed mid-scan), want at least %d", batches, len(before), len(removed), want)
	}
	seen := map[types.UID]bool{}
	for _, v := range all {
		if seen[v.Identity.UID] {
			t.Errorf("%s appears twice", v.Identity.UID)
		}
		seen[v.Identity.UID] = true
	}
	for _, v := range before {
		if !seen[v.Identity.UID] && !removed[v.Identity.UID] && g.node(v.Identity.UID) != nil {
			t.Errorf("%s was in the graph throughout but is not in the view", v.Identity.UID)
		}
	}
	if err := g.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// Copies are independent of the graph.
	for i := range all {
		if len(all[i].OwnerReferences) > 0 {
			*all[i].OwnerReferences[0].BlockOwnerDeletion = false
			all[i].OwnerReferences[0].Name = "changed"
		}
		if len(all[i].Finalizers) > 0 {
			all[i].Finalizers[0] = "changed"
		}
		if len(all[i].Dependents) > 0 {
			all[i].Dependents[0] = "changed"
		}
	}
	if err := g.CheckInvariants(); err != nil {
		t.Fatalf("a view aliases the graph: %v", err)
	}
	for _, v := range oneLock(g) {
		if slices.Contains(v.Dependents, "changed") {
			t.Fatalf("a view's dependents alias the graph: %s", v.Identity)
		}
		for _, r := range v.OwnerReferences {
			if r.Name == "changed" || (r.BlockOwnerDeletion != nil && !*r.BlockOwnerDeletion && r.Kind == "ReplicaSet") {
				t.Fatalf("a view aliases the graph: %+v", r)
			}
		}
	}
	for _, v := range all {
		if o, ok := g.Object(v.Identity.UID); ok && slices.Contains(o.Finalizers, "changed") {
			t.Fatalf("a view's finalizers alias the graph: %s", v.Identity)
		}
	}
}

// stall runs one writer applying events back to back while read() runs
// once, and returns the longest single Apply (how long the writer was kept
// waiting) and how long read took.
func stall(g *Graph, read func()) (maxApply, readTime time.Duration) {
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		o := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "Pod", Namespace: "w", Name: "w", UID: "writer"}}
		for i := 0; !stop.Load(); i++ {
			o.ResourceVersion = strconv.Itoa(i)
			start := time.Now()
			g.Apply(Event{Type: Upsert, Object: o})
			if d := time.Since(start); d > maxApply {
				maxApply = d
			}
		}
	}()
	time.Sleep(time.Millisecond) // let the writer start
	start := time.Now()
	read()
	readTime = time.Since(start)
	stop.Store(true)
	wg.Wait()
	return maxApply, readTime
}

// maxHold returns the longest single read-lock hold of read and how many
// holds it took.
func maxHold(t testing.TB, read func()) (longest time.Duration, holds int) {
	old := viewHold
	viewHold = func(d time.Duration) {
		holds++
		longest = max(longest, d)
	}
	defer func() { viewHold = old }()
	read()
	return longest, holds
}

// TestLockHoldsDuringScan checks that a whole-graph view of 100k nodes is
// taken in bounded holds, and logs the longest hold next to a one-lock
// copy's (numbers for reading; BenchmarkWriterStall100k reports the
// writer's longest wait as a metric).
func TestLockHoldsDuringScan(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 100k-node graph")
	}
	const n = 100_000
	g := bigGraph(n)
	longest, holds := maxHold(t, func() { g.Nodes(nil) })
	if want := (g.Len() + ViewBatch - 1) / ViewBatch; holds != want && holds != want+1 {
		t.Errorf("%d lock holds for %d nodes in batches of %d, want %d", holds, g.Len(), ViewBatch, want)
	}
	start := time.Now()
	oneLock(g)
	whole := time.Since(start)
	t.Logf("%d nodes: Nodes: %d holds of <= %d nodes, longest %v; one-lock copy: one hold of %v",
		g.Len(), holds, ViewBatch, longest, whole)
}

func BenchmarkNodes100k(b *testing.B) {
	g := bigGraph(100_000)
	b.ReportAllocs()
	for b.Loop() {
		if vs, _ := g.Nodes(nil); len(vs) < 100_000 {
			b.Fatal(len(vs))
		}
	}
}

func BenchmarkNamespaceScan100k(b *testing.B) {
	g := bigGraph(100_000)
	b.ReportAllocs()
	for b.Loop() {
		g.Nodes(func(id *rules.Identity) bool { return id.Namespace == "ns-3" })
	}
}

// BenchmarkWriterStall100k reports the longest time the graph's writer waits
// for one Apply while a 100k-node view is being copied.
func BenchmarkWriterStall100k(b *testing.B) {
	g := bigGraph(100_000)
	for _, tc := range []struct {
		name string
		read func()
	}{
		{"batched", func() { g.Nodes(nil) }},
		{"one-lock-snapshot", func() { oneLock(g) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				if s, _ := stall(g, tc.read); s > worst {
					worst = s
				}
			}
			b.ReportMetric(float64(worst.Microseconds()), "max-stall-µs")
		})
	}
}

// TestViewsWithConcurrentWriter takes views while the writer churns (run it
// with -race): every view is sorted, duplicate-free and holds only copies.
func TestViewsWithConcurrentWriter(t *testing.T) {
	withBatch(t, 8, nil)
	g := bigGraph(3000)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			o, ok := g.Object(types.UID(fmt.Sprintf("dep-%07d", i%2400)))
			if ok {
				g.Apply(Event{Type: Delete, Object: o})
				o.ResourceVersion = strconv.Itoa(i)
				g.Apply(Event{Type: Upsert, Object: o})
			}
		}
	}()
	for range 20 {
		all, _ := g.Nodes(nil)
		comp := g.Components([]types.UID{"owner-0000001", "dep-0000397"})
		for _, vs := range [][]Node{all, comp} {
			for i := 1; i < len(vs); i++ {
				if vs[i-1].Identity.UID >= vs[i].Identity.UID {
					t.Fatalf("view not sorted or has duplicates at %s", vs[i].Identity.UID)
				}
			}
		}
		if len(all) < 2000 {
			t.Fatalf("view of a ~3000-node graph has %d nodes", len(all))
		}
	}
	stop.Store(true)
	wg.Wait()
	if err := g.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
