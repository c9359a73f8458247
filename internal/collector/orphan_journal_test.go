package collector

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clientdiscovery "k8s.io/client-go/discovery"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/orphanlog"
)

// The orphan journal keeps its entries past their TTL while a resource
// that could hold dependents has not been seen whole (Keep). A group
// version discovery cannot read (an APIService whose backend is down) has
// no monitor at all, so its objects have never been seen: a dependent
// there of an owner kgc orphaned, found once the group comes back after a
// restart, must still find the owner in the journal.
func TestJournalKeepsEntriesWhileAGroupIsUndiscoverable(t *testing.T) {
	gv := schema.GroupVersion{Group: "metrics.example.com", Version: "v1"}
	disc := &fakeapi.Discovery{Lists: fakeapi.ResourceLists(), Err: &clientdiscovery.ErrGroupDiscoveryFailed{
		Groups: map[schema.GroupVersion]error{gv: errors.New("the server is currently unable to handle the request")},
	}}
	e := launchCollector(t, fakeapi.NewServer(), func(c *Config) { c.Discovery = disc })
	c := e.c
	e.waitFor(t, "workers to start", c.Synced)
	if len(c.DiscoveryFailures()) == 0 {
		t.Fatal("discovery reports no failure (the test's premise)")
	}
	if c.someResourceUnseen() == false {
		t.Error("the journal would forget owners past their TTL while a group version is undiscoverable")
	}
}

// No worker starts until the orphan journal has been read: a store that
// fails keeps the collector unsynced (and retrying), and it starts once
// the store answers.
func TestWorkersWaitForTheOrphanJournal(t *testing.T) {
	store := &orphanlog.MemoryStore{}
	store.SetFail(errors.New("etcdserver: request timed out"))
	e := launchCollector(t, fakeapi.NewServer(), func(c *Config) { c.OrphanStore = store })
	c := e.c
	// Once the monitors have settled, workers would start within
	// milliseconds; give them 300 ms to (wrongly) do so. The journal's
	// first retry is a second away.
	e.waitFor(t, "monitors to settle", c.builder.Settled)
	time.Sleep(300 * time.Millisecond)
	if c.Synced() {
		t.Fatal("workers started although the orphan journal could not be read")
	}
	store.SetFail(nil)
	e.waitFor(t, "workers to start once the journal is read", c.Synced)
}

// Nor until the breaker's trips an earlier kgc recorded have been read: a
// Lease that cannot be read keeps the collector unsynced, with nothing
// deleted, not even a dependent whose owner is gone (it may be what the
// earlier kgc held); once the trips are read, it starts.
func TestWorkersWaitForTheBreakersTrips(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "orphaned", "dep-uid", fakeapi.DeploymentRef("ghost", "ghost-uid")))
	var unreadable atomic.Bool
	unreadable.Store(true)
	loads := atomic.Int32{}
	load := func(context.Context) error {
		loads.Add(1)
		if unreadable.Load() {
			return fmt.Errorf("%w %s: unexpected end of JSON input", breaker.ErrUnreadable, breaker.AnnotationTrips)
		}
		return nil
	}
	e := launchCollector(t, srv, func(c *Config) { c.LoadBreaker = load })
	c := e.c
	e.waitFor(t, "monitors to settle", c.builder.Settled)
	e.waitFor(t, "a first read of the trips", func() bool { return loads.Load() > 0 })
	time.Sleep(300 * time.Millisecond) // workers would start within milliseconds; the first retry is a second away
	if c.Synced() {
		t.Fatal("workers started although the breaker's trips could not be read")
	}
	if _, deletes, _ := srv.KGCActions(); len(deletes) != 0 {
		t.Fatalf("kgc deleted %+v before reading the breaker's trips", deletes)
	}
	unreadable.Store(false)
	e.waitFor(t, "workers to start once the trips are read", c.Synced)
	e.waitFor(t, "the dependent of the gone owner to be collected", func() bool { return e.gone(fakeapi.ConfigMaps, "a", "orphaned") })
}
