package breaker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The annotations on kgc's Lease that carry the breaker's state across
// restarts and leaders, and the operator's resume.
const (
	// AnnotationTrips holds the trips not resumed yet, as JSON (a list of
	// Trip). kgc writes it when a signal trips.
	AnnotationTrips = "kgc.dev/deletions-held"
	// AnnotationResume holds a time (RFC 3339): every trip at or before it
	// is resumed. An operator writes it (`kgc breaker resume` writes the
	// latest trip's own time, so that clocks need not agree).
	AnnotationResume = "kgc.dev/resume-deletions"
)

// State is what kgc's Lease says about the breaker.
type State struct {
	// Trips recorded, resumed or not.
	Trips []Trip
	// Resumed: the resume time (zero: never).
	Resumed time.Time
}

// Active returns the trips not resumed.
func (s State) Active() []Trip {
	var out []Trip
	for _, t := range s.Trips {
		if t.At.After(s.Resumed) {
			out = append(out, t)
		}
	}
	return out
}

// ErrUnreadable wraps an annotation of the breaker's that cannot be
// parsed: an operator must fix or remove it (kgc does not guess which
// trips it meant).
var ErrUnreadable = errors.New("unreadable deletion breaker annotation")

// ParseState reads the breaker's annotations.
func ParseState(annotations map[string]string) (State, error) {
	var st State
	var errs []error
	if v := annotations[AnnotationTrips]; v != "" {
		if err := json.Unmarshal([]byte(v), &st.Trips); err != nil {
			errs = append(errs, fmt.Errorf("%w %s: %w", ErrUnreadable, AnnotationTrips, err))
		}
	}
	if v := annotations[AnnotationResume]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w %s: %w", ErrUnreadable, AnnotationResume, err))
		}
		st.Resumed = t
	}
	return st, errors.Join(errs...)
}

// LeaseStore keeps the breaker's state on a coordination.k8s.io Lease:
// kgc's leader-election Lease when there is one. Without leader election
// the same Lease (by the same flags) is used, created without a holder
// when a trip must be recorded and it does not exist.
type LeaseStore struct {
	Client          coordinationv1client.LeasesGetter
	Namespace, Name string
}

// Load reads the state and the Lease (nil when it does not exist).
func (s *LeaseStore) Load(ctx context.Context) (State, *coordinationv1.Lease, error) {
	l, err := s.Client.Leases(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return State{}, nil, nil
	}
	if err != nil {
		return State{}, nil, err
	}
	st, err := ParseState(l.Annotations)
	return st, l, err
}

// Record adds trips to the Lease's AnnotationTrips (one per signal and
// resource, the latest), dropping the resumed ones. An annotation it cannot
// parse fails it (ErrUnreadable) rather than being replaced. It updates the Lease with its
// resourceVersion (a conflict with a renewal is retried), so that nothing
// else on it is lost; the leader elector's next renewal meets a conflict
// once and re-reads it.
func (s *LeaseStore) Record(ctx context.Context, trips []Trip) (*coordinationv1.Lease, error) {
	var out *coordinationv1.Lease
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := s.Client.Leases(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		switch {
		case create:
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
		case err != nil:
			return err
		}
		st, err := ParseState(l.Annotations)
		if err != nil {
			// Not replaced: it may hold trips an earlier kgc made, and the
			// workers of this one wait for it to be fixed (Sync.Load).
			return err
		}
		merged := mergeTrips(st.Active(), trips)
		data, err := json.Marshal(merged)
		if err != nil {
			return err
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationTrips] = string(data)
		if create {
			out, err = s.Client.Leases(s.Namespace).Create(ctx, l, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(coordinationv1.Resource("leases"), s.Name, err)
			}
			return err
		}
		out, err = s.Client.Leases(s.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	return out, err
}

// mergeTrips keeps the latest trip of each signal and resource, in the
// order of Signals, then of resources.
func mergeTrips(a, b []Trip) []Trip {
	by := map[tripKey]Trip{}
	for _, t := range slices.Concat(a, b) {
		if cur, ok := by[t.key()]; !ok || cur.At.Before(t.At) {
			by[t.key()] = t
		}
	}
	out := make([]Trip, 0, len(by))
	for _, t := range by {
		out = append(out, t)
	}
	slices.SortFunc(out, func(x, y Trip) int {
		if c := cmp.Compare(slices.Index(Signals, x.Signal), slices.Index(Signals, y.Signal)); c != 0 {
			return c
		}
		return cmp.Compare(x.Resource, y.Resource)
	})
	return out
}

// Resume writes AnnotationResume on the Lease: at, or when at is zero the
// time of the latest trip recorded there (kgc's own clock). It returns the
// Lease's state before and the time written. A Lease without trips is
// left alone (resumed is zero).
func (s *LeaseStore) Resume(ctx context.Context, at time.Time) (before State, resumed time.Time, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := s.Client.Leases(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		before, err = ParseState(l.Annotations)
		if err != nil {
			return err
		}
		resumed = at
		if resumed.IsZero() {
			for _, t := range before.Active() {
				if t.At.After(resumed) {
					resumed = t.At
				}
			}
			if resumed.IsZero() {
				return nil
			}
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationResume] = resumed.UTC().Format(time.RFC3339Nano)
		_, err = s.Client.Leases(s.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	return before, resumed, err
}

// Sync keeps b and the Lease in step: Load reads the trips an earlier kgc
// recorded before the first decision, and Run records every trip b makes
// (Breaker.Unrecorded) and applies the resumes an operator writes there,
// and the trips another kgc records there.
type Sync struct {
	Breaker  *Breaker
	Store    *LeaseStore
	Interval time.Duration
	// OnRestore is told the trips applied from the Lease: at start (Load),
	// and those another kgc recorded since (Run).
	OnRestore func(lease *coordinationv1.Lease, trips []Trip)
	// OnResume is told what a resume released.
	OnResume func(release []types.UID, resumed []Trip, overflowed bool)
	// OnRecord is told the Lease a record wrote.
	OnRecord func(lease *coordinationv1.Lease)
	// StopTimeout bounds the attempts Run makes, once its context is
	// done, to record the trips not recorded yet (DefaultStopTimeout).
	StopTimeout time.Duration

	kick chan struct{}
}

// Load reads the Lease and applies the trips recorded there (none when it
// does not exist). It fails when the Lease cannot be read, or its
// annotations parsed (ErrUnreadable): the caller decides nothing until it
// can, since starting untripped would let a restart delete what an
// earlier kgc held.
func (s *Sync) Load(ctx context.Context) error {
	st, l, err := s.Store.Load(ctx)
	if err != nil {
		return err
	}
	if applied := s.Breaker.Restore(st.Trips, st.Resumed); len(applied) > 0 && s.OnRestore != nil {
		s.OnRestore(l, applied)
	}
	return nil
}

// Kick asks Run to record new trips now rather than at its next tick (a
// Sync not made by NewSync records at its ticks only).
func (s *Sync) Kick() {
	select {
	case s.kick <- struct{}{}:
	default: // a record is already due: it records the breaker's state, this trip included
	}
}

// NewSync returns a Sync of b on store (see the fields for the rest).
func NewSync(b *Breaker, store *LeaseStore) *Sync {
	return &Sync{Breaker: b, Store: store, kick: make(chan struct{}, 1)}
}

// Record writes the trips not recorded yet, if any, and returns whether
// every trip is recorded.
func (s *Sync) Record(ctx context.Context) error {
	trips, version, ok := s.Breaker.Unrecorded()
	if !ok {
		return nil
	}
	l, err := s.Store.Record(ctx, trips)
	if err != nil {
		return err
	}
	s.Breaker.Recorded(version)
	if s.OnRecord != nil {
		s.OnRecord(l)
	}
	return nil
}

// DefaultStopTimeout is how long Run, stopping, keeps trying to record a
// trip not recorded yet: well within a Pod's default grace period (30 s).
const DefaultStopTimeout = 10 * time.Second

// stopRetryEvery is how often Run, stopping, tries the record again.
const stopRetryEvery = 500 * time.Millisecond

// Run records trips and polls for resumes until ctx is done. A trip is
// written as soon as it is made (Kick), and retried every interval until
// it is durable. When ctx is done with a trip not recorded yet, Run keeps
// trying for StopTimeout before it returns (recordAtStop).
func (s *Sync) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	interval := s.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.recordAtStop(ctx)
			return
		case <-s.kick:
		case <-tick.C:
		}
		if err := s.Record(ctx); errors.Is(err, ErrUnreadable) {
			logger.Error(err, "Recording the deletion breaker's trip on the Lease; retrying. Until it is recorded a restart of kgc forgets it", "lease", s.Store.Namespace+"/"+s.Store.Name, "retryIn", interval,
				"whatToDo", "fix or remove the annotation "+AnnotationTrips+" (or "+AnnotationResume+") on the Lease: kgc does not replace trips it cannot read")
		} else if err != nil {
			logger.Error(err, "Recording the deletion breaker's trip on the Lease; retrying. Until it is recorded a restart of kgc forgets it", "lease", s.Store.Namespace+"/"+s.Store.Name, "retryIn", interval)
		}
		st, l, err := s.Store.Load(ctx)
		if err != nil {
			logger.V(2).Info("Reading the deletion breaker's Lease", "err", err.Error())
			continue
		}
		if !st.Resumed.IsZero() {
			release, resumed, overflowed := s.Breaker.Resume(st.Resumed)
			if len(resumed) > 0 && s.OnResume != nil {
				s.OnResume(release, resumed, overflowed)
			}
		}
		// Trips recorded there since this kgc read the Lease at start
		// apply too: a leader that lost its Lease records a trip while it
		// stops (recordAtStop), possibly after the new leader's first
		// read. Applying a trip only holds more.
		if applied := s.Breaker.Restore(st.Trips, time.Time{}); len(applied) > 0 && s.OnRestore != nil {
			s.OnRestore(l, applied)
		}
	}
}

// recordAtStop makes the last attempts to record the trips not recorded
// yet, when Run stops: kgc stopping (a rollout, a SIGTERM) or losing its
// leadership. The Lease is the only thing the next kgc, or the next
// leader, reads to start tripped: it starts with an empty graph, so the
// evidence behind a vanished-resource or unobserved-owners trip (objects
// this kgc held that went, owners it never saw) is not there for it to
// see again, and it would make the deletions this one held. Run is
// stopped only once the collector's workers have drained (pkg/kgc), so no
// trip comes after this; kgc releases its leader-election Lease only once
// the collector returned; and a leader that took over meanwhile (this one
// lost its Lease) applies a trip recorded here within its poll interval
// (Run). What is left is a crash (SIGKILL, OOM) between the trip and its
// first write, which Kick makes at once: one read and one update of the
// Lease. A trip that still cannot be written is logged with the
// annotation an operator can write by hand.
func (s *Sync) recordAtStop(ctx context.Context) {
	if s.Breaker.Durable() {
		return
	}
	logger := klog.FromContext(ctx)
	timeout := s.StopTimeout
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	lease := s.Store.Namespace + "/" + s.Store.Name
	for {
		err := s.Record(stopCtx)
		if err == nil {
			logger.Info("Recorded the deletion breaker's trip on the Lease while stopping", "lease", lease)
			return
		}
		select {
		case <-time.After(stopRetryEvery):
			continue
		case <-stopCtx.Done():
		}
		trips, _, _ := s.Breaker.Unrecorded()
		value, _ := json.Marshal(trips)
		logger.Error(err, "Stopping with a deletion breaker trip not recorded on the Lease: the next kgc, or the next leader, will not start tripped, and will make the deletions this one held",
			"lease", lease, "triedFor", timeout, "annotation", AnnotationTrips, "value", string(value),
			"whatToDo", "before kgc runs again, write these trips on the Lease as the annotation "+AnnotationTrips+
				" (merged with any trips already there), or keep kgc stopped until the cause of the trip is fixed")
		return
	}
}
