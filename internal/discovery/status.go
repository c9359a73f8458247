package discovery

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// status reads the monitor's state. An error counts until the monitor makes
// progress after it: a list page, a watch opened, a watch event or bookmark.
func (mon *monitor) status() Status {
	mon.mu.Lock()
	defer mon.mu.Unlock()
	st := Status{Synced: mon.synced, NotServed: mon.synced && !mon.served}
	if mon.lastErr != nil && mon.progress == mon.errAt {
		st.LastError = mon.lastErr
	}
	return st
}

// Status is one monitor's state.
type Status struct {
	// Synced: the monitor delivered a complete list of its resource at
	// least once. A LIST answering 404 counts as complete and empty: the
	// resource is not served (kube-apiserver keeps a deleted CRD's group in
	// discovery for minutes while its lists answer 404), so it holds no
	// object, and it must hold back no decision that waits for every
	// resource to be listed (design S4).
	Synced bool
	// NotServed: the monitor's last LIST answered 404. The monitor lists
	// again with backoff (no watch) until the resource is served again.
	NotServed bool
	// LastError is the monitor's last list or watch error, if it has made
	// no progress since (while it is set and unchanged, the resource is
	// failing: it cannot be listed or watched).
	LastError error
}

// Failing reports whether the monitor's list or watch fails: it has an
// error and made no progress since. A synced monitor can fail too (a
// conversion webhook that breaks later); its cache is then stale.
func (s Status) Failing() bool { return s.LastError != nil }

// Monitor states, as State reports them.
const (
	StateSynced  = "synced"
	StateSyncing = "syncing"
	StateFailing = "failing"
)

// State names the monitor's state: failing (its list or watch fails),
// synced, or syncing (initial list in progress).
func (s Status) State() string {
	switch {
	case s.Failing():
		return StateFailing
	case s.Synced:
		return StateSynced
	default:
		return StateSyncing
	}
}

// Status reports, per running monitor, whether it has delivered its initial
// list and its current list/watch error, if any.
func (m *Monitors) Status() map[schema.GroupVersionResource]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[schema.GroupVersionResource]Status, len(m.running))
	for gvr, mon := range m.running {
		out[gvr] = mon.status()
	}
	return out
}

// Settled reports whether every running monitor either delivered its
// initial list or is failing (its list or watch returned an error; the
// monitor keeps retrying it with backoff).
func (m *Monitors) Settled() bool {
	for _, st := range m.Status() {
		if !st.Synced && !st.Failing() {
			return false
		}
	}
	return true
}

// HasSynced reports whether every running monitor delivered its initial list.
func (m *Monitors) HasSynced() bool {
	for _, st := range m.Status() {
		if !st.Synced {
			return false
		}
	}
	return true
}

// Unlisted returns the monitored resources whose monitor has not delivered
// a complete list yet: their objects may be missing from the graph, so no
// negative fact ("no dependent left") may be concluded while they could
// hold one.
//
// A resource counts as listed once the graph builder has applied the
// Listed marker of its monitor's last complete list (Applied): only then
// does the graph hold what that list saw. A relist in progress does not
// make a listed resource unlisted again.
func (m *Monitors) Unlisted() []Resource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Resource
	for _, mon := range m.running {
		if !mon.isListed() {
			out = append(out, mon.resource)
		}
	}
	return out
}

// isListed reports whether the graph builder applied the Listed marker of
// the monitor's last complete list (see Unlisted), and that list still
// stands: one that answered 404 no longer does once the resource's CRD was
// observed alive after the list started (servedAgain).
func (mon *monitor) isListed() bool {
	g := mon.listGen.Load()
	return g != 0 && mon.appliedGen.Load() == g && !mon.servedAgain()
}

// servedAgain reports whether the monitor's last list answered 404 and the
// resource's CRD was observed alive since that list started: the resource
// may be served again, and objects created since are not in the graph
// until the monitor lists it again (the CRD's change restarts it at once:
// Monitors.RestartFailing). Without this, a CRD deleted and created again
// while discovery kept listing its resource leaves the resource counting
// as listed and empty, and a finalizer decision could miss a dependent
// created there before kgc relists it.
//
// The observation is counted in the CRD monitor before the graph sees the
// CRD's event, so every decision made on a graph holding the live CRD
// sees the resource unlisted. A CRD's instances can be created only once
// it is alive, so the only earlier window is the CRD monitor lagging the
// instances' (watch lag, as for any other resource).
func (mon *monitor) servedAgain() bool {
	if mon.crdSeq == nil {
		return false
	}
	mon.mu.Lock()
	notServed, seq := !mon.served, mon.notServedSeq
	mon.mu.Unlock()
	return notServed && mon.crdSeq() != seq
}

// Listing reports whether the resource of gk is being listed for the first
// time: a monitor of it runs, none of its complete lists has been applied
// to the graph yet (not even the first, while a relist is handed on:
// Unlisted is stricter), and it is not failing. idle is how long its
// list has made no progress (no page arrived since the monitor started or
// its last page); it is zero once the list is complete and only its
// events wait in the graph builder's queue. A resource nobody monitors, a
// listed one, and a failing one are not listing.
//
// The workers ask this about an owner the graph has not observed: while
// its resource is listing, the list will bring the owner (or prove by its
// Listed marker that the graph holds all there is), so a quorum read of
// the owner would be wasted.
func (m *Monitors) Listing(gk schema.GroupKind) (listing bool, idle time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mon := range m.running {
		if mon.resource.Kind != gk.Kind || mon.resource.GVR.Group != gk.Group {
			continue
		}
		if mon.isListed() || mon.firstApplied.Load() {
			// Listed, or relisting after a first list that is in the
			// graph: not a first list (and the first list's marker may
			// have been applied only after a later list completed).
			return false, 0
		}
		mon.mu.Lock()
		failing := mon.lastErr != nil && mon.progress == mon.errAt
		synced, at := mon.synced, mon.progressAt
		mon.mu.Unlock()
		switch {
		case failing:
			return false, 0
		case synced && mon.listGen.Load() != 0:
			// Complete and handed on: waiting for the graph builder only.
			return true, 0
		}
		return true, m.clock.Since(at)
	}
	return false, 0
}

// Progress reports how far the first lists have come: monitors whose
// complete list the graph builder applied (listed, as Unlisted counts
// them) out of all running monitors (total), and the objects the monitors
// received from their lists until each one's first complete list
// (objects).
func (m *Monitors) Progress() (listed, total int, objects int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mon := range m.running {
		total++
		if mon.isListed() {
			listed++
		}
		objects += mon.initialObjects.Load()
	}
	return listed, total, objects
}

// Applied records that the graph builder applied the Listed marker of list
// generation gen (unique across monitors).
func (m *Monitors) Applied(gen uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mon := range m.running {
		first, last := mon.firstGen.Load() == gen, mon.listGen.Load() == gen
		if first {
			mon.firstApplied.Store(true)
		}
		if last {
			mon.appliedGen.Store(gen)
			mon.verify(gen)
		}
		if first || last {
			return
		}
	}
}
