package collector

import (
	"fmt"
	"hash/fnv"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/fakeapi"
)

// Two collectors in one process on one API server, one keeping shard 0
// of 2 of the namespaces and one keeping everything, each hold in their
// graph what their own Config.Shard says: the shard is no process-wide
// setting. The sharded one keeps every cluster-scoped object.
func TestShardIsPerCollector(t *testing.T) {
	srv := fakeapi.NewServer()
	shard := &discovery.Shard{Index: 0, Count: 2}
	var all []string
	for n := range 20 {
		ns := fmt.Sprintf("ns-%02d", n)
		all = append(all, ns)
		srv.Create(t, fakeapi.Namespaces, fakeapi.Object("", ns, types.UID(ns)))
		srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object(ns, "a", types.UID(ns+"-a")))
	}
	sharded := startCollector(t, srv, func(c *Config) { c.Shard = shard })
	whole := startCollector(t, srv)

	kept := 0
	for _, ns := range all {
		if keeps(shard, ns) {
			kept++
		}
	}
	if kept == 0 || kept == len(all) {
		t.Fatalf("shard keeps %d of %d namespaces: the test needs some of each", kept, len(all))
	}
	sharded.waitFor(t, "the sharded collector's graph", func() bool { return sharded.c.Graph().Len() == len(all)+kept })
	whole.waitFor(t, "the whole collector's graph", func() bool { return whole.c.Graph().Len() == 2*len(all) })
	for _, ns := range all {
		want := 0
		if keeps(shard, ns) {
			want = 1
		}
		if got := sharded.c.Graph().ObservedIn(ns, "", "ConfigMap"); got != want {
			t.Errorf("sharded collector holds %d ConfigMaps of %s, want %d", got, ns, want)
		}
		if got := whole.c.Graph().ObservedIn(ns, "", "ConfigMap"); got != 1 {
			t.Errorf("whole collector holds %d ConfigMaps of %s, want 1", got, ns)
		}
	}
}

// keeps reports whether shard keeps namespace ns: FNV-1a, modulo Count.
func keeps(shard *discovery.Shard, ns string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(ns))
	return h.Sum32()%uint32(shard.Count) == uint32(shard.Index)
}
