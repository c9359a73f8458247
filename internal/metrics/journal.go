package metrics

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of a write of the orphan journal (kgc_orphan_journal_writes_total).
const (
	JournalWritten  = "written"
	JournalConflict = "conflict"
	JournalError    = "error"
)

// journalMetrics are the orphan journal's metrics (package orphanlog).
type journalMetrics struct {
	writes  *prometheus.CounterVec
	entries prometheus.Gauge
}

func (j *journalMetrics) init() []prometheus.Collector {
	j.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace, Subsystem: "orphan_journal", Name: "writes_total",
		Help: "Writes of the orphan journal's Lease, by outcome (written, conflict, error).",
	}, []string{"outcome"})
	j.entries = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: "orphan_journal", Name: "entries",
		Help: "Owners the orphan journal remembers as orphaned by kgc, as last written.",
	})
	for _, o := range []string{JournalWritten, JournalConflict, JournalError} {
		j.writes.WithLabelValues(o)
	}
	return []prometheus.Collector{j.writes, j.entries}
}

// JournalWrite counts one write of the orphan journal; entries is what the
// journal holds after a successful one.
func (m *Metrics) JournalWrite(outcome string, entries int) {
	if m == nil {
		return
	}
	m.journal.writes.WithLabelValues(outcome).Inc()
	if outcome == JournalWritten {
		m.journal.entries.Set(float64(entries))
	}
}
