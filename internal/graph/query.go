package graph

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kgc-dev/kgc/internal/rules"
	"k8s.io/apimachinery/pkg/types"
)

// OwnerView is what the graph knows about a (possible) owner. It holds no
// slices on purpose: the workers call Owner for every ownerReference of
// every decision, so the answer copies no ownerReferences, finalizers or
// dependents (only the owner's UID string is built). Readers that need
// those call Item or Object.
type OwnerView struct {
	Identity           rules.Identity
	Virtual            bool
	Absent             bool
	Deleting           bool
	DeletingDependents bool
	// ResourceVersion is the observed object's, or for an Absent node the
	// one its deletion was observed at ("" if unknown).
	ResourceVersion string
	// Seen is how the graph knows what it says: rules.SourceGraph for an
	// observed object, rules.SourceWatchDeletion or rules.SourceRelist for
	// an Absent one, rules.SourceNone for a placeholder.
	Seen rules.Source
}

// Item returns a copy of the node with uid, with its dependents.
func (g *Graph) Item(uid types.UID) (rules.Item, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil {
		return rules.Item{}, false
	}
	it := rules.Item{Object: g.object(n), Virtual: n.virtual, Absent: n.absent, Arrived: n.arrived && !n.virtual}
	it.Dependents = make([]rules.Dependent, 0, n.dependents.len())
	for depUID := range n.dependents.all() {
		d := g.nodes[depUID]
		if d == nil {
			continue
		}
		it.Dependents = append(it.Dependents, rules.Dependent{
			UID:                g.uidOf(depUID),
			Blocking:           blocksOwner(depUID, d.refs, n.uid),
			Deleting:           d.deleting,
			DeletingDependents: d.deletingDependents(),
		})
	}
	return it, true
}

// Owner returns what the graph knows of the node with uid: the hot-path
// reader (see OwnerView).
func (g *Graph) Owner(uid types.UID) (OwnerView, bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil {
		return OwnerView{}, false
	}
	v := OwnerView{
		Identity:           g.identity(n),
		Virtual:            n.virtual,
		Absent:             n.absent,
		Deleting:           n.deleting,
		DeletingDependents: n.deletingDependents(),
	}
	switch {
	case n.absent:
		v.ResourceVersion, v.Seen = g.rvOf(n), n.goneBy
	case !n.virtual:
		v.ResourceVersion, v.Seen = g.rvOf(n), rules.SourceGraph
	}
	return v, true
}

// BlockingDependents returns how many dependents of the node with uid
// block its deletion (blockOwnerDeletion=true), in constant time.
func (g *Graph) BlockingDependents(uid types.UID) int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if n := g.node(uid); n != nil {
		return int(n.blocking)
	}
	return 0
}

// WaitsFor returns the dependents of the node with uid whose reference to
// it has blockOwnerDeletion=true (an object's reference to itself never
// blocks): those it waits for once in Foreground deletion.
func (g *Graph) WaitsFor(uid types.UID) []types.UID {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil || n.blocking == 0 {
		return nil
	}
	out := make([]types.UID, 0, n.blocking)
	for dep := range n.dependents.all() {
		if d := g.nodes[dep]; d != nil && blocksOwner(dep, d.refs, n.uid) {
			out = append(out, g.uidOf(dep))
		}
	}
	return out
}

// Len returns the number of nodes, virtual ones included.
func (g *Graph) Len() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.nodes)
}

// CheckInvariants verifies the graph's structural invariants; tests call it
// after every step. It returns the first violation found.
func (g *Graph) CheckInvariants() error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if len(g.oddRVs) > len(g.nodes) {
		return fmt.Errorf("%d odd resourceVersions for %d nodes", len(g.oddRVs), len(g.nodes))
	}
	for uid, n := range g.nodes {
		if n.uid != uid {
			return fmt.Errorf("node keyed %v has key %v", uid, n.uid)
		}
		if n.kind == nil {
			return fmt.Errorf("node %s has no kind", g.uidOf(uid))
		}
		if _, ok := g.oddUIDs[uid]; uid.hi == 0 && !ok {
			return fmt.Errorf("node with synthetic key %v has no UID", uid)
		}
		if _, ok := g.oddRVs[uid]; ok != n.oddRV || n.oddRV && n.rv != 0 {
			return fmt.Errorf("node %s: oddRV %t, rv code %d, odd resourceVersion recorded %t", g.identity(n), n.oddRV, n.rv, ok)
		}
		if n.virtual {
			if n.dependents.len() == 0 {
				return fmt.Errorf("virtual node %s has no dependents", g.identity(n))
			}
			if len(n.refs) != 0 || n.finalizers != nil || n.deleting {
				return fmt.Errorf("virtual node %s has owners", g.identity(n))
			}
		} else if n.absent {
			return fmt.Errorf("observed node %s is marked absent", g.identity(n))
		}
		for i := range n.refs {
			o := g.nodes[n.refs[i].uid]
			if o == nil {
				return fmt.Errorf("owner %s of %s is not in the graph", g.uidOf(n.refs[i].uid), g.identity(n))
			}
			if !o.dependents.has(uid) {
				return fmt.Errorf("owner %s does not list dependent %s", g.identity(o), g.identity(n))
			}
		}
		blocking := 0
		for dep := range n.dependents.all() {
			if d := g.nodes[dep]; d != nil && blocksOwner(dep, d.refs, uid) {
				blocking++
			}
		}
		if int32(blocking) != n.blocking {
			return fmt.Errorf("node %s counts %d blocking dependents, has %d", g.identity(n), n.blocking, blocking)
		}
		for dep := range n.dependents.all() {
			d := g.nodes[dep]
			if d == nil {
				return fmt.Errorf("dependent %s of %s is not in the graph", g.uidOf(dep), g.identity(n))
			}
			if d.virtual {
				return fmt.Errorf("dependent %s of %s is virtual", g.identity(d), g.identity(n))
			}
			if !hasRef(d.refs, uid) {
				return fmt.Errorf("dependent %s does not reference owner %s", g.identity(d), g.identity(n))
			}
		}
	}
	deleting := 0
	for k, n := range g.nodes {
		if n.deleting {
			deleting++
			if _, ok := g.deleting[k]; !ok {
				return fmt.Errorf("deleting node %s is not indexed as deleting", g.identity(n))
			}
		}
	}
	if deleting != len(g.deleting) {
		return fmt.Errorf("%d nodes indexed as deleting, %d are", len(g.deleting), deleting)
	}
	content := map[contentKey]int{}
	for _, n := range g.nodes {
		if !n.virtual && n.ns != nil {
			content[contentKey{*n.ns, n.kind}]++
		}
	}
	if !maps.Equal(content, g.content) {
		return fmt.Errorf("content index %v, nodes say %v", g.content, content)
	}
	if len(g.odd) != len(g.oddUIDs) {
		return fmt.Errorf("%d synthetic keys, %d UIDs for them", len(g.odd), len(g.oddUIDs))
	}
	for uid, k := range g.odd {
		if g.oddUIDs[k] != uid || g.nodes[k] == nil {
			return fmt.Errorf("synthetic key of %s is stale", uid)
		}
	}
	return nil
}

// ObservedIn returns how many observed objects of group and kind, at any
// version, the graph holds in namespace ns. It is what the graph has
// applied so far, not what the API server holds: a negative answer is a
// fact only for a resource whose complete list has been applied and whose
// monitor is not failing, and even then it lags the watch (see
// docs/correctness.md). The namespace lifecycle uses it to skip the
// DELETECOLLECTION of a resource the graph shows empty, and still confirms
// with a quorum LIST.
func (g *Graph) ObservedIn(ns, group, k string) int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	total := 0
	for _, kp := range g.kinds {
		if kp.kind == k && rules.GroupOf(kp.apiVersion) == group {
			total += g.content[contentKey{ns, kp}]
		}
	}
	return total
}

// Object returns a copy of the observed object with uid; ok is false for
// unknown UIDs and placeholders.
func (g *Graph) Object(uid types.UID) (obj rules.Object, ok bool) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	n := g.node(uid)
	if n == nil || n.virtual {
		return rules.Object{}, false
	}
	return g.object(n), true
}

// Counts is the graph's size by node state; a node may count in several.
type Counts struct {
	Observed, Virtual, Absent, Deleting, DeletingDependents int
}

// Counts counts nodes by state.
func (g *Graph) Counts() Counts {
	g.mu.RLock()
	defer g.mu.RUnlock()
	var c Counts
	for _, n := range g.nodes {
		switch {
		case n.absent:
			c.Absent++
		case n.virtual:
			c.Virtual++
		default:
			c.Observed++
		}
		if n.deleting {
			c.Deleting++
		}
		if n.deletingDependents() {
			c.DeletingDependents++
		}
	}
	return c
}

// DeletingSince returns the observed nodes whose deletion was asked for at
// or before t (their deletionTimestamp), oldest first, and how many nodes
// are deleting in all. Nodes deleting without a known timestamp are not
// returned. It reads an index of the deleting nodes, not the whole graph:
// the stuck report and its metrics call it at every scrape.
func (g *Graph) DeletingSince(t time.Time) (uids []types.UID, deleting int) {
	g.mu.RLock()
	type entry struct {
		uid types.UID
		at  time.Time
	}
	var es []entry
	for k, at := range g.deleting {
		if !at.IsZero() && !at.After(t) {
			es = append(es, entry{g.uidOf(k), at})
		}
	}
	deleting = len(g.deleting)
	g.mu.RUnlock()
	slices.SortFunc(es, func(a, b entry) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(string(a.uid), string(b.uid))
	})
	uids = make([]types.UID, len(es))
	for i := range es {
		uids[i] = es[i].uid
	}
	return uids, deleting
}
