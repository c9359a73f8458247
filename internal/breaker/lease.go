package breaker

import (
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

// ParseState reads the breaker's annotations.
func ParseState(annotations map[string]string) (State, error) {
	var st State
	var errs []error
	if v := annotations[AnnotationTrips]; v != "" {
		if err := json.Unmarshal([]byte(v), &st.Trips); err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationTrips, err))
		}
	}
	if v := annotations[AnnotationResume]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationResume, err))
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

// Record adds trips to the Lease's AnnotationTrips (one per signal, the
// latest), dropping the resumed ones. It updates the Lease with its
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
		st, _ := ParseState(l.Annotations) // a broken annotation is replaced
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

// mergeTrips keeps the latest trip of each signal.
func mergeTrips(a, b []Trip) []Trip {
	by := map[Signal]Trip{}
	for _, t := range slices.Concat(a, b) {
		if cur, ok := by[t.Signal]; !ok || cur.At.Before(t.At) {
			by[t.Signal] = t
		}
	}
	out := make([]Trip, 0, len(by))
	for _, s := range Signals {
		if t, ok := by[s]; ok {
			out = append(out, t)
		}
	}
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

// Sync keeps b and the Lease in step until ctx is done: trips b reports
// on tripped are recorded on the Lease, and a resume found there is
// applied to b (onResume gets what it released). It reads the Lease once
// at start, applying the trips an earlier kgc recorded (onRestore), then
// every interval.
type Sync struct {
	Breaker  *Breaker
	Store    *LeaseStore
	Interval time.Duration
	// OnRestore is told the trips applied from the Lease at start.
	OnRestore func(lease *coordinationv1.Lease, trips []Trip)
	// OnResume is told what a resume released.
	OnResume func(release []types.UID, resumed []Trip, overflowed bool)
	// Tripped receives trips to record (buffered by the caller).
	Tripped <-chan Trip
}

// Start reads the Lease once (a failure is logged, not fatal: the breaker
// then starts untripped, as it would without a Lease).
func (s *Sync) Start(ctx context.Context) {
	st, l, err := s.Store.Load(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the deletion breaker's state from the Lease", "lease", s.Store.Namespace+"/"+s.Store.Name)
	}
	if applied := s.Breaker.Restore(st.Trips, st.Resumed); len(applied) > 0 && s.OnRestore != nil {
		s.OnRestore(l, applied)
	}
}

// Run records trips and polls for resumes until ctx is done.
func (s *Sync) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	interval := s.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var pending []Trip
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-s.Tripped:
			pending = append(pending, t)
		case <-tick.C:
		}
		if len(pending) > 0 {
			if _, err := s.Store.Record(ctx, pending); err != nil {
				logger.Error(err, "Recording the deletion breaker's trip on the Lease; retrying", "lease", s.Store.Namespace+"/"+s.Store.Name)
			} else {
				pending = nil
			}
		}
		st, _, err := s.Store.Load(ctx)
		if err != nil {
			logger.V(2).Info("Reading the deletion breaker's Lease", "err", err.Error())
			continue
		}
		if st.Resumed.IsZero() {
			continue
		}
		release, resumed, overflowed := s.Breaker.Resume(st.Resumed)
		if len(resumed) > 0 && s.OnResume != nil {
			s.OnResume(release, resumed, overflowed)
		}
	}
}
