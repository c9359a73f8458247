package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/collector"
	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/orphanlog"
)

// Finalizer is the foreign finalizer the simulated clients put on objects.
const Finalizer = "example.com/hold"

// Kinds returns the simulated world's resources: core, apps, batch
// (Job defaults to orphan), a cluster-scoped kind, a CRD-like kind served
// at two versions, a cluster-scoped CRD-like kind that can disappear, and
// the ignored events.
func Kinds() []*Kind {
	return []*Kind{
		{Group: "", Resource: "configmaps", Kind: "ConfigMap", Versions: []string{"v1"}, Preferred: "v1", Namespaced: true},
		{Group: "apps", Resource: "deployments", Kind: "Deployment", Versions: []string{"v1"}, Preferred: "v1", Namespaced: true},
		{Group: "apps", Resource: "replicasets", Kind: "ReplicaSet", Versions: []string{"v1"}, Preferred: "v1", Namespaced: true},
		{Group: "batch", Resource: "jobs", Kind: "Job", Versions: []string{"v1"}, Preferred: "v1", Namespaced: true, DefaultOrphan: true},
		{Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Kind: "ClusterRole", Versions: []string{"v1"}, Preferred: "v1"},
		{Group: "example.com", Resource: "widgets", Kind: "Widget", Versions: []string{"v1", "v2"}, Preferred: "v1", Namespaced: true},
		{Group: "gadgets.example.org", Resource: "gadgets", Kind: "Gadget", Versions: []string{"v1"}, Preferred: "v1"},
		{Group: "", Resource: "events", Kind: "Event", Versions: []string{"v1"}, Preferred: "v1", Namespaced: true, Ignored: true},
	}
}

// GR names of the world's resources.
var (
	ConfigMaps   = schema.GroupResource{Resource: "configmaps"}
	Deployments  = schema.GroupResource{Group: "apps", Resource: "deployments"}
	ReplicaSets  = schema.GroupResource{Group: "apps", Resource: "replicasets"}
	Jobs         = schema.GroupResource{Group: "batch", Resource: "jobs"}
	ClusterRoles = schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}
	Widgets      = schema.GroupResource{Group: "example.com", Resource: "widgets"}
	Gadgets      = schema.GroupResource{Group: "gadgets.example.org", Resource: "gadgets"}
)

// Sim is one simulated cluster with a kgc collector running against it.
type Sim struct {
	Seed  uint64
	Clock *Clock
	Srv   *Server
	rng   *rand.Rand

	Workers int
	// Streaming: the collectors Start starts list by streaming (a WATCH
	// with sendInitialEvents, falling back to pages) rather than by pages
	// only, as kgc does against a server that serves streaming lists
	// (stream.go).
	Streaming bool
	// ResyncPeriod of the collector (fake time).
	ResyncPeriod time.Duration
	// UnlistedHold of the collector (fake time; default 1m, kgc's).
	UnlistedHold time.Duration

	coll   *collector.Collector
	cancel context.CancelFunc
	done   chan error
	mapper *Mapper

	mu         sync.Mutex
	steps      []string // the schedule so far
	log        []string // steps and the state changes they caused
	violations []Violation
	// limits are the violations that are instances of a documented limit
	// (Violation.Limit): counted and classified, not failures.
	limits []Violation
	// FaultRate is the probability of a 429/500 on a collector call.
	FaultRate float64
	// LostAnswerRate is the probability that a collector's write that
	// landed (a DELETE, a PATCH of ownerReferences or finalizers, a write
	// of the orphan journal) is answered with a timeout, a 5xx or a
	// broken connection (lostAnswer).
	LostAnswerRate float64
	lostAnswers    int // answers lost so far
	calls          map[string]int
	// Configure, when set, adjusts the config of every collector Start
	// starts (a test that switches a fix off through a config knob).
	Configure func(*collector.Config)
	// Journal is the orphan journal's store, shared by every collector
	// Start starts (it outlives restarts, as kgc's Lease does); OrphanTTL
	// is their journal TTL.
	Journal   *orphanlog.MemoryStore
	OrphanTTL time.Duration
	// Breaker, when set (SetBreaker), is the deletion breaker's config of
	// every collector Start starts; every trip is a violation
	// (breaker.go). crdReadFailed: kgc's last read of each CRD (by name)
	// was answered an injected fault.
	Breaker       *breaker.Config
	crdReadFailed map[string]bool

	// The schedule applied through Apply, as it took effect, and the
	// objects it created, by coordinates (schedule.go).
	actions []Action
	names   map[objKey]Obj
}

// New returns a simulation with the world's kinds and no objects; call
// Start to run a collector.
func New(seed uint64) *Sim {
	clk := NewClock()
	s := &Sim{
		Seed: seed, Clock: clk, Srv: NewServer(clk, Kinds()...),
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		Workers: 1, ResyncPeriod: 30 * time.Second, UnlistedHold: time.Minute,
		Journal: &orphanlog.MemoryStore{}, OrphanTTL: orphanlog.DefaultTTL,
		calls: map[string]int{}, names: map[objKey]Obj{},
	}
	s.mapper = s.Srv.Mapper()
	s.Srv.Trace = func(line string) {
		s.mu.Lock()
		s.log = append(s.log, "    "+line)
		s.mu.Unlock()
	}
	s.Srv.OnViolation = func(v Violation) {
		s.mu.Lock()
		if v.Limit != "" {
			s.limits = append(s.limits, v)
			s.log = append(s.log, "    LIMIT "+v.Limit+" ("+v.Rule+"): "+v.Detail)
		} else {
			s.violations = append(s.violations, v)
			s.log = append(s.log, "    VIOLATION "+v.Rule+": "+v.Detail)
		}
		s.mu.Unlock()
	}
	s.Srv.Fault = s.fault
	s.Srv.LostAnswer = s.lostAnswer
	return s
}

// lostAnswer answers a collector's write that landed with an error at
// LostAnswerRate: 504 "may still be processing", a 500, or a connection
// broken before the answer came, each as likely. Like fault, the decision
// hashes the seed, the call and how many such calls came before.
func (s *Sim) lostAnswer(c Call) error {
	if c.Actor != ActorKGC {
		return nil
	}
	h, hit := s.draw("answer "+c.Verb+" "+c.Resource.String()+" "+c.Name, func() float64 { return s.LostAnswerRate })
	if !hit {
		return nil
	}
	s.mu.Lock()
	s.lostAnswers++
	s.mu.Unlock()
	switch (h / 10000) % 3 {
	case 0:
		return apierrors.NewTimeoutError("the server was unable to return a response in the time allotted, but may still be processing the request", 0)
	case 1:
		return apierrors.NewInternalError(errors.New("injected after the write"))
	}
	return &url.Error{Op: "Patch", URL: "https://sim/" + c.Resource.String() + "/" + c.Name, Err: io.ErrUnexpectedEOF}
}

// draw counts one more call under key and decides whether it draws a
// fault at the rate rateOf reads (under mu): the decision hashes the seed,
// the key and how many such calls came before, so it does not depend on how
// the collector's goroutines interleave. h is the hash, for the fault's kind.
func (s *Sim) draw(key string, rateOf func() float64) (h uint64, hit bool) {
	s.mu.Lock()
	rate := rateOf()
	n := s.calls[key]
	s.calls[key] = n + 1
	s.mu.Unlock()
	if rate == 0 {
		return 0, false
	}
	f := fnv.New64a()
	fmt.Fprintf(f, "%d %s %d", s.Seed, key, n)
	h = f.Sum64()
	return h, float64(h%10000)/10000 < rate
}

// journalLeases is the resource of the orphan journal's Lease, for the
// faults of its writes.
var journalLeases = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// journalStore is the orphan journal's store as the collectors see it:
// the Sim's MemoryStore, whose writes that landed may be answered with an
// error (lostAnswer), as a Lease update's can.
type journalStore struct {
	*orphanlog.MemoryStore
	s *Sim
}

func (j journalStore) Save(ctx context.Context, entries map[types.UID]time.Time, version string) (string, error) {
	v, err := j.MemoryStore.Save(ctx, entries, version)
	if err != nil {
		return v, err
	}
	if err := j.s.lostAnswer(Call{Actor: ActorKGC, Verb: "update", Resource: journalLeases, Name: "orphan-journal"}); err != nil {
		j.s.Srv.trace("fault: kgc's update of the orphan journal landed; its answer lost: %v", err)
		return "", err
	}
	return v, nil
}

// fault fails collector calls at FaultRate. The decision hashes the seed,
// the call and how many such calls came before, so it does not depend on
// how the collector's goroutines interleave calls to different objects.
func (s *Sim) fault(c Call) error {
	if c.Actor != ActorKGC {
		return nil
	}
	key := c.Verb + " " + c.Resource.String() + " " + c.Name
	h, hit := s.draw(key, func() float64 { return s.FaultRate })
	if !hit {
		return nil
	}
	var err error = apierrors.NewInternalError(errors.New("injected"))
	if h%2 == 0 {
		err = apierrors.NewTooManyRequests("injected", 1)
	}
	s.Srv.trace("fault: kgc's %s answered %s", strings.TrimSpace(key), apierrors.ReasonForError(err))
	return err
}

// Step records one scheduler step in the trace.
func (s *Sim) Step(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	s.Srv.CommitSeen()
	s.mu.Lock()
	s.steps = append(s.steps, line)
	s.log = append(s.log, fmt.Sprintf("%3d %s", len(s.steps), line))
	s.mu.Unlock()
}

// Violations returns the safety violations seen so far that no documented
// limit covers.
func (s *Sim) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// Limits returns the instances of documented limits seen so far
// (Violation.Limit).
func (s *Sim) Limits() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.limits)
}

// Start starts a collector on the server.
func (s *Sim) Start() error {
	if s.coll != nil {
		return errors.New("collector already running")
	}
	pages := discovery.PageLister(s.Srv.Lister())
	if !s.Streaming {
		pages = discovery.PagesOnly(pages)
	}
	cfg := collector.Config{
		Metadata:     s.Srv.Client(ActorKGC),
		Pages:        pages,
		Discovery:    s.Srv,
		Mapper:       s.mapper,
		Workers:      s.Workers,
		Ignored:      []schema.GroupResource{{Resource: "events"}},
		ResyncPeriod: s.ResyncPeriod,
		UnlistedHold: s.UnlistedHold,
		Clock:        s.Clock,
		OrphanStore:  journalStore{s.Journal, s},
		OrphanTTL:    s.OrphanTTL,
	}
	if cfg.Breaker = s.newBreaker(); cfg.Breaker != nil {
		cfg.OnTrip = s.tripped
	}
	if s.Srv.listsHeld() {
		// A held first list neither syncs nor fails: the workers start
		// after SyncTimeout, which runs on the real clock. The list stays
		// held until the scheduler acts, and the scheduler waits for the
		// workers (Settle), so they always start with it still held.
		cfg.SyncTimeout = 200 * time.Millisecond
	}
	if s.Configure != nil {
		s.Configure(&cfg)
	}
	c, err := collector.New(cfg)
	if err != nil {
		return err
	}
	s.Srv.ResetSeen()
	s.Srv.mu.Lock()
	// The hold the limit is checked against is the Sim's, not one a
	// test's Configure set (a test switching the hold off wants the
	// releases flagged).
	s.Srv.UnlistedHold = s.UnlistedHold
	s.Srv.OrphanTTL = s.OrphanTTL
	s.Srv.ReleasedUnlisted = func(owner types.UID) (string, []string, time.Duration, bool) {
		_, released := c.Held()
		for i := len(released) - 1; i >= 0; i-- {
			if h := released[i]; h.Owner.UID == owner {
				return h.Finalizer, h.Unlisted, h.Released.Sub(h.Since), true
			}
		}
		return "", nil, 0, false
	}
	s.Srv.mu.Unlock()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	s.coll, s.cancel, s.done = c, cancel, make(chan error, 1)
	go func() { s.done <- c.Run(ctx) }()
	return nil
}

// listsBy describes how the collectors Start starts list.
func (s *Sim) listsBy() string {
	if s.Streaming {
		return "lists by streaming"
	}
	return "lists by pages"
}

// Stop stops the collector and waits for it to end.
func (s *Sim) Stop() error {
	if s.coll == nil {
		return nil
	}
	s.cancel()
	defer func() { s.coll = nil }()
	select {
	case err := <-s.done:
		return err
	case <-time.After(20 * time.Second):
		return errors.New("collector did not stop within 20s")
	}
}

// Restart stops the collector and starts a new one on the same server.
func (s *Sim) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	return s.Start()
}

// Collector returns the running collector.
func (s *Sim) Collector() *collector.Collector { return s.coll }

// quiescent reports whether the collector has nothing to do until the
// scheduler acts: idle, and every monitor watching or backing off.
func (s *Sim) quiescent() bool {
	if s.coll == nil {
		return true
	}
	if s.Clock.Undrained() || !s.coll.Idle() {
		return false
	}
	for gvr := range s.coll.MonitorStatus() {
		if !s.Srv.settled(gvr) {
			return false
		}
	}
	return true
}

// why describes what keeps the collector from quiescence.
func (s *Sim) why() string {
	if s.coll == nil {
		return "no collector"
	}
	var b []string
	if !s.coll.Idle() {
		b = append(b, "collector busy")
	}
	for gvr, st := range s.coll.MonitorStatus() {
		if !s.Srv.settled(gvr) {
			b = append(b, fmt.Sprintf("monitor %s neither watching nor backing off (%s, %v)", gvr, st.State(), st.LastError))
		}
	}
	return strings.Join(b, "; ")
}

// settleTimeout bounds the real time one step may take to become quiet.
const settleTimeout = 20 * time.Second

// Settle waits until the collector is quiescent. Quiescence must hold for
// a few consecutive probes: a goroutine between taking work and showing it
// (a worker between Get and its bookkeeping) is invisible for an instant.
func (s *Sim) Settle() error {
	deadline := time.Now().Add(settleTimeout)
	quiet := 0
	for quiet < 4 {
		if time.Now().After(deadline) {
			return fmt.Errorf("collector not quiescent after %s (seed %d): %s", settleTimeout, s.Seed, s.why())
		}
		if s.quiescent() {
			quiet++
			runtime.Gosched()
			if quiet > 1 {
				time.Sleep(50 * time.Microsecond)
			}
			continue
		}
		quiet = 0
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// Deliver delivers the next event of gr's watch and settles.
func (s *Sim) Deliver(gr schema.GroupResource) error {
	s.Step("deliver %s", gr.String())
	if _, err := s.Srv.Deliver(gr); err != nil {
		return err
	}
	return s.Settle()
}

// DeliverAll delivers every pending event, across resources in an order
// the seed picks (in order within each resource), settling after each.
func (s *Sim) DeliverAll() error {
	for range 10000 {
		p := s.Srv.Pending()
		if len(p) == 0 {
			return nil
		}
		if err := s.Deliver(p[s.rng.IntN(len(p))]); err != nil {
			return err
		}
	}
	return errors.New("watch events keep coming")
}

// Advance moves the fake clock to the next pending timer (or by d when
// none is pending or it is further) and settles. The step to the next
// timer is rounded up to 5ms·2^k: the workqueues' backoff falls on that
// grid exactly, and the monitors' jittered backoff (800ms·[1, 1.5), the
// jitter from the global math/rand) always rounds to the same step, so
// the jitter does not change the schedule.
func (s *Sim) Advance(d time.Duration) error {
	if at, ok := s.Clock.Next(); ok {
		if n := at.Sub(s.Clock.Now()); n < d {
			g := time.Duration(0)
			if n > 0 {
				g = 5 * time.Millisecond
				for g < n {
					g *= 2
				}
			}
			d = min(g, d)
		}
	}
	s.Step("advance %s", d)
	s.Clock.Step(d)
	return s.Settle()
}

// Jump moves the fake clock by d at once, firing every timer due by then
// (late, together), and settles: a stretch of time in which the collector
// was slow, long enough for --unlisted-hold to pass in one step.
func (s *Sim) Jump(d time.Duration) error {
	s.Step("jump %s", d)
	s.Clock.Step(d)
	return s.Settle()
}

// Quiesce heals nothing; it delivers every event and advances time until
// the collector has had at least two resync periods with no write, no
// pending event and no pending timer, or the fake-time budget runs out.
// It settles first: what came before (Heal releasing held lists and
// healing resources, which does not settle) is a step like any other,
// and the checker counts an event as seen once delivered, which holds
// only if no decision of the collector predates the delivery.
func (s *Sim) Quiesce(budget time.Duration) error {
	if err := s.Settle(); err != nil {
		return err
	}
	start := s.Clock.Now()
	quietSince := s.Clock.Now()
	lastRV := s.Srv.RV()
	for s.Clock.Since(start) < budget {
		if err := s.DeliverAll(); err != nil {
			return err
		}
		if s.resumeBreaker() {
			if err := s.Settle(); err != nil {
				return err
			}
		}
		if rv := s.Srv.RV(); rv != lastRV {
			lastRV, quietSince = rv, s.Clock.Now()
		}
		if _, timers := s.Clock.Next(); !timers && s.Clock.Since(quietSince) >= 2*s.ResyncPeriod+time.Second {
			return nil
		}
		if err := s.Advance(s.ResyncPeriod); err != nil {
			return err
		}
	}
	return nil
}

// Check returns the work the reference model says the collector still
// owes (empty when the state is a fixpoint: L1).
func (s *Sim) Check() []string {
	objs, kinds := s.Srv.Snapshot()
	return OwedWork(objs, kinds)
}

// Trace returns the schedule and the state changes it caused; when focus is
// non-empty, only the server lines mentioning one of focus (and every step
// line) are kept.
func (s *Sim) Trace(focus ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.log {
		if len(focus) > 0 && strings.HasPrefix(l, "    ") && !strings.Contains(l, "VIOLATION") {
			keep := false
			for _, f := range focus {
				if strings.Contains(l, f) {
					keep = true
					break
				}
			}
			if !keep {
				continue
			}
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// RV returns the server's current resourceVersion.
func (s *Server) RV() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv
}

// ---- client actions ----

// Ref returns a reference to o.
func Ref(kind *Kind, m *metav1.ObjectMeta, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: schema.GroupVersion{Group: kind.Group, Version: kind.Preferred}.String(),
		Kind:       kind.Kind, Name: m.Name, UID: m.UID, BlockOwnerDeletion: &block,
	}
}

// KindOf returns the kind of gr.
func (s *Server) KindOf(gr schema.GroupResource) *Kind {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kinds[gr].Kind
}

// Obj is a handle on a stored object.
type Obj struct {
	GR        schema.GroupResource
	Namespace string
	Name      string
	UID       types.UID
}

func (o Obj) String() string {
	if o.Namespace == "" {
		return fmt.Sprintf("%s %s[%s]", o.GR.Resource, o.Name, o.UID)
	}
	return fmt.Sprintf("%s %s/%s[%s]", o.GR.Resource, o.Namespace, o.Name, o.UID)
}

func (o Obj) gvr(s *Server) schema.GroupVersionResource {
	return o.GR.WithVersion(s.KindOf(o.GR).Preferred)
}

// OwnerRef is a reference to o as a client writes it.
func (s *Sim) OwnerRef(o Obj, block bool) metav1.OwnerReference {
	k := s.Srv.KindOf(o.GR)
	return Ref(k, &metav1.ObjectMeta{Name: o.Name, UID: o.UID}, block)
}

// Create creates an object as a client.
func (s *Sim) Create(gr schema.GroupResource, ns, name string, finalizers []string, refs ...metav1.OwnerReference) (Obj, error) {
	m, err := s.Srv.Create(gr, metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: finalizers, OwnerReferences: refs})
	if err != nil {
		return Obj{}, err
	}
	o := Obj{GR: gr, Namespace: m.Namespace, Name: name, UID: m.UID}
	s.Step("create %s refs=%s fin=%v", o, refsString(refs), finalizers)
	return o, nil
}

// Delete deletes an object as a client ("" policy: none given).
func (s *Sim) Delete(o Obj, policy metav1.DeletionPropagation) error {
	s.Step("client delete %s policy=%q", o, policy)
	opts := metav1.DeleteOptions{}
	if policy != "" {
		opts.PropagationPolicy = &policy
	}
	err := s.Srv.delete(ActorClient, o.gvr(s.Srv), o.Namespace, o.Name, opts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Patch merge-patches an object's metadata as a client.
func (s *Sim) Patch(o Obj, what string, metadata map[string]any) error {
	s.Step("client patch %s: %s", o, what)
	data, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return err
	}
	_, err = s.Srv.patch(ActorClient, o.gvr(s.Srv), o.Namespace, o.Name, types.MergePatchType, data)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Annotate bumps an object's resourceVersion with an annotation.
func (s *Sim) Annotate(o Obj) error {
	s.mu.Lock()
	n := len(s.steps)
	s.mu.Unlock()
	return s.Patch(o, "annotate", map[string]any{"annotations": map[string]string{"sim/tick": fmt.Sprint(n)}})
}

// Get returns an object's metadata, or nil when it is gone.
func (s *Sim) Get(o Obj) *metav1.ObjectMeta {
	s.Srv.mu.Lock()
	defer s.Srv.mu.Unlock()
	m := s.Srv.objects[objKey{o.GR, o.Namespace, o.Name}]
	if m == nil || m.UID != o.UID {
		return nil
	}
	return m.DeepCopy()
}

// SetDown makes a resource's LIST and WATCH fail (503) or heals it.
func (s *Sim) SetDown(gr schema.GroupResource, down bool) {
	s.Step("resource %s down=%v", gr.String(), down)
	s.Srv.mu.Lock()
	s.Srv.kinds[gr].down = down
	s.Srv.mu.Unlock()
}

// HoldLists holds the collector's LISTs of gr before their next page, or
// releases them (HoldLists of the server).
func (s *Sim) HoldLists(gr schema.GroupResource, hold bool) {
	s.Step("resource %s: collector LISTs held=%v", gr.String(), hold)
	s.Srv.HoldLists(gr, hold)
}

// FailLists makes the collector's next n LISTs of gr answer 429.
func (s *Sim) FailLists(gr schema.GroupResource, n int) {
	s.Step("resource %s: next %d collector LISTs fail", gr.String(), n)
	s.Srv.mu.Lock()
	s.Srv.kinds[gr].failLists = n
	s.Srv.mu.Unlock()
}

// FailListPages makes the collector's next n LISTs of gr that continue a
// list (a second page on) answer 500: a list that fails part way.
func (s *Sim) FailListPages(gr schema.GroupResource, n int) {
	s.Step("resource %s: next %d collector LIST pages after the first fail", gr.String(), n)
	s.Srv.mu.Lock()
	s.Srv.kinds[gr].failPages = n
	s.Srv.mu.Unlock()
}

// FailStream makes the collector's next streaming list of gr fail with
// fault after k initial events (Server.FailStream).
func (s *Sim) FailStream(gr schema.GroupResource, fault StreamFault, k int) {
	s.Step("resource %s: next collector streaming list fails: %s after %d objects", gr.String(), fault, k)
	s.Srv.FailStream(gr, fault, k)
}

// Expire ends gr's watches with 410 and settles.
func (s *Sim) Expire(gr schema.GroupResource) error {
	s.Step("expire watch %s", gr.String())
	if err := s.Srv.Expire(gr); err != nil {
		return err
	}
	return s.Settle()
}

// SwitchVersion makes version the preferred one of gr (and served).
func (s *Sim) SwitchVersion(gr schema.GroupResource, version string) {
	s.Step("resource %s: preferred version %s", gr.String(), version)
	s.Srv.mu.Lock()
	r := s.Srv.kinds[gr]
	r.Preferred = version
	if !slices.Contains(r.Versions, version) {
		r.Versions = append(r.Versions, version)
	}
	s.Srv.mu.Unlock()
}

// Unserve deletes a CRD-like resource: its objects go (as the apiserver's
// CRD finalizer deletes them), and its LISTs answer 404 while discovery
// still shows it (gone404) or it leaves discovery too.
func (s *Sim) Unserve(gr schema.GroupResource, stillDiscovered bool) {
	s.Step("resource %s: deleted (still in discovery: %v)", gr.String(), stillDiscovered)
	s.Srv.mu.Lock()
	defer s.Srv.mu.Unlock()
	r := s.Srv.kinds[gr]
	var keys []objKey
	for k := range s.Srv.objects {
		if k.gr == gr {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].namespace+"/"+keys[i].name < keys[j].namespace+"/"+keys[j].name })
	s.deleteCRD(gr, false) // kube-apiserver deletes the instances of a CRD being deleted
	for _, k := range keys {
		m := s.Srv.objects[k].DeepCopy()
		m.Finalizers = nil
		m.DeletionTimestamp = &metav1.Time{Time: s.Clock.Now()}
		s.Srv.put(ActorClient, k, m, false)
	}
	s.deleteCRD(gr, true)
	r.list404 = stillDiscovered
	r.served = stillDiscovered
}

// Serve (re)creates a CRD-like resource: served and listable.
func (s *Sim) Serve(gr schema.GroupResource) {
	s.Step("resource %s: served", gr.String())
	s.Srv.mu.Lock()
	r := s.Srv.kinds[gr]
	r.served, r.list404 = true, false
	s.Srv.mu.Unlock()
	s.createCRD(gr)
}

// Heal ends every injected fault: resources up, faults off, resources
// still in discovery but answering 404 leave discovery.
func (s *Sim) Heal() {
	s.Step("heal")
	s.mu.Lock()
	s.FaultRate, s.LostAnswerRate = 0, 0
	s.mu.Unlock()
	s.Srv.mu.Lock()
	var held []schema.GroupResource
	for gr, r := range s.Srv.kinds {
		r.down, r.failLists, r.failPages, r.stream = false, 0, 0, nil
		if r.list404 {
			r.list404, r.served = false, false
		}
		if r.holdList {
			held = append(held, gr)
		}
	}
	s.Srv.mu.Unlock()
	for _, gr := range held {
		s.Srv.HoldLists(gr, false)
	}
	s.resumeBreaker()
}
