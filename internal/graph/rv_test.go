package graph

import (
	"testing"
	"unsafe"

	"github.com/kgc-dev/kgc/internal/rules"
)

func TestEncodeRV(t *testing.T) {
	for _, tc := range []struct {
		rv string
		ok bool
	}{
		{"0", true}, {"1", true}, {"123456", true}, {"9999999999999999999", true},
		{"", false}, {"01", false}, {"00", false}, {"12a", false}, {"-1", false}, {"+1", false},
		{"10000000000000000000", false}, {"1 ", false}, {"abc", false}, {"1.5", false},
	} {
		c, ok := encodeRV(tc.rv)
		if ok != tc.ok {
			t.Errorf("encodeRV(%q) ok = %t, want %t", tc.rv, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		n := &node{rv: c}
		if got := (&Graph{}).rvOf(n); got != tc.rv {
			t.Errorf("%q comes back as %q", tc.rv, got)
		}
	}
}

// TestResourceVersionsRoundTrip: whatever resourceVersion an object
// carries, the graph gives it back unchanged, recognises it as unchanged,
// and forgets an odd one once the node no longer holds it.
func TestResourceVersionsRoundTrip(t *testing.T) {
	g := New()
	id := rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "x", UID: "uid-x"}
	for _, rv := range []string{"17", "007", "opaque-rv", "", "0", "18446744073709551615", "42"} {
		g.Apply(Event{Type: Upsert, Object: rules.Object{Identity: id, ResourceVersion: rv}, Gen: 1})
		if err := g.CheckInvariants(); err != nil {
			t.Fatalf("after rv %q: %v", rv, err)
		}
		o, ok := g.Object(id.UID)
		if !ok || o.ResourceVersion != rv {
			t.Fatalf("rv %q comes back as %q (found %t)", rv, o.ResourceVersion, ok)
		}
		g.mu.RLock()
		same := rv != "" && g.sameRV(g.node(id.UID), rv)
		g.mu.RUnlock()
		if rv != "" && !same {
			t.Errorf("rv %q is not the same as itself", rv)
		}
	}
	g.Apply(Event{Type: Upsert, Object: rules.Object{Identity: id, ResourceVersion: "odd"}, Gen: 1})
	g.Apply(Event{Type: Delete, Object: rules.Object{Identity: id, ResourceVersion: "odd2"}})
	if len(g.oddRVs) != 0 || g.Len() != 0 {
		t.Errorf("after the deletion: %d odd resourceVersions, %d nodes", len(g.oddRVs), g.Len())
	}
}

// TestNodeSize: the node fits the Go allocator's 112-byte size class.
func TestNodeSize(t *testing.T) {
	if s := unsafe.Sizeof(node{}); s > 112 {
		t.Errorf("node is %d bytes, want at most 112", s)
	}
}
