package discovery

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// watchState is what Unverified reports of one group and kind.
type watchState struct {
	epoch      uint64
	unverified bool
}

// noteListed records that a list of gk completed (graph.Event.Fresh).
func (m *Monitors) noteListed(gk schema.GroupKind) {
	m.listedMu.Lock()
	m.listed[gk] = true
	m.listedMu.Unlock()
}

// Unverified reports whether the watch of gk was interrupted (an error, a
// 410, a 404, an end well before its timeout) and the resource not
// verified since, and the interruption's number (it grows with each one).
// Verified: the watch resumed and delivered an event or bookmark (the
// storage's history goes on from where kgc was), or a complete list made
// since was applied to the graph. Until then, an absence the graph holds
// for an object of gk may have been undone under kgc: etcd restored from
// a snapshot brings back objects kgc saw deleted, under their UIDs, and
// kgc learns it only when it lists again (graph.Regression). The workers
// read such an absence again before resting a decision on it.
func (m *Monitors) Unverified(gk schema.GroupKind) (epoch uint64, unverified bool) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	w := m.watches[gk]
	if w == nil || !w.unverified {
		return 0, false
	}
	return w.epoch, true
}

// watchInterrupted and watchVerified record a monitor's interruption and
// verification (Unverified).
func (m *Monitors) watchInterrupted(gk schema.GroupKind) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	w := m.watches[gk]
	if w == nil {
		w = &watchState{}
		m.watches[gk] = w
	}
	w.epoch++
	w.unverified = true
}

func (m *Monitors) watchVerified(gk schema.GroupKind) {
	m.watchMu.Lock()
	defer m.watchMu.Unlock()
	if w := m.watches[gk]; w != nil {
		w.unverified = false
	}
}

// noteRelisted records that a list of gk completed after an earlier one
// in this process: the monitor's watch had lost the storage's history (a
// 410, or a watch that could not resume), or the resource left discovery
// and came back, and objects of gk may have come and gone in the gap
// without kgc seeing them (HistoryLost).
func (m *Monitors) noteRelisted(gk schema.GroupKind) {
	now := m.clock.Now()
	m.listedMu.Lock()
	if m.relisted == nil {
		m.relisted = map[schema.GroupKind]time.Time{}
	}
	m.relisted[gk] = now
	m.listedMu.Unlock()
}

// HistoryLost returns when a list of gk last completed after an earlier
// one in this process, which ends a gap in kgc's history of gk (zero:
// never since kgc started). An object of gk created and deleted in such a gap
// was never seen by kgc, so "never observed alive" is no evidence about
// it: the deletion breaker does not count owners of gk as never observed
// while the gap is recent (or open: Unverified).
func (m *Monitors) HistoryLost(gk schema.GroupKind) time.Time {
	m.listedMu.Lock()
	defer m.listedMu.Unlock()
	return m.relisted[gk]
}

func (m *Monitors) wasListed(gk schema.GroupKind) bool {
	m.listedMu.Lock()
	defer m.listedMu.Unlock()
	return m.listed[gk]
}

func (m *Monitors) isUnverified(gk schema.GroupKind) bool {
	_, u := m.Unverified(gk)
	return u
}

// interrupt records that the monitor's watch was interrupted: the
// resource is unverified until a watch resumed from where this one was
// delivers an event, or a list completed since is applied (Unverified).
func (mon *monitor) interrupt() {
	mon.mu.Lock()
	mon.unverified, mon.verifyGen = true, 0
	mon.mu.Unlock()
	if mon.onInterrupt != nil {
		mon.onInterrupt()
	}
}

// verify records that the resource was verified since its last
// interruption, if gen is the generation that verifies it (resumed: 0,
// an event of a watch resumed with no list since the interruption; else
// the generation of the list whose Listed marker was applied).
func (mon *monitor) verify(gen uint32) {
	mon.mu.Lock()
	ok := mon.unverified && mon.verifyGen == gen
	if ok {
		mon.unverified = false
	}
	mon.mu.Unlock()
	if ok && mon.onVerify != nil {
		mon.onVerify()
	}
}
