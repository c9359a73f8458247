// Package monitoring checks what deploy/monitoring ships: every expression
// of the PrometheusRule's alerts and of the Grafana dashboard's panels
// parses as PromQL (with Prometheus's own parser) and selects only series
// kgc exports, with labels those series have; every alert names a severity,
// a summary, a description and a runbook in docs/runbooks/ that exists.
//
// The series kgc exports are not listed here: kgc's own come from the
// registry a collector built by pkg/kgc registers its metrics on (read
// through their descriptors, so that a series with no sample yet counts
// too), and kube-controller-manager's, which `kgc run` exports besides,
// from internal/metrics/testdata/kcm-collector-series.json, the contract
// sandbox/integration/signals holds the kgc binary to. It starts no
// control plane.
package monitoring
