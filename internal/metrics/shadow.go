package metrics

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of comparing shadow mode's decisions with what the cluster's
// own garbage collector did (kgc_shadow_agreement_total).
const (
	// ShadowAgree: kgc decided a write and the cluster showed its effect
	// within the window, or the other collector made a change kgc
	// decided too.
	ShadowAgree = "agree"
	// ShadowKGCOnly: kgc decided a write whose effect the cluster did not
	// show within the window.
	ShadowKGCOnly = "kgc_only"
	// ShadowOtherOnly: a change a garbage collector could have made
	// happened without a matching kgc decision within the window.
	ShadowOtherOnly = "other_only"
)

// shadowMetrics are shadow mode's (--dry-run) metrics.
type shadowMetrics struct {
	decisions *prometheus.CounterVec
	agreement *prometheus.CounterVec
}

// init creates the metrics, with every known label value at zero, and
// returns them for registration.
func (s *shadowMetrics) init() []prometheus.Collector {
	s.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "shadow", Name: "decisions_total",
		Help: "Writes kgc decided in shadow mode (--dry-run) and did not make, by operation.",
	}, []string{"operation"})
	s.agreement = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "shadow", Name: "agreement_total",
		Help: "Shadow mode's decisions compared with what the cluster's garbage collector did within --shadow-window, by outcome (agree, kgc_only, other_only).",
	}, []string{"outcome"})
	for _, op := range []string{OpDelete, OpRemoveRefs, OpUnblockRefs, OpOrphan, OpRemoveFinalizer} {
		s.decisions.WithLabelValues(op)
	}
	for _, o := range []string{ShadowAgree, ShadowKGCOnly, ShadowOtherOnly} {
		s.agreement.WithLabelValues(o)
	}
	return []prometheus.Collector{s.decisions, s.agreement}
}

// ShadowDecision counts one write decided in shadow mode.
func (m *Metrics) ShadowDecision(op string) {
	if m == nil {
		return
	}
	m.shadow.decisions.WithLabelValues(op).Inc()
}

// ShadowAgreement counts one comparison's outcome (Shadow*).
func (m *Metrics) ShadowAgreement(outcome string) {
	if m == nil {
		return
	}
	m.shadow.agreement.WithLabelValues(outcome).Inc()
}
