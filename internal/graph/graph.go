package graph

import (
	"sync"
	"time"

	"github.com/kgc-dev/kgc/internal/rules"
	"k8s.io/apimachinery/pkg/types"
)

// EventType says what a monitor observed.
type EventType int

const (
	// Upsert is an add or an update: the object exists in this state.
	Upsert EventType = iota
	// Delete is the object's deletion (or its disappearance on relist).
	Delete
	// Relisted ends a complete list of one resource: every observed node of
	// that resource that the list did not upsert (its list generation is
	// not Event.Gen) is gone, and is removed as if a Delete had been
	// observed for it. The resource is the group and kind of
	// Object.Identity, not its version: a list of any served version lists
	// every object of the resource, so a relist by a new preferred
	// version's monitor also removes what an older version's monitor
	// recorded and no longer exists. (The monitors run at most one monitor
	// per group and kind; see discovery.Monitors.) A Relisted whose Gen no
	// upsert carries removes every node of the group and kind: how the
	// monitors report a resource proven gone (its LIST answers 404).
	// Object.ResourceVersion is the list's resourceVersion (empty for a
	// LIST answering 404): the evidence of the deletions it finds. When
	// the list found none of the resource's objects, the Effects say so
	// (Effects.Vanished).
	Relisted
	// Listed follows every complete list of one resource (after its
	// Relisted, if any): once it is applied, the graph holds everything
	// that list saw. The graph ignores it; the collector counts the
	// resource as listed from then on (discovery.Monitors.Unlisted).
	Listed
)

// Event is one monitor observation, in the order the monitor saw it.
type Event struct {
	Type   EventType
	Object rules.Object
	// Gen is the list generation of the monitor that observed the event: a
	// number unique to one list of one monitor (0: none). Upserts record
	// it on their node; Relisted removes the resource's nodes that carry
	// another generation, which is how objects deleted while a watch was
	// down are noticed without a second copy of every object.
	Gen uint32
	// Fresh: a list of the resource had completed before this event, and
	// kgc's history of it is unbroken since (a watch event, or an object
	// of the first list of a monitor that replaces another; not an object
	// of a relist after a watch lost the storage's history, which may have
	// been created at any time in the gap), so an object the graph first
	// holds from this event appeared while kgc watched its resource,
	// rather than being there when kgc started (rules.Item.Arrived). The graph builder clears it for an object
	// naming an owner whose resource it has not applied a complete list
	// of (builder.ownersListed).
	Fresh bool
	// Resource is the resource's plural name (Relisted only): the graph
	// looks up the CustomResourceDefinition that serves it, if any
	// (Vanish.CRD).
	Resource string
}

// Effects are what applying an event asks the collector to do next.
type Effects struct {
	// AttemptToDelete lists nodes whose owners or dependents changed in a way
	// that may make them (or let them become) garbage.
	AttemptToDelete []types.UID
	// AttemptToOrphan lists owners being deleted with the orphan finalizer.
	AttemptToOrphan []types.UID
	// Absent lists identities observed deleted: they never come back (UIDs
	// are unique), so the collector may remember them as absent owners,
	// with the evidence of their deletion.
	Absent []Absence
	// CascadeStarted lists owners that, with dependents, were observed
	// deleted or started deleting their dependents; CascadeDone lists such
	// owners whose last dependent just went. (For metrics.)
	CascadeStarted []types.UID
	CascadeDone    []types.UID
	// Regressions lists objects observed in a state their own history
	// cannot reach (see Regression): the evidence of a rollback of the
	// API's storage. The graph takes the new state as the truth all the
	// same; what to make of the evidence is the caller's.
	Regressions []Regression
	// Vanished reports a complete list (Relisted) that found none of the
	// objects of its resource the graph held: see Vanish.
	Vanished *Vanish
}

// Regression is an object observed in a state that cannot follow the one
// the graph held for it in a single history of the API's storage: its
// resourceVersion went back, its deletionTimestamp went away, or it came
// back after a watch observed its deletion. UIDs are never reused, a
// resourceVersion of kube-apiserver is the etcd revision of the object's
// last write (it only grows), and a deletionTimestamp, once set, is never
// unset; so each of these happens only when the storage was rolled back
// (an etcd restore) under a running kgc, and every fact kgc holds as
// monotonic ("observed deleted") may have become false. Only events of
// the resource that recorded the node's state are compared: an object
// served under two groups (core and events.k8s.io Events) reaches the
// graph through two monitors whose events interleave.
type Regression struct {
	rules.Identity
	// Was and Now say the two states, e.g. "resourceVersion 120" and
	// "resourceVersion 95".
	Was, Now string
}

// Vanish is a complete list of a resource that found none of the objects
// the graph held of it: an empty LIST, or a LIST answering 404. People do
// delete every object of a resource (its CRD, its namespaces), and kgc
// then normally observes each deletion (a DELETED event) or sees it coming
// (a deletionTimestamp, a terminating namespace, a CRD being deleted); a
// whole resource gone with none of that is what an API answering wrongly
// looks like. The graph reports the facts; the deletion breaker judges.
type Vanish struct {
	// APIVersion and Kind name the resource (its group and kind); Resource
	// is its plural ("" if the monitor did not say).
	APIVersion, Kind, Resource string
	// ResourceVersion is the list's ("" when it answered 404).
	ResourceVersion string
	// Gone counts the objects the list removed; Unexplained those of them
	// whose deletion kgc did not see coming: not deleting when last
	// observed, and (namespaced) in a namespace the graph holds alive and
	// not terminating.
	Gone, Unexplained int
	// Owners lists the unexplained objects that have dependents (kept as
	// placeholders, their dependents re-checked).
	Owners []types.UID
	// CRD is what the graph holds of the CustomResourceDefinition named
	// <Resource>.<group>; CRDUID its UID (CRDLive, CRDDeleting).
	CRD    CRDState
	CRDUID types.UID
}

// CRDState is what the graph holds of a resource's CustomResourceDefinition.
type CRDState uint8

const (
	// CRDNone: the graph holds no CRD of that name (the resource is not a
	// CRD's, or its CRD is gone).
	CRDNone CRDState = iota
	// CRDLive: the CRD is observed and not being deleted.
	CRDLive
	// CRDDeleting: the CRD is observed with a deletionTimestamp.
	CRDDeleting
)

// Absence is an object observed deleted, and how: a watch's DELETED event
// (rules.SourceWatchDeletion, at the event's resourceVersion) or a
// complete relist that no longer holds it (rules.SourceRelist, at the
// LIST's resourceVersion; "" when the resource's LIST answered 404).
type Absence struct {
	rules.Identity
	Evidence rules.Evidence
}

// Graph is the ownership graph. See the package doc for the concurrency contract.
type Graph struct {
	mu    sync.RWMutex
	nodes map[key]*node
	// Synthetic keys of UIDs that are not UUIDs (uid.go), both ways.
	odd     map[types.UID]key
	oddUIDs map[key]types.UID
	nextOdd uint64
	// oddRVs holds the resourceVersions that are not canonical decimal
	// numbers (rv.go), by node.
	oddRVs map[key]string
	// Shared by nodes (node.go): kinds, and finalizer lists by their names
	// joined with NUL.
	kinds      map[kind]*kind
	finalizers map[string]*[]string
	namespaces map[string]*string
	// deleting indexes the observed nodes with a deletionTimestamp, with
	// that timestamp (zero when the event carried none). Few nodes are
	// deleting at once, so the stuck report and its metrics start from
	// here instead of scanning every node, and nodes pay nothing for a
	// field most never use.
	deleting map[key]time.Time
	// content counts the observed (not virtual) namespaced nodes by
	// namespace and kind, for the namespace lifecycle (ObservedIn).
	content map[contentKey]int
}

// contentKey is a namespace and an apiVersion and kind.
type contentKey struct {
	namespace string
	kind      *kind
}

// countContent adds delta to the count of n's namespace and kind (an
// observed node; cluster-scoped nodes are not counted). Caller holds mu
// for writing.
func (g *Graph) countContent(n *node, delta int) {
	if n.ns == nil {
		return
	}
	k := contentKey{*n.ns, n.kind}
	if v := g.content[k] + delta; v == 0 {
		delete(g.content, k)
	} else {
		g.content[k] = v
	}
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{
		nodes: make(map[key]*node), odd: make(map[types.UID]key), oddUIDs: make(map[key]types.UID), oddRVs: make(map[key]string), namespaces: make(map[string]*string),
		kinds: make(map[kind]*kind), finalizers: make(map[string]*[]string), content: make(map[contentKey]int),
		deleting: make(map[key]time.Time),
	}
}

// addDelete asks for a check of the node with key k.
func (g *Graph) addDelete(eff *Effects, k key) {
	eff.AttemptToDelete = append(eff.AttemptToDelete, g.uidOf(k))
}

// Apply applies one monitor event and returns its effects.
func (g *Graph) Apply(ev Event) Effects {
	g.mu.Lock()
	defer g.mu.Unlock()
	var eff Effects
	switch ev.Type {
	case Upsert:
		g.upsert(&ev.Object, ev.Gen, ev.Fresh, &eff)
	case Delete:
		g.remove(&ev.Object, &eff)
	case Relisted:
		g.sweep(ev.Object.Identity.APIVersion, ev.Object.Identity.Kind, ev.Resource, ev.Gen, ev.Object.ResourceVersion, &eff)
	}
	return eff
}

func (g *Graph) upsert(obj *rules.Object, gen uint32, fresh bool, eff *Effects) {
	uid := g.keyFor(obj.Identity.UID)
	n := g.nodes[uid]
	var old []ownerRef
	wasDeletingDependents := false
	wasObserved := n != nil && !n.virtual
	if n != nil {
		g.checkRegression(n, obj, eff)
	}
	if n == nil {
		n = &node{uid: uid, name: obj.Identity.Name}
		g.nodes[uid] = n
	} else if !n.virtual {
		if obj.ResourceVersion != "" && g.sameRV(n, obj.ResourceVersion) {
			// The same state again (a relist): nothing changed but the
			// generation of the list that saw it, and maybe the version
			// it was read at (a new preferred version's monitor relists
			// what the old one saw): the node must carry it, or writes
			// would address a version no longer served.
			n.gen = gen
			if n.kind.apiVersion != obj.Identity.APIVersion || n.kind.kind != obj.Identity.Kind {
				g.countContent(n, -1)
				n.kind = g.kindOf(obj.Identity.APIVersion, obj.Identity.Kind)
				g.countContent(n, +1)
			}
			return
		}
		old = n.refs
		wasDeletingDependents = n.deletingDependents()
	}
	// Keep the name the graph holds if it is equal (a placeholder's comes
	// from a reference).
	if n.name != obj.Identity.Name {
		n.name = obj.Identity.Name
	}
	if k := g.kindOf(obj.Identity.APIVersion, obj.Identity.Kind); !wasObserved || n.kind != k || n.namespace() != obj.Identity.Namespace {
		if wasObserved {
			g.countContent(n, -1)
		}
		n.kind, n.ns = k, g.namespaceOf(obj.Identity.Namespace)
		g.countContent(n, +1)
	}
	g.setRV(n, obj.ResourceVersion)
	cur := g.compactRefs(obj.OwnerReferences)
	n.refs = cur
	n.finalizers = g.finalizersOf(obj.Finalizers)
	n.deleting = obj.Deleting
	g.setDeleting(uid, obj)
	if !wasObserved {
		n.arrived = fresh
	}
	n.virtual, n.absent, n.gen = false, false, gen

	// Reference lists are short (one or two entries): scanning them is
	// cheaper than building a map per event (BenchmarkApply*).
	for i := range old {
		ownerUID := old[i].uid
		if !firstRef(old, i) {
			continue // a duplicate reference to an owner already handled
		}
		blocking := blocksOwner(uid, old, ownerUID)
		if !hasRef(cur, ownerUID) {
			g.unlink(uid, ownerUID, blocking, eff)
			continue
		}
		nowBlocking := blocksOwner(uid, cur, ownerUID)
		if blocking == nowBlocking {
			continue
		}
		o := g.nodes[ownerUID]
		if o == nil {
			continue
		}
		if nowBlocking {
			o.blocking++
			continue
		}
		o.blocking--
		// A dependent that stops blocking may release a foreground owner.
		if o.deletingDependents() {
			g.addDelete(eff, ownerUID)
		}
	}
	for i := range cur {
		if !firstRef(cur, i) || hasRef(old, cur[i].uid) {
			continue
		}
		g.link(n, &cur[i], blocksOwner(uid, cur, cur[i].uid))
	}

	if n.orphaning() {
		eff.AttemptToOrphan = append(eff.AttemptToOrphan, g.uidOf(uid))
	}
	if n.deletingDependents() {
		g.addDelete(eff, uid)
		if !wasDeletingDependents && n.dependents.len() > 0 {
			eff.CascadeStarted = append(eff.CascadeStarted, g.uidOf(uid))
			for dep := range n.dependents.all() {
				g.addDelete(eff, dep)
			}
		}
	}
	if g.needsAttention(n) {
		g.addDelete(eff, uid)
	}
}

// link records dependent as a dependent of ref's owner, creating a virtual
// owner when the UID is unknown.
func (g *Graph) link(dependent *node, ref *ownerRef, blocking bool) {
	o := g.nodes[ref.uid]
	if o == nil {
		// Guess: a namespaced owner in the dependent's namespace. Only used for
		// display until the owner is observed or verified.
		o = &node{virtual: true, kind: ref.kind, ns: dependent.ns, name: ref.name, uid: ref.uid}
		g.nodes[ref.uid] = o
	}
	if o.dependents == nil {
		o.dependents = &depSet{}
	}
	o.dependents.add(dependent.uid)
	if blocking {
		o.blocking++
	}
}

func (g *Graph) unlink(dependent, ownerUID key, blocking bool, eff *Effects) {
	o := g.nodes[ownerUID]
	if o == nil {
		return
	}
	o.dependents.remove(dependent)
	if blocking {
		o.blocking--
	}
	if o.dependents.len() == 0 && (o.absent || o.deletingDependents()) {
		eff.CascadeDone = append(eff.CascadeDone, g.uidOf(ownerUID))
	}
	if o.virtual && o.dependents.len() == 0 {
		g.release(ownerUID)
		return
	}
	if blocking && o.deletingDependents() {
		g.addDelete(eff, ownerUID)
	}
}

// needsAttention reports whether a live node has an owner reference the graph
// cannot vouch for: an owner not observed, observed under other coordinates,
// or waiting for its dependents to be deleted.
func (g *Graph) needsAttention(n *node) bool {
	if n.virtual || n.deleting || len(n.refs) == 0 {
		return false
	}
	for i := range n.refs {
		ref := &n.refs[i]
		o := g.nodes[ref.uid]
		if o == nil || o.virtual || !matches(o, ref, n.namespace()) || o.deletingDependents() {
			return true
		}
	}
	return false
}

func (g *Graph) remove(obj *rules.Object, eff *Effects) {
	if n := g.node(obj.Identity.UID); n != nil && !n.virtual {
		g.removeNode(n, rules.SourceWatchDeletion, obj.ResourceVersion, eff)
		if n.virtual && (n.kind.kind != obj.Identity.Kind || !rules.SameGroup(n.kind.apiVersion, obj.Identity.APIVersion)) {
			// A placeholder kept for its dependents remembers the resource
			// whose watch saw the deletion: an object served under two
			// groups is compared within that one (checkRegression).
			n.kind = g.kindOf(obj.Identity.APIVersion, obj.Identity.Kind)
		}
	}
}

// removeNode removes an observed node: its deletion was observed (how,
// and at which resourceVersion) or a relist no longer holds it.
func (g *Graph) removeNode(n *node, how rules.Source, rv string, eff *Effects) {
	g.countContent(n, -1)
	uid := n.uid
	id := g.identity(n)
	eff.Absent = append(eff.Absent, Absence{Identity: id, Evidence: rules.Evidence{Source: how, Reason: rules.ReasonNotFound, ResourceVersion: rv}})
	for i, refs := 0, n.refs; i < len(refs); i++ {
		if firstRef(refs, i) {
			g.unlink(uid, refs[i].uid, blocksOwner(uid, refs, refs[i].uid), eff)
		}
	}
	if n.dependents.len() == 0 {
		g.release(uid)
		return
	}
	// Keep a placeholder so the dependents' edges stay consistent; they are
	// re-checked now that their owner is gone.
	g.setRV(n, rv)
	n.refs, n.finalizers, n.deleting = nil, nil, false
	delete(g.deleting, uid)
	n.virtual, n.absent, n.goneBy = true, true, how
	eff.CascadeStarted = append(eff.CascadeStarted, id.UID)
	for dep := range n.dependents.all() {
		g.addDelete(eff, dep)
	}
}

// sweep removes the observed nodes of one resource that the list of
// generation gen did not see. The resource is its group and kind (apiVersion
// is any version of it): a node recorded at another version of the same
// resource is the same object, and matching versions exactly would leave
// the nodes an older version's monitor recorded in the graph forever,
// observed and solid to their dependents, once they are deleted unseen.
// A list that saw none of the resource's nodes is reported (Vanished).
func (g *Graph) sweep(apiVersion, k, resource string, gen uint32, rv string, eff *Effects) {
	group := rules.GroupOf(apiVersion)
	var gone []*node
	seen := false
	for _, n := range g.nodes {
		if n.virtual || n.kind.kind != k || rules.GroupOf(n.kind.apiVersion) != group {
			continue
		}
		if n.gen == gen {
			seen = true
			continue
		}
		gone = append(gone, n)
	}
	if !seen && len(gone) > 0 {
		eff.Vanished = g.vanish(apiVersion, k, resource, rv, gone)
	}
	for _, n := range gone {
		g.removeNode(n, rules.SourceRelist, rv, eff)
	}
}

// vanish describes a list that found none of gone, the observed nodes of
// one resource, before they are removed. Caller holds mu for writing.
func (g *Graph) vanish(apiVersion, k, resource, rv string, gone []*node) *Vanish {
	v := &Vanish{APIVersion: apiVersion, Kind: k, Resource: resource, ResourceVersion: rv, Gone: len(gone)}
	// The namespaces and the CRD a vanish is judged by: one pass over the
	// graph, as the sweep itself made (a vanish is as rare as a relist).
	alive := map[string]bool{} // namespace name → observed and not deleting
	crdName := ""
	if group := rules.GroupOf(apiVersion); resource != "" && group != "" {
		crdName = resource + "." + group
	}
	for _, n := range g.nodes {
		if n.virtual || n.ns != nil {
			continue
		}
		switch {
		case n.kind.kind == "Namespace" && n.kind.apiVersion == "v1":
			alive[n.name] = !n.deleting
		case crdName != "" && n.kind.kind == "CustomResourceDefinition" && n.name == crdName &&
			rules.GroupOf(n.kind.apiVersion) == "apiextensions.k8s.io":
			v.CRD, v.CRDUID = CRDLive, g.uidOf(n.uid)
			if n.deleting {
				v.CRD = CRDDeleting
			}
		}
	}
	for _, n := range gone {
		if n.deleting || n.ns != nil && !alive[*n.ns] {
			continue
		}
		v.Unexplained++
		if n.dependents.len() > 0 {
			v.Owners = append(v.Owners, g.uidOf(n.uid))
		}
	}
	return v
}

// checkRegression reports obj, a new observation of n, if n's history
// cannot reach it (see Regression). Caller holds mu for writing.
func (g *Graph) checkRegression(n *node, obj *rules.Object, eff *Effects) {
	if n.kind == nil || n.kind.kind != obj.Identity.Kind || !rules.SameGroup(n.kind.apiVersion, obj.Identity.APIVersion) {
		return
	}
	var was, now string
	switch {
	case n.virtual:
		if !n.absent || n.goneBy != rules.SourceWatchDeletion {
			return
		}
		was, now = "observed deleted at resourceVersion "+g.rvOf(n)+" (watch)", "observed again at resourceVersion "+obj.ResourceVersion
	case n.deleting && !obj.Deleting:
		was, now = "deleting (deletionTimestamp set) at resourceVersion "+g.rvOf(n), "not deleting at resourceVersion "+obj.ResourceVersion
	default:
		c, ok := encodeRV(obj.ResourceVersion)
		if !ok || n.oddRV || n.rv == 0 || c >= n.rv {
			return
		}
		was, now = "resourceVersion "+g.rvOf(n), "resourceVersion "+obj.ResourceVersion
	}
	eff.Regressions = append(eff.Regressions, Regression{Identity: obj.Identity, Was: was, Now: now})
}

// setDeleting records whether obj, the node with key k, is deleting, and
// since when. Caller holds mu for writing.
func (g *Graph) setDeleting(k key, obj *rules.Object) {
	if !obj.Deleting {
		delete(g.deleting, k)
		return
	}
	var t time.Time
	if obj.DeletionTimestamp != nil {
		t = obj.DeletionTimestamp.Time
	}
	g.deleting[k] = t
}
