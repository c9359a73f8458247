package builder

// kube-controller-manager's collector counts a failed sync of its monitored
// resources (garbagecollector_controller_resources_sync_error_total) when
// discovery finds no deletable resource, and when, after the monitored
// resources changed, its monitors have not all synced within a resync
// period: a resource whose list fails (a broken conversion webhook, an
// unavailable APIService) counts once per change. kgc counts the same two
// events: Resync counts the first; each change of the monitors schedules a
// check (expectSynced), which the first rediscovery round a resync period
// later or more makes (checkSynced).

// expectSynced schedules the check that every monitor has synced a resync
// period from now, replacing one scheduled earlier: the last change gets
// the whole period, as kube-controller-manager's wait after its last
// resync.
func (b *Builder) expectSynced() {
	b.syncCheck.Store(b.clock().Now().Add(b.cfg.ResyncPeriod).UnixNano())
}

// checkSynced makes the scheduled check once it is due: a monitor that has
// not delivered its first complete list then counts one resources sync
// error (a monitor whose watch fails after its list does not, as an
// informer that synced stays synced).
func (b *Builder) checkSynced() {
	due := b.syncCheck.Load()
	if due == 0 || b.clock().Now().UnixNano() < due || !b.syncCheck.CompareAndSwap(due, 0) {
		return
	}
	if !b.monitors.HasSynced() {
		b.cfg.Metrics.ResourcesSyncError()
	}
}
