package metrics

import "github.com/prometheus/client_golang/prometheus"

// newSyncErrors is kube-controller-manager's
// garbagecollector_controller_resources_sync_error_total, under its name
// and with its help, for the same events (ResourcesSyncError).
func newSyncErrors() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "garbagecollector", Subsystem: "controller", Name: "resources_sync_error_total",
		Help: "Number of garbage collector resources sync errors",
	})
}

// ResourcesSyncError counts one failed sync of the monitored resources with
// discovery, as kube-controller-manager counts it: discovery found no
// deletable resource at all, or the monitors had not all synced a resync
// period after the monitored resources changed (a resource whose list
// fails).
func (m *Metrics) ResourcesSyncError() {
	if m == nil {
		return
	}
	m.syncErrors.Inc()
}
