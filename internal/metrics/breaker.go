package metrics

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// BreakerState is the deletion breaker's state at scrape time.
type BreakerState struct {
	// Signals: per signal (unobserved-owners, vanished-resource, rollback,
	// dangling-fraction).
	Signals []BreakerSignal
	// Held: objects held now, by reason (a breaker signal, or
	// restored-owner).
	Held map[string]int
}

// BreakerSignal is one signal of the breaker.
type BreakerSignal struct {
	Signal  string
	Tripped bool
	// Counted: deletions counted in the current window; Limit: the most it
	// allows (0: off).
	Counted, Limit int
}

// HeldRestored is the held-objects reason of the restore-signature hold.
const HeldRestored = "restored-owner"

// breakerSignals are the breaker's signals, each exported (zeros too).
var breakerSignals = []string{"unobserved-owners", "vanished-resource", "rollback", "dangling-fraction"}

// heldReasons: kgc_held_objects's reasons, each exported (zeros too).
var heldReasons = append(slices.Clone(breakerSignals), HeldRestored)

var (
	breakerTrippedDesc = prometheus.NewDesc(namespace+"_deletion_breaker_tripped",
		"1 while the deletion circuit breaker's signal (unobserved-owners, vanished-resource, rollback, dangling-fraction) is tripped and holds deletions on its basis, else 0.",
		[]string{"signal"}, nil)
	breakerCountedDesc = prometheus.NewDesc(namespace+"_deletion_breaker_window_deletions",
		"Distinct owners counted toward a breaker signal in its current window (--breaker-window): unobserved-owners and dangling-fraction count; the others trip on evidence and count 0.",
		[]string{"signal"}, nil)
	breakerLimitDesc = prometheus.NewDesc(namespace+"_deletion_breaker_limit",
		"What a breaker signal allows before it trips (0: the signal is off): the most owners in one window (unobserved-owners; dangling-fraction's follows the graph's size), the fewest objects of one resource gone unexplained (vanished-resource), 1 for rollback (one piece of evidence).",
		[]string{"signal"}, nil)
	heldObjectsDesc = prometheus.NewDesc(namespace+"_held_objects",
		"Objects kgc decided to delete and holds, by reason: a tripped breaker signal (unobserved-owners, vanished-resource, rollback, dangling-fraction), or restored-owner (the restore signature, until kgc relink).",
		[]string{"reason"}, nil)
)

type breakerCollector struct{ src func() BreakerState }

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- breakerTrippedDesc
	ch <- breakerCountedDesc
	ch <- breakerLimitDesc
	ch <- heldObjectsDesc
}

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	st := c.src()
	for _, s := range st.Signals {
		v := 0.0
		if s.Tripped {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(breakerTrippedDesc, prometheus.GaugeValue, v, s.Signal)
		ch <- prometheus.MustNewConstMetric(breakerCountedDesc, prometheus.GaugeValue, float64(s.Counted), s.Signal)
		ch <- prometheus.MustNewConstMetric(breakerLimitDesc, prometheus.GaugeValue, float64(s.Limit), s.Signal)
	}
	for _, reason := range heldReasons {
		ch <- prometheus.MustNewConstMetric(heldObjectsDesc, prometheus.GaugeValue, float64(st.Held[reason]), reason)
	}
}

// breakerCollectors are the breaker's metrics: its state at scrape time,
// and the trips counted (BreakerTripped).
func (m *Metrics) breakerCollectors(src Sources) []prometheus.Collector {
	m.breakerTrips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Name: "deletion_breaker_trips_total",
		Help: "Times a deletion breaker signal tripped (unobserved-owners, vanished-resource, rollback, dangling-fraction).",
	}, []string{"signal"})
	for _, s := range breakerSignals {
		m.breakerTrips.WithLabelValues(s)
	}
	return []prometheus.Collector{m.breakerTrips, breakerCollector{src: src.Breaker}}
}

// BreakerTripped counts one trip of signal.
func (m *Metrics) BreakerTripped(signal string) {
	if m == nil {
		return
	}
	m.breakerTrips.WithLabelValues(signal).Inc()
}
