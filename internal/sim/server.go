package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
)

// Kind is one resource the model serves.
type Kind struct {
	Group, Resource, Kind string
	Versions              []string // served versions; Preferred is one of them
	Preferred             string
	Namespaced            bool
	// DefaultOrphan: a DELETE without a policy orphans (batch/v1 Job).
	DefaultOrphan bool
	// Ignored resources are served but not monitored by kgc (events).
	Ignored bool
}

// GR returns the kind's group resource.
func (k *Kind) GR() schema.GroupResource {
	return schema.GroupResource{Group: k.Group, Resource: k.Resource}
}

// resource is a kind's server-side state.
type resource struct {
	*Kind
	served bool // in discovery
	// list404: in discovery but LISTs (and everything else) answer 404, like
	// a deleted CRD whose group discovery still shows.
	list404 bool
	// down: LIST and WATCH answer 503 (a conversion webhook that is down).
	down bool
	// failLists: the next n collector LISTs answer 429; failPages: the next
	// n collector LISTs continuing a list (its second page on) answer 500.
	failLists, failPages int
	log                  []logEntry // events, for watches resuming from a version
	compacted            int64      // a watch from below this answers 410
	watchers             []*watcher
	// listFailed and watching feed the scheduler's quiescence test:
	// listFailed, a LIST or WATCH of the collector's failed since its
	// monitor last listed or watched; failedOn maps each goroutine such a
	// call was served on (the monitor's, a worker's) to the number of
	// timers the clock had armed by then (backsOff).
	listFailed bool
	failedOn   map[uint64]uint64
	// holdList: the collector's LIST calls of this resource wait, before
	// serving their page, until the scheduler releases them (HoldLists): a
	// list that makes no progress. heldLists counts the calls waiting now;
	// release is closed when they may go on.
	holdList  bool
	heldLists int
	release   chan struct{}
	// stream: a fault of the collector's next streaming list (FailStream).
	stream *streamFault
}

type logEntry struct {
	rv   int64
	typ  watch.EventType
	meta metav1.ObjectMeta
}

// objKey locates an object.
type objKey struct {
	gr        schema.GroupResource
	namespace string
	name      string
}

// Actor tells who made a call.
type Actor string

// Actors.
const (
	ActorKGC    Actor = "kgc"
	ActorClient Actor = "client"
)

// Call describes one API call, for fault injection.
type Call struct {
	Actor    Actor
	Verb     string // get, list, watch, delete, patch, deletecollection
	Resource schema.GroupResource
	Name     string
}

// Violation is a safety property broken at the moment the server changed.
type Violation struct {
	Rule   string // S1, S2, S3
	Detail string
	// Limit names the documented limit of the contract this is an instance
	// of (docs/correctness.md, "Known limits"), checked against the facts
	// the limit describes; "" for a violation no documented limit covers,
	// which is a bug.
	Limit string
}

// The documented limits a Violation can be an instance of. Each is
// classified only when the facts that define it hold at the moment of the
// write; anything else is a plain violation.
const (
	// LimitWatchLag: an owner's orphan or foregroundDeletion finalizer
	// went while a dependent's reference to it was still on the watch
	// stream of a resource the collector had listed (watches of different
	// resources are not ordered).
	LimitWatchLag = "watch-lag"
	// LimitUnlistedHold: an owner's orphan or foregroundDeletion finalizer
	// went while a dependent sat in a resource the collector had never
	// listed, and the collector's own record (Collector.Held) says it
	// released that finalizer after holding it for at least UnlistedHold
	// with that resource unlisted.
	LimitUnlistedHold = "unlisted-hold"
	// LimitRestartMemory: a dependent deleted on account of an owner
	// deleted with Orphan whose finalizer went under one of the limits
	// above, by a collector started after that release, more than the
	// orphan journal's TTL (OrphanTTL) after it: the journal keeps an
	// owner across restarts only that long once every resource is listed
	// (package orphanlog).
	LimitRestartMemory = "restart-memory"
	// LimitStaleCycle: blockOwnerDeletion cleared on a reference to an
	// owner in Foreground deletion to break a cycle of blocking references
	// that no longer exists, but did in the versions of its objects the
	// collector was shown (the graph's cycle check is not confirmed by a
	// read). The object is garbage either way (kgc deletes it Foreground
	// right after); only the order S3 asks for its owner is lost.
	LimitStaleCycle = "stale-cycle"
)

// Server is an in-memory API server model: UIDs, one global resourceVersion,
// finalizers, deletionTimestamp, the apiserver's half of garbage collection
// (orphan / foregroundDeletion finalizers added on delete, removal when the
// last finalizer goes), preconditions, paging, watches whose delivery the
// scheduler controls, and injectable faults. It checks S1–S3 on every
// removal, finalizer removal and kgc DELETE.
type Server struct {
	mu        sync.Mutex
	rv        int64
	uids      int
	kinds     map[schema.GroupResource]*resource
	objects   map[objKey]*metav1.ObjectMeta
	snapshots map[int][]metav1.ObjectMeta // LIST continue tokens
	snapSeq   int
	clock     *Clock
	// orphaned holds the UIDs of owners that went with Orphan: deleting a
	// dependent on their account breaks S2. orphanReleased holds the
	// owners whose orphan finalizer kgc removed while they were being
	// deleted (and that no Foreground DELETE has put in Foreground
	// deletion since): they went with Orphan whoever removes their last
	// finalizer (a foreign one may keep them after kgc's release).
	orphaned       map[types.UID]bool
	orphanReleased map[types.UID]bool
	// What the running collector was shown: the last version of each
	// object delivered to it or listed by it, and the resources it listed
	// completely. A dependent the collector could not have seen yet (its
	// event is still on the stream of a resource it did list) excuses a
	// finalizer removal: upstream's collector has the same lag. A resource
	// never listed does not: negative facts need every resource listed (S4).
	seen   map[types.UID]*metav1.ObjectMeta
	listed map[schema.GroupResource]bool
	// listed404: resources a list of which (not a probe) answered the
	// collector 404; it counts them listed and empty, and the event of
	// their CRD created again tells it to list them again.
	listed404 map[schema.GroupResource]bool
	// relisted: the versions served by relists (lists of resources the
	// collector had listed already) during the current step, which count
	// as seen from the next step on (CommitSeen): a relist in progress
	// leaves the resource listed, and a decision taken in the same step
	// may rest on what the collector saw of it before (the watch-lag
	// limit). A step's deliveries are seen at once: the scheduler settles
	// before each, so no decision of that step predates them.
	relisted map[types.UID]*metav1.ObjectMeta
	// excused: (dependent, orphaned owner) pairs whose orphan finalizer
	// went under a documented limit, with the collector start (starts)
	// that released it and when: deleting the dependent later is a
	// violation unless a restart came in between and the journal's TTL
	// had passed (LimitRestartMemory).
	excused map[[2]types.UID]excuse
	starts  int
	// OrphanTTL is the collectors' orphan journal TTL.
	OrphanTTL time.Duration
	// kgcWrote: the resourceVersion of kgc's last write to each object.
	kgcWrote map[types.UID]int64
	// streamed: the complete streaming lists served (StreamedLists).
	streamed map[schema.GroupResource][]int

	// Fault, when set, may fail a call before it is served.
	Fault func(Call) error
	// LostAnswer, when set, may replace the answer to a write that
	// landed (a DELETE or PATCH served without error) with an error: a
	// timeout, a 5xx or a broken connection, whose caller cannot tell
	// whether its write took effect.
	LostAnswer func(Call) error
	// ReleasedUnlisted, when set, reports the running collector's last
	// record of an owner whose finalizer it removed although resources
	// were unlisted (Collector.Held): the finalizer, the resources unlisted
	// then, and how long it had held the finalizer. UnlistedHold is the
	// bound the release must have waited (the Sim's UnlistedHold).
	ReleasedUnlisted func(owner types.UID) (finalizer string, unlisted []string, heldFor time.Duration, ok bool)
	UnlistedHold     time.Duration
	// OnViolation receives every broken safety property.
	OnViolation func(Violation)
	// Trace receives one line per state change.
	Trace func(string)
	// stopDelay, when set (a test hook), is how long each watch's Stop
	// waits before it takes effect: a reader slow between taking the end
	// of its watch and stopping it, as the Go scheduler or a loaded
	// machine may make the collector's monitor.
	stopDelay time.Duration
}

// excuse is when an orphan finalizer went under a documented limit.
type excuse struct {
	start int
	at    time.Time
}

// NewServer returns a server serving kinds.
func NewServer(clk *Clock, kinds ...*Kind) *Server {
	s := &Server{
		rv: 100, kinds: make(map[schema.GroupResource]*resource),
		objects: make(map[objKey]*metav1.ObjectMeta), snapshots: make(map[int][]metav1.ObjectMeta),
		clock: clk, orphaned: make(map[types.UID]bool), orphanReleased: make(map[types.UID]bool), excused: make(map[[2]types.UID]excuse),
		seen: make(map[types.UID]*metav1.ObjectMeta), listed: make(map[schema.GroupResource]bool),
		listed404: make(map[schema.GroupResource]bool),
		relisted:  make(map[types.UID]*metav1.ObjectMeta),
		kgcWrote:  make(map[types.UID]int64), streamed: make(map[schema.GroupResource][]int),
	}
	for _, k := range kinds {
		s.kinds[k.GR()] = &resource{Kind: k, served: true}
	}
	return s
}

func (s *Server) trace(format string, args ...any) {
	if s.Trace != nil {
		s.Trace(fmt.Sprintf(format, args...))
	}
}

func (s *Server) violate(rule, format string, args ...any) {
	s.violateLimit(rule, "", format, args...)
}

// violateLimit reports a violation that is an instance of the documented
// limit (Violation.Limit; "" for none).
func (s *Server) violateLimit(rule, limit, format string, args ...any) {
	if s.OnViolation != nil {
		s.OnViolation(Violation{Rule: rule, Detail: fmt.Sprintf(format, args...), Limit: limit})
	}
}

// releasedPastHold reports whether the running collector's record says it
// removed owner's finalizer after holding it for at least UnlistedHold
// while gr was among the unlisted resources (LimitUnlistedHold).
func (s *Server) releasedPastHold(owner types.UID, finalizer string, gr schema.GroupResource) bool {
	if s.ReleasedUnlisted == nil {
		return false
	}
	f, unlisted, heldFor, ok := s.ReleasedUnlisted(owner)
	if !ok || f != finalizer || heldFor < s.UnlistedHold {
		return false
	}
	for _, u := range unlisted {
		// GroupVersionResource.String: "group/version, Resource=resource".
		if strings.HasPrefix(u, gr.Group+"/") && strings.HasSuffix(u, ", Resource="+gr.Resource) {
			return true
		}
	}
	return false
}

// ---- server-side state changes (callers hold mu) ----

func (s *Server) nextRV() int64 { s.rv++; return s.rv }

func (s *Server) emit(r *resource, typ watch.EventType, m *metav1.ObjectMeta) {
	rv, _ := strconv.ParseInt(m.ResourceVersion, 10, 64)
	e := logEntry{rv: rv, typ: typ, meta: *m.DeepCopy()}
	r.log = append(r.log, e)
	for _, w := range r.watchers {
		if !w.stopped && !w.ended {
			w.pending = append(w.pending, e)
		}
	}
}

// put stores m (a new version) and emits its event; a deleting object
// without finalizers is removed instead.
func (s *Server) put(actor Actor, k objKey, m *metav1.ObjectMeta, created bool) {
	r := s.kinds[k.gr]
	if old := s.objects[k]; old != nil && actor == ActorKGC {
		s.checkFinalizers(actor, old, m)
		s.checkRefs(k, old, m)
	}
	if old := s.objects[k]; old != nil && m.DeletionTimestamp != nil {
		switch {
		case actor == ActorKGC && slices.Contains(old.Finalizers, metav1.FinalizerOrphanDependents) &&
			!slices.Contains(m.Finalizers, metav1.FinalizerOrphanDependents):
			s.orphanReleased[m.UID] = true
		case slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) &&
			!slices.Contains(old.Finalizers, metav1.FinalizerDeleteDependents):
			delete(s.orphanReleased, m.UID) // deleted Foreground again
		}
	}
	if m.DeletionTimestamp != nil && len(m.Finalizers) == 0 && s.orphanReleased[m.UID] {
		// (A CRD's deletion, in Unserve, removes instances regardless of
		// their finalizers: an owner orphaned only by it did not go with
		// Orphan.)
		s.orphaned[m.UID] = true
	}
	m.ResourceVersion = strconv.FormatInt(s.nextRV(), 10)
	if m.DeletionTimestamp != nil && len(m.Finalizers) == 0 {
		delete(s.objects, k)
		s.trace("%s: removed %s (rv %s)", actor, describe(k, m), m.ResourceVersion)
		s.emit(r, watch.Deleted, m)
		return
	}
	s.objects[k] = m
	if actor == ActorKGC {
		s.kgcWrote[m.UID], _ = strconv.ParseInt(m.ResourceVersion, 10, 64)
	}
	typ := watch.Modified
	if created {
		typ = watch.Added
	}
	s.trace("%s: %s %s rv %s fin=%v del=%v refs=%s", actor, strings.ToLower(string(typ)), describe(k, m), m.ResourceVersion, m.Finalizers, m.DeletionTimestamp != nil, refsString(m.OwnerReferences))
	s.emit(r, typ, m)
}

func describe(k objKey, m *metav1.ObjectMeta) string {
	ns := k.namespace
	if ns != "" {
		ns += "/"
	}
	return fmt.Sprintf("%s %s%s[%s]", k.gr.Resource, ns, k.name, m.UID)
}

func refsString(refs []metav1.OwnerReference) string {
	var b []string
	for _, r := range refs {
		s := string(r.UID)
		if r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion {
			s += "!"
		}
		b = append(b, s)
	}
	return "[" + strings.Join(b, ",") + "]"
}

// findOwner returns the object a reference from a dependent in namespace
// ns names (its UID at its coordinates), if any.
func (s *Server) findOwner(ref metav1.OwnerReference, ns string) (*metav1.ObjectMeta, *resource) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil
	}
	for _, r := range s.kinds {
		if r.Group != gv.Group || r.Kind.Kind != ref.Kind {
			continue
		}
		ons := ""
		if r.Namespaced {
			ons = ns
		}
		if m := s.objects[objKey{r.GR(), ons, ref.Name}]; m != nil && m.UID == ref.UID {
			return m, r
		}
	}
	return nil, nil
}

func foreground(m *metav1.ObjectMeta) bool {
	return m.DeletionTimestamp != nil && slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents)
}

// checkFinalizers checks S2 and S3 when GC finalizers leave an object.
func (s *Server) checkFinalizers(actor Actor, old, now *metav1.ObjectMeta) {
	gone := func(f string) bool {
		return slices.Contains(old.Finalizers, f) && !slices.Contains(now.Finalizers, f)
	}
	orphanGone, fgGone := gone(metav1.FinalizerOrphanDependents), gone(metav1.FinalizerDeleteDependents)
	if !orphanGone && !fgGone {
		return
	}
	gcFinalizer := metav1.FinalizerDeleteDependents
	if orphanGone {
		gcFinalizer = metav1.FinalizerOrphanDependents
	}
	for k, d := range s.objects {
		for _, ref := range d.OwnerReferences {
			if ref.UID != old.UID || (!orphanGone && !blocks(ref)) {
				continue
			}
			note, limit := "", ""
			switch {
			case s.releasedPastHold(old.UID, gcFinalizer, k.gr):
				// kgc's own record of the decision: the resource was not
				// listed in its graph (its list may have been served, and
				// not applied yet), and the hold had passed.
				note, limit = " (kgc had not listed its resource, and released the finalizer past --unlisted-hold)", LimitUnlistedHold
			case !s.couldSee(k, d.UID, ref, fgGone && !orphanGone):
				// Upstream's informers have the same lag.
				note, limit = " (kgc could not have seen that reference yet: its event is still on the watch)", LimitWatchLag
			case !s.listed[k.gr] && s.listed404[k.gr] && !s.crdShown(k.gr):
				// kgc's list answered 404 (listed and empty for kgc);
				// the CRD that serves the resource again, whose event
				// tells kgc to list it again, is on the CRD watch.
				note, limit = " (its resource answered kgc's list 404, and the event of the CRD serving it again is still on the watch)", LimitWatchLag
			case !s.listed[k.gr]:
				note = " (kgc never listed its resource)"
			default:
				if w := s.kgcWrote[d.UID]; w != 0 && (s.seen[d.UID] == nil || rvOf(s.seen[d.UID]) < w) {
					note = " (kgc had written to it and not yet seen its write)"
				}
			}
			if orphanGone && now.DeletionTimestamp != nil {
				s.violateLimit("S2", limit, "%s removed the orphan finalizer of %s/%s[%s] while %s still references it%s", actor, old.Namespace, old.Name, old.UID, describe(k, d), note)
				if limit != "" {
					s.excused[[2]types.UID{d.UID, old.UID}] = excuse{start: s.starts, at: s.clock.Now()}
				}
			}
			// An object's reference to itself never blocks (kgc's semantics,
			// docs/correctness.md: upstream waits forever there).
			if fgGone && ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion && d.UID != old.UID {
				s.violateLimit("S3", limit, "%s removed the foregroundDeletion finalizer of %s/%s[%s] while %s still blocks it%s", actor, old.Namespace, old.Name, old.UID, describe(k, d), note)
			}
		}
	}
}

// crdShown reports whether gr's CRD exists and the collector was shown
// it (callers hold mu); false for a resource without a modeled CRD.
func (s *Server) crdShown(gr schema.GroupResource) bool {
	name, ok := crdNames[gr]
	if !ok || !s.modelsCRDs() {
		return false
	}
	crd := s.objects[objKey{gr: CRDs, name: name}]
	return crd != nil && s.seen[crd.UID] != nil
}

// couldSee reports whether the running collector could know that the
// dependent at k holds ref (blocking, if blocking): it was shown a version
// with it, or it never listed the dependent's resource.
func (s *Server) couldSee(k objKey, uid types.UID, ref metav1.OwnerReference, blocking bool) bool {
	if !s.listed[k.gr] {
		return true
	}
	m := s.seen[uid]
	if m == nil {
		return false
	}
	for _, r := range m.OwnerReferences {
		if r.UID == ref.UID && (!blocking || blocks(r)) {
			return true
		}
	}
	return false
}

// ResetSeen forgets what the previous collector was shown (a new one starts).
func (s *Server) ResetSeen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.seen)
	clear(s.listed)
	clear(s.listed404)
	clear(s.relisted)
	s.starts++
}

// CommitSeen makes what the relists of the last step served count as seen
// (relisted); the Sim calls it as each step begins.
func (s *Server) CommitSeen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, m := range s.relisted {
		s.seen[uid] = m
	}
	clear(s.relisted)
}

// listServed records that a list of gr served m to the collector (callers
// hold mu): seen at once by a first list, from the next step on by a
// relist (relisted).
func (s *Server) listServed(gr schema.GroupResource, m *metav1.ObjectMeta) {
	if s.listed[gr] {
		s.relisted[m.UID] = m.DeepCopy()
		return
	}
	s.seen[m.UID] = m.DeepCopy()
}

func rvOf(m *metav1.ObjectMeta) int64 {
	n, _ := strconv.ParseInt(m.ResourceVersion, 10, 64)
	return n
}

func blocks(r metav1.OwnerReference) bool {
	return r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion
}

// checkRefs checks kgc's ownerReference patches against S3: a blocking
// reference to an owner in Foreground deletion may be dropped only while
// another owner is solid (else the dependent must be deleted before the
// owner goes), and unblocked only to break a real cycle of blocking
// references through the dependent.
func (s *Server) checkRefs(k objKey, old, now *metav1.ObjectMeta) {
	solidLeft := false
	for _, r := range now.OwnerReferences {
		if o, _ := s.findOwner(r, k.namespace); o != nil && !foreground(o) {
			solidLeft = true
		}
	}
	for _, r := range old.OwnerReferences {
		if !blocks(r) {
			continue
		}
		o, _ := s.findOwner(r, k.namespace)
		if o == nil || !foreground(o) {
			continue
		}
		i := slices.IndexFunc(now.OwnerReferences, func(n metav1.OwnerReference) bool { return n.UID == r.UID })
		switch {
		case i < 0 && !solidLeft:
			s.violate("S3", "kgc removed the blocking reference of %s to %s/%s[%s] (Foreground) while no solid owner remains: the dependent must go first", describe(k, old), o.Namespace, o.Name, o.UID)
		case i >= 0 && !blocks(now.OwnerReferences[i]) && !inBlockingCycle(old.UID, s.objects):
			if inBlockingCycle(old.UID, s.seen) || inBlockingCycle(old.UID, s.shownWithRelists()) {
				s.violateLimit("S3", LimitStaleCycle, "kgc cleared blockOwnerDeletion of %s on %s/%s[%s] (Foreground) but no cycle of blocking references runs through it any more (one did in what kgc was shown)", describe(k, old), o.Namespace, o.Name, o.UID)
				continue
			}
			s.violate("S3", "kgc cleared blockOwnerDeletion of %s on %s/%s[%s] (Foreground) but no cycle of blocking references runs through it", describe(k, old), o.Namespace, o.Name, o.UID)
		}
	}
}

// shownWithRelists returns the versions the collector was shown, with
// those the relists of the current step served in place of older ones: a
// decision of this step may rest on either (relisted).
func (s *Server) shownWithRelists() map[types.UID]*metav1.ObjectMeta {
	out := make(map[types.UID]*metav1.ObjectMeta, len(s.seen)+len(s.relisted))
	maps.Copy(out, s.seen)
	maps.Copy(out, s.relisted)
	return out
}

// inBlockingCycle reports whether uid is, through blocking references, a
// transitive dependent of itself among objs (the store, or the versions
// the collector was shown).
func inBlockingCycle[K comparable](uid types.UID, objs map[K]*metav1.ObjectMeta) bool {
	deps := map[types.UID][]types.UID{} // owner -> blocking dependents
	for _, m := range objs {
		for _, r := range m.OwnerReferences {
			if blocks(r) {
				deps[r.UID] = append(deps[r.UID], m.UID)
			}
		}
	}
	seen := map[types.UID]bool{}
	stack := slices.Clone(deps[uid])
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if u == uid {
			return true
		}
		if seen[u] {
			continue
		}
		seen[u] = true
		stack = append(stack, deps[u]...)
	}
	return false
}

// checkDelete checks S1 when kgc deletes m.
func (s *Server) checkDelete(k objKey, m *metav1.ObjectMeta) {
	if len(m.OwnerReferences) == 0 {
		s.violate("S1", "kgc deleted %s, which has no ownerReferences", describe(k, m))
	}
	// A deletion is on account of owners deleted with Orphan when they are
	// all it references: with a reference to another owner (gone, or in
	// Foreground deletion: S1 checks that), removing the orphaned owners'
	// references would leave the object garbage all the same, as upstream
	// decides it too.
	onlyOrphaned := true
	for _, ref := range m.OwnerReferences {
		onlyOrphaned = onlyOrphaned && s.orphaned[ref.UID]
	}
	for _, ref := range m.OwnerReferences {
		if onlyOrphaned {
			// Within one collector's run, an owner released under a
			// documented limit is remembered as orphaned, and its
			// dependents found later are orphaned, not deleted.
			if e, ok := s.excused[[2]types.UID{m.UID, ref.UID}]; ok && e.start < s.starts && s.clock.Now().Sub(e.at) > s.OrphanTTL {
				s.violateLimit("S2", LimitRestartMemory, "kgc deleted %s, a dependent of %s, which was deleted with Orphan (its finalizer went under a documented limit before a collector restart, longer than the orphan journal's TTL ago)", describe(k, m), ref.UID)
			} else {
				s.violate("S2", "kgc deleted %s, a dependent of %s, which was deleted with Orphan", describe(k, m), ref.UID)
			}
		}
		if o, r := s.findOwner(ref, k.namespace); o != nil && !foreground(o) {
			note := ""
			if !s.listed[r.GR()] {
				note = " (kgc never listed the owner's resource)"
			}
			s.violate("S1", "kgc deleted %s while its owner %s/%s[%s] exists (deleting=%v finalizers=%v)%s", describe(k, m), o.Namespace, o.Name, o.UID, o.DeletionTimestamp != nil, o.Finalizers, note)
		}
	}
}

// ---- the client-facing operations ----

func (s *Server) kind(gvr schema.GroupVersionResource) (*resource, error) {
	r := s.kinds[gvr.GroupResource()]
	if r == nil || !r.served || r.list404 || !slices.Contains(r.Versions, gvr.Version) {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), "")
	}
	return r, nil
}

func (s *Server) fault(actor Actor, verb string, gvr schema.GroupVersionResource, name string) error {
	if s.Fault == nil {
		return nil
	}
	return s.Fault(Call{Actor: actor, Verb: verb, Resource: gvr.GroupResource(), Name: name})
}

func (s *Server) typed(gvr schema.GroupVersionResource, r *resource, m *metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: gvr.GroupVersion().String(), Kind: r.Kind.Kind},
		ObjectMeta: *m.DeepCopy(),
	}
}

// Create stores a new object (the client's); it assigns UID and version.
func (s *Server) Create(gr schema.GroupResource, m metav1.ObjectMeta) (*metav1.ObjectMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.kinds[gr]
	if r == nil || !r.served || r.list404 {
		return nil, apierrors.NewNotFound(gr, m.Name)
	}
	if !r.Namespaced {
		m.Namespace = ""
	}
	k := objKey{gr, m.Namespace, m.Name}
	if s.objects[k] != nil {
		return nil, apierrors.NewAlreadyExists(gr, m.Name)
	}
	s.uids++
	m.UID = types.UID(fmt.Sprintf("%s-%d", m.Name, s.uids))
	m.DeletionTimestamp = nil
	s.put(ActorClient, k, m.DeepCopy(), true)
	return s.objects[k].DeepCopy(), nil
}

// Get reads one object.
func (s *Server) get(actor Actor, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	if err := s.fault(actor, "get", gvr, name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.kind(gvr)
	if err != nil {
		return nil, err
	}
	if r.down {
		return nil, apierrors.NewServiceUnavailable("conversion webhook unavailable")
	}
	m := s.objects[objKey{gvr.GroupResource(), ns, name}]
	if m == nil {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return s.typed(gvr, r, m), nil
}

// listPageCap bounds the pages the collector's LISTs get, so that a list
// held part way (HoldLists) has delivered some of its objects and not
// others.
const listPageCap = 3

func (s *Server) list(ctx context.Context, actor Actor, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	if err := s.fault(actor, "list", gvr, ""); err != nil {
		s.markListFailed(gvr)
		return nil, err
	}
	s.mu.Lock()
	if r := s.kinds[gvr.GroupResource()]; r != nil && r.holdList && actor == ActorKGC {
		// The page waits until the scheduler releases the resource's
		// lists: the monitor is at rest inside its LIST (settled).
		ch := r.release
		r.heldLists++
		r.listFailed = false
		s.mu.Unlock()
		s.trace("kgc's list of %s: page held", gvr.GroupResource())
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		r.heldLists--
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	defer s.mu.Unlock()
	if actor == ActorKGC && opts.Limit > listPageCap {
		opts.Limit = listPageCap
	}
	r, err := s.kind(gvr)
	if err != nil {
		if r := s.kinds[gvr.GroupResource()]; r != nil {
			s.backsOff(r)
		}
		if actor == ActorKGC && ns == "" && !(opts.Limit == 1 && opts.Continue == "") && apierrors.IsNotFound(err) {
			s.listed404[gvr.GroupResource()] = true
		}
		return nil, err
	}
	switch {
	case r.down:
		s.backsOff(r)
		return nil, apierrors.NewServiceUnavailable("conversion webhook unavailable")
	case r.failLists > 0 && actor == ActorKGC:
		r.failLists--
		s.backsOff(r)
		return nil, apierrors.NewTooManyRequests("injected", 1)
	case r.failPages > 0 && actor == ActorKGC && opts.Continue != "":
		r.failPages--
		s.backsOff(r)
		return nil, apierrors.NewInternalError(fmt.Errorf("injected: page failed"))
	}
	var items []metav1.ObjectMeta
	offset := 0
	listRV := strconv.FormatInt(s.rv, 10)
	if opts.Continue != "" {
		id, off, ok := strings.Cut(opts.Continue, ":")
		n, err1 := strconv.Atoi(id)
		o, err2 := strconv.Atoi(off)
		snap, found := s.snapshots[n]
		if !ok || err1 != nil || err2 != nil || !found {
			return nil, apierrors.NewResourceExpired("continue token expired")
		}
		items, offset = snap, o
		if len(items) > 0 {
			listRV = items[0].Annotations["sim/list-rv"]
		}
	} else {
		for k, m := range s.objects {
			if k.gr != gvr.GroupResource() || (ns != "" && k.namespace != ns) {
				continue
			}
			items = append(items, *m.DeepCopy())
		}
		sort.Slice(items, func(i, j int) bool {
			if items[i].Namespace != items[j].Namespace {
				return items[i].Namespace < items[j].Namespace
			}
			return items[i].Name < items[j].Name
		})
	}
	out := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"}}
	end := len(items)
	if opts.Limit > 0 && int64(end-offset) > opts.Limit {
		end = offset + int(opts.Limit)
		if opts.Continue == "" {
			s.snapSeq++
			// Remember the snapshot's version in a copy of its first item.
			if len(items) > 0 {
				items[0].Annotations = cloneAnnotations(items[0].Annotations)
				items[0].Annotations["sim/list-rv"] = listRV
			}
			s.snapshots[s.snapSeq] = items
			out.Continue = fmt.Sprintf("%d:%d", s.snapSeq, end)
		} else {
			id, _, _ := strings.Cut(opts.Continue, ":")
			out.Continue = fmt.Sprintf("%s:%d", id, end)
		}
	}
	for i := offset; i < end; i++ {
		m := items[i].DeepCopy()
		delete(m.Annotations, "sim/list-rv")
		if len(m.Annotations) == 0 {
			m.Annotations = nil
		}
		out.Items = append(out.Items, *s.typed(gvr, r, m))
	}
	out.ResourceVersion = listRV
	// kgc's probes (a LIST of one item: is the resource served, has its
	// storage gone back) read the answer's resourceVersion or status and
	// apply none of its items: they show kgc nothing, and list nothing.
	probe := opts.Limit == 1 && opts.Continue == ""
	if actor == ActorKGC && !probe {
		for i := range out.Items {
			s.listServed(gvr.GroupResource(), &out.Items[i].ObjectMeta)
		}
	}
	if out.Continue == "" && actor == ActorKGC && ns == "" && !probe {
		r.listFailed = false
		s.listed[r.GR()] = true
	}
	return out, nil
}

func cloneAnnotations(a map[string]string) map[string]string {
	out := make(map[string]string, len(a)+1)
	for k, v := range a {
		out[k] = v
	}
	return out
}

func (s *Server) markListFailed(gvr schema.GroupVersionResource) {
	s.mu.Lock()
	if r := s.kinds[gvr.GroupResource()]; r != nil {
		s.backsOff(r)
	}
	s.mu.Unlock()
}

// backsOff records that the collector's LIST or WATCH of r failed (or
// answered 404) on the calling goroutine: a monitor's calls are served on
// its own goroutine, which then arms its backoff timer. Callers hold mu.
func (s *Server) backsOff(r *resource) {
	if !r.listFailed {
		r.failedOn = map[uint64]uint64{}
	}
	r.listFailed = true
	r.failedOn[goroutineID()] = s.clock.Seq()
}

// backingOff reports whether a goroutine that a failed call of r was
// served on has armed a timer since that is still pending. Callers hold
// mu.
func (s *Server) backingOff(r *resource) bool {
	if !r.listFailed {
		return false
	}
	for g, seq := range r.failedOn {
		if s.clock.ArmedSince(g, seq) {
			return true
		}
	}
	return false
}

func (s *Server) watch(actor Actor, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	if err := s.fault(actor, "watch", gvr, ""); err != nil {
		s.markListFailed(gvr)
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.kind(gvr)
	if err != nil {
		if r := s.kinds[gvr.GroupResource()]; r != nil {
			s.backsOff(r) // the monitor backs off, then lists
		}
		return nil, err
	}
	if r.down {
		s.backsOff(r)
		return nil, apierrors.NewServiceUnavailable("conversion webhook unavailable")
	}
	from, err := strconv.ParseInt(opts.ResourceVersion, 10, 64)
	if err != nil {
		return nil, apierrors.NewBadRequest("sim: watch needs a resourceVersion")
	}
	if from < r.compacted {
		s.backsOff(r) // the monitor relists at once: not at rest until then
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, r.compacted))
	}
	w := &watcher{gvr: gvr, res: r, ns: ns, ch: make(chan watch.Event), stop: make(chan struct{}), stopDelay: s.stopDelay}
	for _, e := range r.log {
		if e.rv > from {
			w.pending = append(w.pending, e)
		}
	}
	r.watchers = append(r.watchers, w)
	r.listFailed = false
	return w, nil
}

// policyFinalizers returns m's finalizers after a DELETE with policy (nil:
// none given), following the apiserver: the GC finalizers are replaced by
// the one the policy asks for; without a policy the object's own GC
// finalizers stand, or the kind's default applies.
func policyFinalizers(m *metav1.ObjectMeta, policy *metav1.DeletionPropagation, defaultOrphan bool) []string {
	var orphan, fg bool
	switch {
	case policy != nil:
		orphan = *policy == metav1.DeletePropagationOrphan
		fg = *policy == metav1.DeletePropagationForeground
	default:
		orphan = slices.Contains(m.Finalizers, metav1.FinalizerOrphanDependents)
		fg = slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents)
		if !orphan && !fg && defaultOrphan {
			orphan = true
		}
	}
	var out []string
	for _, f := range m.Finalizers {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			out = append(out, f)
		}
	}
	if orphan {
		out = append(out, metav1.FinalizerOrphanDependents)
	}
	if fg {
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	return out
}

func (s *Server) delete(actor Actor, gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	if err := s.fault(actor, "delete", gvr, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.kind(gvr)
	if err != nil {
		return err
	}
	return s.deleteLocked(actor, r, objKey{gvr.GroupResource(), ns, name}, opts)
}

func (s *Server) deleteLocked(actor Actor, r *resource, k objKey, opts metav1.DeleteOptions) error {
	m := s.objects[k]
	if m == nil {
		return apierrors.NewNotFound(k.gr, k.name)
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != m.UID {
			return apierrors.NewConflict(k.gr, k.name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, m.UID))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != m.ResourceVersion {
			return apierrors.NewConflict(k.gr, k.name, fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, m.ResourceVersion))
		}
	}
	policy := opts.PropagationPolicy
	if policy == nil && opts.OrphanDependents != nil {
		p := metav1.DeletePropagationBackground
		if *opts.OrphanDependents {
			p = metav1.DeletePropagationOrphan
		}
		policy = &p
	}
	if actor == ActorKGC {
		s.checkDelete(k, m)
	}
	n := m.DeepCopy()
	n.Finalizers = policyFinalizers(m, policy, r.DefaultOrphan)
	if n.DeletionTimestamp == nil {
		// Removed at once when no finalizer is left (put).
		n.DeletionTimestamp = &metav1.Time{Time: s.clock.Now()}
		s.put(actor, k, n, false)
		return nil
	}
	if slices.Equal(n.Finalizers, m.Finalizers) {
		return nil // already deleting, nothing to change
	}
	s.put(actor, k, n, false)
	return nil
}

func (s *Server) deleteCollection(actor Actor, gvr schema.GroupVersionResource, ns string, opts metav1.DeleteOptions) error {
	if err := s.fault(actor, "deletecollection", gvr, ""); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.kind(gvr)
	if err != nil {
		return err
	}
	var keys []objKey
	for k := range s.objects {
		if k.gr == gvr.GroupResource() && (ns == "" || k.namespace == ns) {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].namespace+"/"+keys[i].name < keys[j].namespace+"/"+keys[j].name })
	for _, k := range keys {
		if err := s.deleteLocked(actor, r, k, opts); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// patch applies a JSON merge patch or a JSON patch (RFC 6902) to the
// object's metadata, as the apiserver does: the patched uid and
// resourceVersion act as preconditions (409), a failed JSON-patch "test"
// answers 422 (k8s.io/apiserver's patch handler wraps every apply error of a
// JSON patch in StatusUnprocessableEntity), a new finalizer on a deleting
// object is refused (422), and a patch that changes nothing writes nothing.
func (s *Server) patch(actor Actor, gvr schema.GroupVersionResource, ns, name string, pt types.PatchType, data []byte) (*metav1.PartialObjectMetadata, error) {
	if err := s.fault(actor, "patch", gvr, name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.kind(gvr)
	if err != nil {
		return nil, err
	}
	k := objKey{gvr.GroupResource(), ns, name}
	m := s.objects[k]
	if m == nil {
		return nil, apierrors.NewNotFound(k.gr, name)
	}
	cur, err := json.Marshal(s.typed(gvr, r, m))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	switch pt {
	case types.MergePatchType:
		patched, err = jsonpatch.MergePatch(cur, data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		patched, err = p.Apply(cur)
		if err != nil {
			return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", k.gr, name, "unsupported patch type "+string(pt), 0, false)
	}
	var out metav1.PartialObjectMetadata
	if err := json.Unmarshal(patched, &out); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	n := &out.ObjectMeta
	if n.UID != "" && n.UID != m.UID {
		return nil, apierrors.NewConflict(k.gr, name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", n.UID, m.UID))
	}
	if n.ResourceVersion != "" && n.ResourceVersion != m.ResourceVersion {
		return nil, apierrors.NewConflict(k.gr, name, fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	// Fields a patch cannot change.
	n.Name, n.Namespace, n.UID, n.DeletionTimestamp = m.Name, m.Namespace, m.UID, m.DeletionTimestamp
	n.CreationTimestamp, n.Generation, n.ResourceVersion = m.CreationTimestamp, m.Generation, m.ResourceVersion
	if m.DeletionTimestamp != nil {
		for _, f := range n.Finalizers {
			if !slices.Contains(m.Finalizers, f) {
				return nil, apierrors.NewInvalid(schema.GroupKind{Group: r.Group, Kind: r.Kind.Kind}, name, nil)
			}
		}
	}
	if metaEqual(m, n) {
		return s.typed(gvr, r, m), nil
	}
	s.put(actor, k, n, false)
	if now := s.objects[k]; now != nil {
		return s.typed(gvr, r, now), nil
	}
	return s.typed(gvr, r, n), nil
}

func metaEqual(a, b *metav1.ObjectMeta) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// ---- metadata.Interface ----

// Client returns a metadata.Interface whose calls are attributed to actor.
func (s *Server) Client(actor Actor) metadata.Interface { return &client{s: s, actor: actor} }

type client struct {
	s     *Server
	actor Actor
}

func (c *client) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	return &resourceClient{client: c, gvr: gvr}
}

type resourceClient struct {
	*client
	gvr schema.GroupVersionResource
	ns  string
}

func (rc *resourceClient) Namespace(ns string) metadata.ResourceInterface {
	return &resourceClient{client: rc.client, gvr: rc.gvr, ns: ns}
}

func (rc *resourceClient) Delete(_ context.Context, name string, opts metav1.DeleteOptions, _ ...string) error {
	err := rc.s.delete(rc.actor, rc.gvr, rc.ns, name, opts)
	rc.traceErr("delete", name, err)
	if err == nil {
		err = rc.lostAnswer("delete", name)
	}
	return err
}

// lostAnswer is the answer to a write that landed: nil, or the error
// LostAnswer replaces it with (traced).
func (rc *resourceClient) lostAnswer(verb, name string) error {
	if rc.s.LostAnswer == nil {
		return nil
	}
	err := rc.s.LostAnswer(Call{Actor: rc.actor, Verb: verb, Resource: rc.gvr.GroupResource(), Name: name})
	if err != nil {
		rc.s.trace("fault: %s's %s %s %s/%s landed; its answer lost: %v", rc.actor, verb, rc.gvr.Resource, rc.ns, name, err)
	}
	return err
}

// traceErr records a refused write in the trace (accepted ones show as the
// changes they make).
func (rc *resourceClient) traceErr(verb, name string, err error) {
	if err != nil {
		rc.s.trace("%s: %s %s %s/%s refused: %s", rc.actor, verb, rc.gvr.Resource, rc.ns, name, apierrors.ReasonForError(err))
	}
}

func (rc *resourceClient) DeleteCollection(_ context.Context, opts metav1.DeleteOptions, _ metav1.ListOptions) error {
	return rc.s.deleteCollection(rc.actor, rc.gvr, rc.ns, opts)
}

func (rc *resourceClient) Get(_ context.Context, name string, _ metav1.GetOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	return rc.s.get(rc.actor, rc.gvr, rc.ns, name)
}

func (rc *resourceClient) List(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	return rc.s.list(ctx, rc.actor, rc.gvr, rc.ns, opts)
}

func (rc *resourceClient) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return rc.s.watch(rc.actor, rc.gvr, rc.ns, opts)
}

func (rc *resourceClient) Patch(_ context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*metav1.PartialObjectMetadata, error) {
	obj, err := rc.s.patch(rc.actor, rc.gvr, rc.ns, name, pt, data)
	rc.traceErr("patch", name, err)
	if err == nil {
		if err = rc.lostAnswer("patch", name); err != nil {
			return nil, err
		}
	}
	return obj, err
}

// ---- watches ----

// watcher is one watch stream. Its events wait in pending until the
// scheduler delivers them (Deliver), one at a time and in order.
type watcher struct {
	gvr     schema.GroupVersionResource
	res     *resource
	ns      string
	pending []logEntry
	ch      chan watch.Event
	stop    chan struct{}
	stopped bool
	// ended: the server ended the watch (Expire); its reader is not at
	// rest on it, though it may not have stopped it yet (Server.settled).
	ended bool
	once  sync.Once
	// stopDelay: Server.stopDelay when the watch started.
	stopDelay time.Duration
}

func (w *watcher) ResultChan() <-chan watch.Event { return w.ch }

func (w *watcher) Stop() {
	w.once.Do(func() {
		if w.stopDelay > 0 {
			time.Sleep(w.stopDelay)
		}
		close(w.stop)
	})
}

// sendTimeout bounds how long a delivery waits for a monitor to take it: a
// monitor that neither reads nor stops its watch is stuck.
const sendTimeout = 20 * time.Second

func (w *watcher) send(ev watch.Event) error {
	t := time.NewTimer(sendTimeout)
	defer t.Stop()
	select {
	case w.ch <- ev:
		return nil
	case <-w.stop:
		return nil
	case <-t.C:
		return fmt.Errorf("watch of %s: no reader for %s", w.gvr, sendTimeout)
	}
}

// liveWatchers prunes stopped watchers; callers hold mu.
func (r *resource) liveWatchers() []*watcher {
	live := r.watchers[:0]
	for _, w := range r.watchers {
		select {
		case <-w.stop:
			w.stopped = true
		default:
		}
		if !w.stopped {
			live = append(live, w)
		}
	}
	clear(r.watchers[len(live):])
	r.watchers = live
	return live
}

// Deliver hands the next pending event of gr's watch to its reader and
// waits until the reader has processed it (the bookmark that follows is
// taken only once the reader is back at its receive). It reports whether
// there was an event.
func (s *Server) Deliver(gr schema.GroupResource) (bool, error) {
	s.mu.Lock()
	r := s.kinds[gr]
	var w *watcher
	var e logEntry
	for _, cand := range r.liveWatchers() {
		if len(cand.pending) > 0 {
			w = cand
			break
		}
	}
	if w != nil {
		e = w.pending[0]
		w.pending = w.pending[1:]
		if e.typ == watch.Deleted {
			delete(s.seen, e.meta.UID)
		} else {
			s.seen[e.meta.UID] = e.meta.DeepCopy()
		}
	}
	s.mu.Unlock()
	if w == nil {
		return false, nil
	}
	if w.ns != "" && e.meta.Namespace != w.ns {
		return true, nil
	}
	s.trace("delivered to kgc's %s monitor: %s %s rv %s", w.gvr.GroupResource(), strings.ToLower(string(e.typ)),
		describe(objKey{gr, e.meta.Namespace, e.meta.Name}, &e.meta), e.meta.ResourceVersion)
	obj := s.typed(w.gvr, r, &e.meta)
	if err := w.send(watch.Event{Type: e.typ, Object: obj}); err != nil {
		return true, err
	}
	bm := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: e.meta.ResourceVersion}}
	return true, w.send(watch.Event{Type: watch.Bookmark, Object: bm})
}

// Expire ends gr's watches with 410 Gone and compacts its history, so the
// reader must relist.
func (s *Server) Expire(gr schema.GroupResource) error {
	s.mu.Lock()
	r := s.kinds[gr]
	r.compacted = s.rv
	ws := slices.Clone(r.liveWatchers())
	for _, w := range ws {
		w.pending = nil
		// Before the 410 is sent: once its reader took it, nothing else
		// shows that the reader has a relist to make until it stops the
		// watch, which the Go scheduler may put off past a settled step.
		w.ended = true
	}
	s.mu.Unlock()
	for _, w := range ws {
		st := apierrors.NewResourceExpired("injected: watch expired").ErrStatus
		if err := w.send(watch.Event{Type: watch.Error, Object: &st}); err != nil {
			return err
		}
	}
	return nil
}

// Pending returns the resources whose watches have undelivered events.
func (s *Server) Pending() []schema.GroupResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []schema.GroupResource
	for gr, r := range s.kinds {
		for _, w := range r.liveWatchers() {
			if len(w.pending) > 0 {
				out = append(out, gr)
				break
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// settled reports whether gvr's reader is at rest: watching (a watch the
// server did not end: the reader of an expired one has a relist to make,
// whether or not it stopped that watch yet), waiting in a held list, or
// backing off after a failed list or watch. It backs off once the
// goroutine its failed call was served on has armed a timer since, until
// that timer fires (backingOff): before, the monitor is
// still recording and logging the error, and a scheduler that took it for
// at rest could end the schedule before it lists again (its timer is not
// there yet). This holds as well for a LIST answering 404, after which
// the monitor backs off without failing. A failed call of another
// goroutine (a worker's LIST) does not hide the monitor's backoff.
func (s *Server) settled(gvr schema.GroupVersionResource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.kinds[gvr.GroupResource()]
	if r == nil {
		return true
	}
	if s.backingOff(r) || (r.holdList && r.heldLists > 0) {
		return true
	}
	for _, w := range r.liveWatchers() {
		if w.gvr == gvr && !w.ended {
			return true
		}
	}
	return false
}

// ---- discovery and REST mapping ----

// ServerPreferredResources implements discovery.Discovery.
func (s *Server) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byGV := map[string]*metav1.APIResourceList{}
	for _, r := range s.kinds {
		if !r.served {
			continue
		}
		gv := schema.GroupVersion{Group: r.Group, Version: r.Preferred}.String()
		l := byGV[gv]
		if l == nil {
			l = &metav1.APIResourceList{GroupVersion: gv}
			byGV[gv] = l
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: r.Resource, Namespaced: r.Namespaced, Kind: r.Kind.Kind,
			Verbs: metav1.Verbs{"get", "list", "watch", "delete", "patch", "deletecollection"},
		})
	}
	var out []*metav1.APIResourceList
	for _, l := range byGV {
		sort.Slice(l.APIResources, func(i, j int) bool { return l.APIResources[i].Name < l.APIResources[j].Name })
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GroupVersion < out[j].GroupVersion })
	return out, nil
}

// Mapper is a RESTMapper over what the server serves, with the staleness of
// a cached discovery: it reads the server only after Reset.
type Mapper struct {
	s     *Server
	mu    sync.Mutex
	cache map[schema.GroupKind]*resource
	kinds map[schema.GroupKind]Kind
}

// Mapper returns a RESTMapper over the server's kinds.
func (s *Server) Mapper() *Mapper {
	m := &Mapper{s: s}
	m.Reset()
	return m
}

// Reset rereads what the server serves.
func (m *Mapper) Reset() {
	m.s.mu.Lock()
	kinds := map[schema.GroupKind]Kind{}
	for _, r := range m.s.kinds {
		if r.served {
			k := *r.Kind
			k.Versions = slices.Clone(r.Versions)
			kinds[schema.GroupKind{Group: r.Group, Kind: r.Kind.Kind}] = k
		}
	}
	m.s.mu.Unlock()
	m.mu.Lock()
	m.kinds = kinds
	m.mu.Unlock()
}

var _ meta.RESTMapper = (*Mapper)(nil)

func (m *Mapper) lookup(gk schema.GroupKind) (Kind, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.kinds[gk]
	return k, ok
}

// RESTMapping maps a kind to its resource at the first served version given
// (the preferred version when none is).
func (m *Mapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	k, ok := m.lookup(gk)
	if !ok {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	version := ""
	if len(versions) == 0 {
		version = k.Preferred
	}
	for _, v := range versions {
		if slices.Contains(k.Versions, v) {
			version = v
			break
		}
	}
	if version == "" {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	scope := meta.RESTScopeRoot
	if k.Namespaced {
		scope = meta.RESTScopeNamespace
	}
	return &meta.RESTMapping{
		Resource:         schema.GroupVersionResource{Group: k.Group, Version: version, Resource: k.Resource},
		GroupVersionKind: schema.GroupVersionKind{Group: k.Group, Version: version, Kind: k.Kind},
		Scope:            scope,
	}, nil
}

// RESTMappings returns RESTMapping's answer as a list.
func (m *Mapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	r, err := m.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	return []*meta.RESTMapping{r}, nil
}

func (m *Mapper) byResource(gvr schema.GroupVersionResource) (Kind, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.kinds {
		if k.Resource == gvr.Resource && (gvr.Group == "" || k.Group == gvr.Group) {
			return k, true
		}
	}
	return Kind{}, false
}

// KindFor maps a resource to its kind.
func (m *Mapper) KindFor(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	k, ok := m.byResource(gvr)
	if !ok {
		return schema.GroupVersionKind{}, &meta.NoResourceMatchError{PartialResource: gvr}
	}
	v := gvr.Version
	if v == "" {
		v = k.Preferred
	}
	return schema.GroupVersionKind{Group: k.Group, Version: v, Kind: k.Kind}, nil
}

// KindsFor returns KindFor's answer as a list.
func (m *Mapper) KindsFor(gvr schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	k, err := m.KindFor(gvr)
	if err != nil {
		return nil, err
	}
	return []schema.GroupVersionKind{k}, nil
}

// ResourceFor completes a partial resource.
func (m *Mapper) ResourceFor(gvr schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	k, ok := m.byResource(gvr)
	if !ok {
		return schema.GroupVersionResource{}, &meta.NoResourceMatchError{PartialResource: gvr}
	}
	v := gvr.Version
	if v == "" {
		v = k.Preferred
	}
	return schema.GroupVersionResource{Group: k.Group, Version: v, Resource: k.Resource}, nil
}

// ResourcesFor returns ResourceFor's answer as a list.
func (m *Mapper) ResourcesFor(gvr schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	r, err := m.ResourceFor(gvr)
	if err != nil {
		return nil, err
	}
	return []schema.GroupVersionResource{r}, nil
}

// ResourceSingularizer is not needed by kgc.
func (m *Mapper) ResourceSingularizer(resource string) (string, error) {
	return strings.TrimSuffix(resource, "s"), nil
}

// HoldLists makes the collector's LISTs of gr wait before each page until
// released (hold false): a first list that makes no progress, or one held
// part way. A held LIST ends when its caller's context does.
func (s *Server) HoldLists(gr schema.GroupResource, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.kinds[gr]
	switch {
	case hold && !r.holdList:
		r.holdList, r.release = true, make(chan struct{})
	case !hold && r.holdList:
		r.holdList = false
		close(r.release)
	}
}

// listsHeld reports whether some resource's LISTs are held.
func (s *Server) listsHeld() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.kinds {
		if r.holdList {
			return true
		}
	}
	return false
}
