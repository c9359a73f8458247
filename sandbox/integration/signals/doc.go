// Package signals checks that kgc gives the operators of
// kube-controller-manager's garbage collector the signals they read: every
// series a dashboard or alert built for that collector reads is exported by
// `kgc run` under the same name, type, labels and help
// (kcm_series_test.go). The list is taken from a real
// kube-controller-manager v1.36.3 with its collector on, started in the
// sandbox, and kept as the contract in
// internal/metrics/testdata/kcm-collector-series.json
// (go test ./sandbox/integration/signals -run TestKGCExportsKCMCollectorSeries -update
// writes it again); docs/metrics.md answers each entry.
package signals
