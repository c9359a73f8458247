// Package metrics defines kgc's Prometheus metrics. Nothing is registered
// globally: New registers on the prometheus.Registerer it is given (kgc run
// passes its own registry; library users pass theirs, or nil for none), so
// several collectors can run in one process. Every metric is documented in
// docs/metrics.md; a test fails when code and document disagree.
package metrics
