package kgc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
	"github.com/kgc-dev/kgc/internal/server"
)

// BreakerOptions configure the circuit breaker for mass deletions: kgc
// stops the deletions it is about to make because an owner is gone, until
// an operator resumes, when it has evidence of a fault — a restore, an
// API answering wrongly, a rollback of the API's storage — never for the
// volume of ordinary deletions. See
// docs/operator/breaker.md and docs/semantics.md ("Holds").
type BreakerOptions struct {
	// Window over which UnobservedOwners and the dangling fraction count.
	// Default 10 minutes.
	Window time.Duration
	// UnobservedOwners: how many distinct owners kgc never observed alive
	// (a quorum read found nothing, or another object, at a UID the graph
	// never held) the deletions of objects that appeared while kgc watched
	// may rest on in one window; each owner counts once however many
	// dependents it has, and objects already there when kgc started are
	// not counted. 0 turns the signal off.
	UnobservedOwners int
	// VanishedMinimum: how many objects of one resource a complete list
	// must find gone, with none of their deletions seen coming (no DELETED
	// event, no deletionTimestamp, no terminating namespace, no CRD being
	// deleted), to hold the deletions resting on owners of that resource.
	// 0 turns the signal off.
	VanishedMinimum int
	// Rollback holds every deletion resting on a gone owner once an
	// object is observed in a state its own history cannot reach (its
	// resourceVersion went back, its deletionTimestamp went away, it came
	// back after kgc saw it deleted): the API's storage was rolled back.
	Rollback bool
	// DanglingFraction and DanglingMinimum: the breaker trips when the
	// owners found gone in one window whose deletion kgc did not observe
	// (distinct owners, each with a dependent to delete) would exceed both
	// this fraction of the graph and the minimum. Volume is no evidence of
	// a fault, so DanglingFraction is 0 (off) by default.
	DanglingFraction float64
	DanglingMinimum  int
	// LeaseNamespace and LeaseName name the coordination.k8s.io Lease on
	// which trips are recorded (so that a restart does not delete up to
	// the thresholds again) and resumes are read (the annotation
	// kgc.dev/resume-deletions; `kgc breaker resume`). `kgc run` uses its
	// leader-election Lease; it is created, without a holder, when a trip
	// must be recorded and it does not exist. A trip not recorded yet when
	// Run's context ends is tried for 10 more seconds before Run returns.
	// Empty LeaseName: the state lives in memory only, and
	// Collector.ResumeDeletions resumes.
	LeaseNamespace, LeaseName string
	// PollInterval: how often the Lease is read for a resume. Default 5s.
	PollInterval time.Duration
}

// DefaultBreakerOptions returns the breaker `kgc run` starts with (without
// a Lease).
func DefaultBreakerOptions() BreakerOptions {
	d := breaker.DefaultConfig()
	return BreakerOptions{Window: d.Window, UnobservedOwners: d.UnobservedLimit, VanishedMinimum: d.VanishedMinimum,
		Rollback: d.Rollback, DanglingFraction: d.DanglingFraction, DanglingMinimum: d.DanglingMinimum}
}

// Validate reports what is wrong with o.
func (o BreakerOptions) Validate() error {
	errs := o.config().Validate()
	if (o.LeaseName == "") != (o.LeaseNamespace == "") {
		errs = append(errs, fmt.Errorf("the breaker's Lease needs both a namespace and a name, got %q and %q", o.LeaseNamespace, o.LeaseName))
	}
	return errors.Join(errs...)
}

func (o *BreakerOptions) config() breaker.Config {
	return breaker.Config{Window: o.Window, UnobservedLimit: o.UnobservedOwners, VanishedMinimum: o.VanishedMinimum,
		Rollback: o.Rollback, DanglingFraction: o.DanglingFraction, DanglingMinimum: o.DanglingMinimum}
}

// leaseIdentity is the object the breaker's Event is recorded on.
func (o *BreakerOptions) leaseIdentity(l *coordinationv1.Lease) rules.Identity {
	id := rules.Identity{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Namespace: o.LeaseNamespace, Name: o.LeaseName}
	if l != nil {
		id.UID = l.UID
	}
	return id
}

// breakerState reports the breaker for the metrics.
func (c *Collector) breakerState() metrics.BreakerState {
	st := metrics.BreakerState{Held: map[string]int{}}
	if b := c.c.Breaker(); b != nil {
		s := b.Status(c.c.Graph().Len(), 0)
		tripped := map[breaker.Signal]bool{}
		for _, t := range s.Trips {
			tripped[t.Signal] = true
		}
		for _, sig := range breaker.Signals {
			st.Signals = append(st.Signals, metrics.BreakerSignal{Signal: string(sig), Tripped: tripped[sig], Counted: s.Counts[sig], Limit: s.Limits[sig]})
		}
		for sig, n := range b.HeldBySignal() {
			st.Held[string(sig)] = n
		}
	} else {
		// Off: every signal is shown untripped with limit 0 (a limit of
		// 0 turns a signal off), so that the documented series exist
		// whether or not the breaker runs.
		for _, sig := range breaker.Signals {
			st.Signals = append(st.Signals, metrics.BreakerSignal{Signal: string(sig)})
		}
	}
	st.Held[metrics.HeldRestored] = len(c.c.RestoreHolds())
	return st
}

// onTrip says that the breaker tripped: a metric, an Event on the Lease,
// and the trip recorded there at once (the log line is the caller's).
func (c *Collector) onTrip(t breaker.Trip) {
	c.metrics.BreakerTripped(string(t.Signal))
	if c.breakerOpts.LeaseName != "" {
		c.recorder.Warning(c.breakerOpts.leaseIdentity(c.lease.Load()), "DeletionsHeld", fmt.Sprintf(
			"The deletion circuit breaker tripped (%s): %s. Deletions on that basis are held; resume with `kgc breaker resume` (annotation %s on this Lease).",
			t.Signal, t.Because(), breaker.AnnotationResume))
	}
	if c.bsync != nil {
		c.bsync.Kick()
	}
}

// newBreakerSync returns what keeps b and its Lease in step (nil when the
// breaker keeps its state in memory).
func (c *Collector) newBreakerSync(b *breaker.Breaker) *breaker.Sync {
	if c.breakerOpts.LeaseName == "" {
		return nil
	}
	s := breaker.NewSync(b, &breaker.LeaseStore{Client: c.coordination, Namespace: c.breakerOpts.LeaseNamespace, Name: c.breakerOpts.LeaseName})
	s.Interval = c.breakerOpts.PollInterval
	s.OnRecord = func(l *coordinationv1.Lease) { c.lease.Store(l) }
	return s
}

// loadBreaker returns what reads the trips an earlier kgc recorded before
// the collector's first decision (nil without a Lease).
func (c *Collector) loadBreaker() func(context.Context) error {
	if c.bsync == nil {
		return nil
	}
	return func(ctx context.Context) error {
		logger := klog.FromContext(ctx)
		c.bsync.OnRestore = func(l *coordinationv1.Lease, trips []breaker.Trip) {
			c.lease.Store(l)
			for _, t := range trips {
				logger.Error(nil, "Deletion circuit breaker tripped before this kgc started, or in another kgc, and not resumed (recorded on the Lease): holding deletions on this basis until an operator resumes",
					"signal", t.Signal, "resource", t.Resource, "trippedAt", t.At, "because", t.Because(), "lease", c.breakerOpts.LeaseNamespace+"/"+c.breakerOpts.LeaseName)
			}
		}
		return c.bsync.Load(ctx)
	}
}

// runBreaker keeps the breaker and its Lease in step until ctx is done
// (in the background): trips recorded as they happen, resumes applied.
// The Lease is read before the first decision by the collector itself
// (loadBreaker).
func (c *Collector) runBreaker(ctx context.Context) {
	if c.bsync == nil {
		return
	}
	logger := klog.FromContext(ctx)
	c.bsync.OnResume = func(release []types.UID, resumed []breaker.Trip, overflowed bool) {
		for _, t := range resumed {
			logger.Info("Deletion circuit breaker resumed by an operator", "signal", t.Signal, "resource", t.Resource, "trippedAt", t.At, "released", len(release))
		}
		c.c.ResumeHeld(ctx, release, overflowed)
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		c.bsync.Run(ctx)
	}()
}

// ResumeDeletions resumes the breaker's trips at or before at (the held
// objects are decided again) — for a Collector whose breaker keeps its
// state in memory (BreakerOptions.LeaseName empty). With a Lease, resume
// through the Lease instead (`kgc breaker resume`): a resume in memory
// would not survive a restart. It returns the trips resumed.
func (c *Collector) ResumeDeletions(ctx context.Context, at time.Time) []breaker.Trip {
	b := c.c.Breaker()
	if b == nil {
		return nil
	}
	release, resumed, overflowed := b.Resume(at)
	c.c.ResumeHeld(ctx, release, overflowed)
	return resumed
}

// Holds is what the collector holds (served at breaker.Path).
func (s source) Holds(limit int) breaker.Report {
	r := breaker.Report{HoldRestored: s.holdRestored, Lease: s.lease}
	if b := s.c.Breaker(); b != nil {
		st := b.Status(s.c.Graph().Len(), limit)
		r.Breaker = &st
	}
	r.Restored = s.c.RestoreHolds()
	if limit >= 0 && len(r.Restored) > limit {
		r.Restored = r.Restored[:limit]
	}
	return r
}

// breakerChecks are the /readyz?verbose lines of the holds: informational
// (a tripped breaker holds deletions; everything else works).
func (s source) breakerChecks() []server.Check {
	var out []server.Check
	if b := s.c.Breaker(); b != nil {
		st := b.Status(s.c.Graph().Len(), 0)
		tripped := map[breaker.Signal][]breaker.Trip{}
		for _, t := range st.Trips {
			tripped[t.Signal] = append(tripped[t.Signal], t)
		}
		for _, sig := range breaker.Signals {
			ch := server.Check{Name: "deletion-breaker:" + string(sig), Informational: true}
			var says []string
			for _, t := range tripped[sig] {
				says = append(says, fmt.Sprintf("tripped at %s: %s", t.At.UTC().Format(time.RFC3339), t.Because()))
			}
			if len(says) > 0 {
				if st.Unrecorded {
					says = append(says, "not recorded on the Lease yet: a restart now would forget it")
				}
				says = append(says, fmt.Sprintf("%d objects held; resume with `kgc breaker resume`", st.HeldTotal))
				ch.Err = errors.New(strings.Join(says, "; "))
			}
			out = append(out, ch)
		}
	}
	if n := len(s.c.RestoreHolds()); n > 0 {
		out = append(out, server.Check{Name: "held:restored-owner", Informational: true,
			Err: fmt.Errorf("%d objects held for the restore signature (their owner references name UIDs kgc never observed while objects of those kinds and names exist); relink them with `kgc relink`", n)})
	}
	return out
}
