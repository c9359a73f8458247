package discovery

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
)

// decoded returns object i as the metadata client decodes it from a list:
// every string its own allocation, with the labels, annotations and
// managedFields a typical Pod of a ReplicaSet carries. One object in ten is
// an owner; the others reference one owner each.
func decoded(i int) *metav1.PartialObjectMetadata {
	s := func(format string, a ...any) string { return strings.Clone(fmt.Sprintf(format, a...)) }
	t := true
	o := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: s("meta.k8s.io/v1"), Kind: s("PartialObjectMetadata")},
		ObjectMeta: metav1.ObjectMeta{
			Name:              s("web-7d4b9c8f5d-%05d", i),
			GenerateName:      s("web-7d4b9c8f5d-"),
			Namespace:         s("ns-%03d", i%100),
			UID:               types.UID(s("%08d-1111-2222-3333-444455556666", i)),
			ResourceVersion:   s("%d", 1000000+i),
			CreationTimestamp: metav1.Now(),
			Labels:            map[string]string{s("app"): s("web"), s("pod-template-hash"): s("7d4b9c8f5d")},
			Annotations:       map[string]string{s("kubectl.kubernetes.io/restartedAt"): s("2026-11-21T10:00:00Z")},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: s("kube-controller-manager"), Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: s("v1"),
				FieldsType: s("FieldsV1"), FieldsV1: &metav1.FieldsV1{Raw: []byte(s(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"x\"}":{}}}}`))},
			}},
		},
	}
	if i%10 != 0 {
		owner := i - i%10
		o.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: s("apps/v1"), Kind: s("ReplicaSet"), Name: s("web-7d4b9c8f5d-%05d", owner),
			UID: types.UID(s("%08d-1111-2222-3333-444455556666", owner)), Controller: &t, BlockOwnerDeletion: &t,
		}}
	}
	return o
}

var podsResource = Resource{GVR: gvr("", "v1", "pods"), Kind: "Pod", Namespaced: true}

// trackedBytes returns the live heap growth per object of tracking n
// objects: nodes in the ownership graph, fed as a monitor feeds it (each
// decoded object converted by leanObject and dropped), and the process's
// resident set growth per object (Linux; 0 elsewhere): what the Go
// runtime's heap headroom and the garbage of decoding add on top.
func trackedBytes(tb testing.TB, n int) (live, rss float64) {
	tb.Helper()
	apiVersion := podsResource.APIVersion()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before, rssBefore := heap(), residentBytes()
	g := graph.New()
	for i := range n {
		g.Apply(graph.Event{Type: graph.Upsert, Object: leanObject(decoded(i), apiVersion, podsResource.Kind), Gen: 1})
	}
	after, rssAfter := heap(), residentBytes()
	runtime.KeepAlive(g)
	if c := g.Counts(); c.Observed != n {
		tb.Fatalf("graph holds %d observed nodes, want %d", c.Observed, n)
	}
	return float64(after-before) / float64(n), float64(rssAfter-rssBefore) / float64(n)
}

// residentBytes returns the process's resident set size, or 0.
func residentBytes() int64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// TestTrackedObjectMemory reports the live heap kgc spends per tracked
// object (its graph node: the monitors keep no other copy) at 100k objects
// (fewer under the race detector, which makes it slow).
func TestTrackedObjectMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 100k objects")
	}
	n := 100_000
	if raceEnabled {
		n = 10_000
	}
	live, rss := trackedBytes(t, n)
	t.Logf("resident set growth per tracked object while building them: %.0f B (GOGC headroom and decode garbage included; informational)", rss)
	t.Logf("live heap per tracked object at %d objects: %.0f B", n, live)
	// The target is 0.7 KB of RSS growth per object; the live heap
	// is what kgc controls, and the Go runtime's headroom comes on top.
	const maxLive = 320
	if live > maxLive {
		t.Errorf("%.0f live bytes per tracked object, want <= %d", live, maxLive)
	}
}

// BenchmarkTrackedObjectMemory reports bytes per tracked object at 100k
// objects as a metric.
func BenchmarkTrackedObjectMemory(b *testing.B) {
	var live float64
	for b.Loop() {
		live, _ = trackedBytes(b, 100_000)
	}
	b.ReportMetric(live, "B/tracked-object")
}
