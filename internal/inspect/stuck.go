package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/internal/rules"
)

// Root causes of a stuck deletion: the reason label of kgc_stuck_objects
// and the groups of `kgc stuck`. Each is read off kgc's own decisions
// (Explain, which calls internal/rules) about the object and the blocking
// dependents it waits for.
const (
	// StuckFinalizer: the object is held by finalizers no garbage collector
	// handles (anything but orphan and foregroundDeletion); whoever added
	// them must remove them.
	StuckFinalizer = "finalizer"
	// StuckDependentFinalizer: in Foreground deletion, it waits for a chain
	// of blocking dependents that ends in an object held by such a
	// finalizer.
	StuckDependentFinalizer = "dependent_finalizer"
	// StuckUnresolvableOwner: it waits for a blocking dependent kgc keeps
	// because one of that dependent's ownerReferences names a kind no API
	// serves (kgc never collects on a reference it cannot resolve).
	StuckUnresolvableOwner = "unresolvable_owner_kind"
	// StuckInvalidReference: it waits for a blocking dependent kgc never
	// collects because of an invalid ownerReference (a cluster-scoped
	// object naming a namespaced owner, a malformed apiVersion).
	StuckInvalidReference = "invalid_reference"
	// StuckUnlisted: kgc holds its orphan or foregroundDeletion finalizer
	// because a resource that could hold its dependents cannot be listed
	// (a failing monitor: a conversion webhook down, an APIService
	// unavailable), up to --unlisted-hold.
	StuckUnlisted = "failing_monitor"
	// StuckKeepRule: it waits for a blocking dependent a keep-rule keeps.
	StuckKeepRule = "keep_rule"
	// StuckCycle: it waits for blocking dependents that wait for it in
	// turn, all deleted in the foreground by a client (never broken).
	StuckCycle = "blocking_cycle"
	// StuckGraceful: no finalizer holds it (or the blocking dependent it
	// waits for): the apiserver finishes a graceful deletion, e.g. a Pod
	// waiting for its kubelet.
	StuckGraceful = "graceful_deletion"
	// StuckPending: kgc would act now (remove its finalizer, delete or
	// orphan a dependent). If this lasts, no collector is running or it is
	// unhealthy.
	StuckPending = "collector_pending"
)

// StuckReasons are every reason, in the order reports list them.
var StuckReasons = []string{
	StuckFinalizer, StuckDependentFinalizer, StuckUnresolvableOwner, StuckInvalidReference,
	StuckUnlisted, StuckKeepRule, StuckCycle, StuckGraceful, StuckPending,
}

var stuckDescriptions = map[string]string{
	StuckFinalizer:          "held by finalizers nothing in kgc removes",
	StuckDependentFinalizer: "waiting for blocking dependents held by such finalizers",
	StuckUnresolvableOwner:  "waiting for a blocking dependent kept because an owner kind is not served",
	StuckInvalidReference:   "waiting for a blocking dependent kept because of an invalid owner reference",
	StuckUnlisted:           "finalizer held because a resource that could hold dependents cannot be listed",
	StuckKeepRule:           "waiting for a blocking dependent a keep-rule keeps",
	StuckCycle:              "waiting in a cycle of blocking dependents",
	StuckGraceful:           "graceful deletion not finished by the apiserver",
	StuckPending:            "kgc would act now: is a garbage collector running?",
}

// StuckSource is a View that can also list deleting objects: LiveView
// (the API server) and ServerView (a running kgc's graph).
type StuckSource interface {
	View
	// DeletingSince returns the objects whose deletionTimestamp is at or
	// before t, oldest first.
	DeletingSince(ctx context.Context, t time.Time) ([]*Object, error)
	// Unlisted returns the resources that could not be listed: their
	// objects are missing from every answer.
	Unlisted() []graphapi.Resource
}

// StuckObject is one deletion that has not finished.
type StuckObject struct {
	Object *Object `json:"object"`
	// AgeSeconds since its deletionTimestamp.
	AgeSeconds int64  `json:"ageSeconds"`
	Reason     string `json:"reason"`
	// Chain: for a reason found among blocking dependents, the objects
	// from this one down to the one at the root cause.
	Chain []*Object `json:"chain,omitempty"`
	// Finalizers: the finalizers at the root cause (StuckFinalizer,
	// StuckDependentFinalizer).
	Finalizers []string `json:"finalizers,omitempty"`
	// Resources: the resources that cannot be listed (StuckUnlisted).
	Resources []string `json:"resources,omitempty"`
	// OtherRoots counts other blocking chains that are stuck too (kgc
	// explain lists them all).
	OtherRoots int `json:"otherRoots,omitempty"`
	// Detail says it in plain words.
	Detail string `json:"detail"`
}

// StuckGroup is the stuck objects with one root cause.
type StuckGroup struct {
	Reason      string        `json:"reason"`
	Description string        `json:"description"`
	Objects     []StuckObject `json:"objects"`
}

// StuckReport answers "which deletions are stuck, and why?".
type StuckReport struct {
	OlderThan string `json:"olderThan"`
	// Total stuck objects; Groups in the order of StuckReasons, only
	// non-empty ones.
	Total  int          `json:"total"`
	Groups []StuckGroup `json:"groups"`
	// OldestSeconds is the age of the oldest stuck deletion (0: none).
	OldestSeconds int64 `json:"oldestSeconds"`
	// Unlisted resources: stuck objects in them cannot be seen.
	Unlisted []graphapi.Resource `json:"unlisted,omitempty"`
}

// StuckOptions select what Stuck reports.
type StuckOptions struct {
	// OlderThan: deletions asked for at least this long ago.
	OlderThan time.Duration
	// Namespace, when set, keeps only objects in it.
	Namespace string
	// Now is the time ages are measured from; zero is time.Now().
	Now time.Time
}

// Stuck lists every object of src whose deletion has not finished after
// opts.OlderThan, grouped by root cause.
func Stuck(ctx context.Context, p rules.Policy, src StuckSource, opts StuckOptions) (*StuckReport, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	objs, err := src.DeletingSince(ctx, now.Add(-opts.OlderThan))
	if err != nil {
		return nil, err
	}
	r := &StuckReport{OlderThan: opts.OlderThan.String(), Groups: []StuckGroup{}, Unlisted: src.Unlisted()}
	by := map[string][]StuckObject{}
	for _, o := range objs {
		if opts.Namespace != "" && o.Namespace != opts.Namespace {
			continue
		}
		s, err := StuckCause(ctx, p, src, o, r.Unlisted)
		if err != nil {
			return nil, err
		}
		if o.DeletionTimestamp != nil {
			s.AgeSeconds = int64(now.Sub(o.DeletionTimestamp.Time) / time.Second)
		}
		r.OldestSeconds = max(r.OldestSeconds, s.AgeSeconds)
		by[s.Reason] = append(by[s.Reason], s)
		r.Total++
	}
	for _, reason := range StuckReasons {
		if l := by[reason]; len(l) > 0 {
			r.Groups = append(r.Groups, StuckGroup{Reason: reason, Description: stuckDescriptions[reason], Objects: l})
		}
	}
	return r, nil
}

// StuckCause finds the root cause that keeps the deleting object o, from
// kgc's decisions about it and about the blocking dependents it waits for;
// unlisted are the resources that could not be listed.
func StuckCause(ctx context.Context, p rules.Policy, v View, o *Object, unlisted []graphapi.Resource) (StuckObject, error) {
	s := StuckObject{Object: o}
	e, err := Explain(ctx, p, v, o)
	if err != nil {
		return s, err
	}
	custom := o.CustomFinalizers()
	switch e.Decision.Verdict {
	case VerdictWaitForDependents:
		var roots []stuckRoot
		for _, w := range e.WaitingFor {
			roots = findRoots(ctx, p, v, w, []*Object{o}, unlisted, roots)
		}
		// The first root that nothing in kgc will move is the answer;
		// roots kgc is about to move only if there is none.
		slices.SortStableFunc(roots, func(a, b stuckRoot) int {
			return stuckRank(a.reason) - stuckRank(b.reason)
		})
		if len(roots) == 0 {
			s.Reason = StuckPending
			s.Detail = "in Foreground deletion, but kgc finds no blocking dependent: kgc would remove its foregroundDeletion finalizer"
			return s, nil
		}
		root := roots[0]
		s.Reason, s.Chain, s.Finalizers, s.Resources = root.reason, root.chain, root.finalizers, root.resources
		for _, other := range roots[1:] {
			if other.reason != StuckPending {
				s.OtherRoots++
			}
		}
		last := root.chain[len(root.chain)-1]
		s.Detail = fmt.Sprintf("in Foreground deletion, waits for %s: %s", last, root.why)
	case VerdictRemoveForegroundFinalizer, VerdictOrphanDependents:
		if rs := relevantUnlisted(o, unlisted); len(rs) > 0 {
			s.Reason, s.Resources = StuckUnlisted, rs
			s.Detail = fmt.Sprintf("kgc holds its %s finalizer until %s can be listed (up to --unlisted-hold): dependents it cannot see may be there", kgcFinalizer(o), strings.Join(rs, ", "))
			return s, nil
		}
		s.Reason = StuckPending
		s.Detail = strings.Join(e.Decision.Why, "; ")
		if len(custom) > 0 {
			s.Finalizers = custom
		}
	case VerdictWaitForFinalizers:
		s.Reason, s.Finalizers = StuckFinalizer, custom
		s.Detail = fmt.Sprintf("held by finalizer(s) %s: %s", strings.Join(custom, ", "), unhandledNote)
	default:
		s.Reason = StuckGraceful
		s.Detail = "no finalizer holds it: the apiserver removes it when its graceful deletion ends (a Pod waits for its kubelet)"
	}
	return s, nil
}

func kgcFinalizer(o *Object) string {
	if o.Orphaning() {
		return FinalizerOrphan
	}
	return FinalizerForeground
}

// relevantUnlisted are the unlisted resources that could hold dependents
// of o: for a namespaced owner only namespaced ones (negativeFactsReady in
// internal/workers decides the same way).
func relevantUnlisted(o *Object, unlisted []graphapi.Resource) []string {
	var out []string
	for _, r := range unlisted {
		if o.Namespace != "" && !r.Namespaced {
			continue
		}
		out = append(out, r.Resource)
	}
	return out
}

type stuckRoot struct {
	reason     string
	chain      []*Object
	finalizers []string
	resources  []string
	why        string
}

func stuckRank(reason string) int {
	switch reason {
	case StuckPending:
		return 2
	case StuckGraceful:
		return 1
	}
	return 0
}

// findRoots walks the blocking dependents of a Foreground deletion (w and
// below, as Explain found them) down to where each chain stops moving.
func findRoots(ctx context.Context, p rules.Policy, v View, w *Wait, path []*Object, unlisted []graphapi.Resource, out []stuckRoot) []stuckRoot {
	chain := append(slices.Clone(path), w.Object)
	if w.Cycle {
		return append(out, stuckRoot{reason: StuckCycle, chain: chain, why: "it waits, through its blocking dependents, for an object already on this chain"})
	}
	before := len(out)
	for _, c := range w.WaitingFor {
		out = findRoots(ctx, p, v, c, chain, unlisted, out)
	}
	deeper := false
	for _, r := range out[before:] {
		if r.reason != StuckPending {
			deeper = true
		}
	}
	if deeper {
		return out
	}
	o := w.Object
	switch w.Decision.Verdict {
	case VerdictWaitForFinalizers:
		return append(out[:before], stuckRoot{reason: StuckDependentFinalizer, chain: chain, finalizers: w.UnhandledFinalizers,
			why: fmt.Sprintf("held by finalizer(s) %s: %s", strings.Join(w.UnhandledFinalizers, ", "), unhandledNote)})
	case VerdictWaitForDependents:
		if len(w.UnhandledFinalizers) > 0 {
			return append(out[:before], stuckRoot{reason: StuckDependentFinalizer, chain: chain, finalizers: w.UnhandledFinalizers,
				why: fmt.Sprintf("held by finalizer(s) %s: %s", strings.Join(w.UnhandledFinalizers, ", "), unhandledNote)})
		}
		return out
	case VerdictRemoveForegroundFinalizer, VerdictOrphanDependents:
		if rs := relevantUnlisted(o, unlisted); len(rs) > 0 {
			return append(out[:before], stuckRoot{reason: StuckUnlisted, chain: chain, resources: rs,
				why: fmt.Sprintf("kgc holds its %s finalizer until %s can be listed", kgcFinalizer(o), strings.Join(rs, ", "))})
		}
		if o.Deleting && len(w.UnhandledFinalizers) > 0 {
			return append(out[:before], stuckRoot{reason: StuckDependentFinalizer, chain: chain, finalizers: w.UnhandledFinalizers,
				why: fmt.Sprintf("held by finalizer(s) %s: %s", strings.Join(w.UnhandledFinalizers, ", "), unhandledNote)})
		}
	case VerdictBeingDeleted:
		return append(out[:before], stuckRoot{reason: StuckGraceful, chain: chain, why: "no finalizer holds it: the apiserver removes it when its graceful deletion ends"})
	case VerdictRetry:
		return append(out[:before], stuckRoot{reason: StuckUnresolvableOwner, chain: chain, why: strings.Join(w.Decision.Why, "; ")})
	case VerdictKeep:
		if w.Decision.KeepRule != "" {
			return append(out[:before], stuckRoot{reason: StuckKeepRule, chain: chain, why: strings.Join(w.Decision.Why, "; ")})
		}
		if invalidOwner(ctx, v, o) {
			return append(out[:before], stuckRoot{reason: StuckInvalidReference, chain: chain, why: strings.Join(w.Decision.Why, "; ")})
		}
	}
	// kgc moves it (deletes it, removes a reference, removes a finalizer).
	return append(out[:before], stuckRoot{reason: StuckPending, chain: chain, why: "kgc would act now: " + w.Decision.Verdict})
}

// invalidOwner reports whether one of o's references classifies invalid.
func invalidOwner(ctx context.Context, v View, o *Object) bool {
	for _, ref := range o.OwnerReferences {
		if r, err := v.ResolveOwner(ctx, o, ref); err == nil && r.State == rules.Invalid {
			return true
		}
	}
	return false
}

// deletingSince filters objs to those deleting since at or before t,
// oldest first.
func deletingSince(objs []*Object, t time.Time) []*Object {
	var out []*Object
	seen := map[types.UID]bool{}
	for _, o := range objs {
		if !o.Deleting || o.Placeholder || o.DeletionTimestamp == nil || o.DeletionTimestamp.After(t) || seen[o.UID] {
			continue
		}
		seen[o.UID] = true
		out = append(out, o)
	}
	slices.SortStableFunc(out, func(a, b *Object) int {
		if c := a.DeletionTimestamp.Compare(b.DeletionTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
	return out
}
