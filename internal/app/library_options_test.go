package app

import (
	"testing"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// TestLibraryOptionsCarryRunsSafetyHolds: the library options `kgc run`
// builds (and the side-by-side benchmark collects with) hold what its
// flags say: by default the deletion breaker on the leader-election
// Lease, the restore-signature hold and the orphan journal; each off when
// its flag turns it off.
func TestLibraryOptionsCarryRunsSafetyHolds(t *testing.T) {
	o, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	lib := o.LibraryOptions()
	d := kgc.DefaultBreakerOptions()
	want := d
	want.LeaseNamespace, want.LeaseName = "kube-system", "kgc"
	if lib.Breaker == nil || *lib.Breaker != want {
		t.Errorf("breaker %+v, want %+v", lib.Breaker, want)
	}
	if !lib.HoldRestored {
		t.Error("no restore-signature hold by default")
	}
	if j := lib.OrphanJournal; j == nil || j.LeaseNamespace != "kube-system" || j.LeaseName != "kgc-orphans" || j.TTL != o.OrphanJournalTTL {
		t.Errorf("orphan journal %+v, want the Lease kube-system/kgc-orphans with TTL %s", j, o.OrphanJournalTTL)
	}
	if lib.Workers != 20 || lib.QPS != 20 || lib.Burst != 30 || lib.WriteHistorySize != kgc.DefaultWriteHistorySize || lib.PagedLists {
		t.Errorf("workers %d, budget %v/%d, history %d, paged lists %v; want 20, 20/30, %d, false",
			lib.Workers, lib.QPS, lib.Burst, lib.WriteHistorySize, lib.PagedLists, kgc.DefaultWriteHistorySize)
	}
	if lib.Registerer != nil || lib.QueueMetrics != nil {
		t.Error("a metrics registry or queue metrics provider in the library options: they are the process's")
	}

	o, err = parse(t, "--deletion-breaker=false", "--hold-restored-references=false", "--orphan-journal=false",
		"--leader-elect-resource-name=gc", "--write-history-size=0")
	if err != nil {
		t.Fatal(err)
	}
	lib = o.LibraryOptions()
	if lib.Breaker != nil || lib.HoldRestored || lib.OrphanJournal != nil || lib.WriteHistorySize >= 0 {
		t.Errorf("with every hold off: breaker %+v, hold %v, journal %+v, history %d; want none, false, none, negative",
			lib.Breaker, lib.HoldRestored, lib.OrphanJournal, lib.WriteHistorySize)
	}
	o, err = parse(t, "--leader-elect-resource-name=gc", "--leader-elect-resource-namespace=ops")
	if err != nil {
		t.Fatal(err)
	}
	lib = o.LibraryOptions()
	if lib.Breaker == nil || lib.Breaker.LeaseNamespace != "ops" || lib.Breaker.LeaseName != "gc" || lib.OrphanJournal.LeaseName != "gc-orphans" {
		t.Errorf("breaker %+v, journal %+v; want the Leases ops/gc and ops/gc-orphans", lib.Breaker, lib.OrphanJournal)
	}
}
