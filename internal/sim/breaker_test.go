package sim

import (
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/breaker"
)

// breakerConfig is the breaker the simulator runs with: rollback on, and
// vanished-resource at its most sensitive (one object gone unexplained
// trips it), so that the schedules measure what each signal rests on
// rather than its threshold.
func breakerConfig() breaker.Config {
	return breaker.Config{Rollback: true, VanishedMinimum: 1}
}

// A CRD is deleted while kgc's watch of its instances is down: the
// instances' DELETED events are dropped with the watch, the relist answers
// 404, and the CRD's own events (deleting, then gone) are still on the
// CRD monitor's stream. The graph then holds the CRD alive, and the
// instances look gone unexplained; a quorum read of the CRD says it is
// gone. Nothing trips.
func TestBreakerCRDDeletedWhileCRDWatchLags(t *testing.T) {
	s := newScripted(t)
	s.SetBreaker(breakerConfig())
	o := s.create(Obj{GR: Gadgets, Name: "o"})
	s.create(Obj{GR: Gadgets, Name: "d"}, s.OwnerRef(o, false))
	s.start()
	s.Unserve(Gadgets, true)
	s.must(s.Expire(Gadgets))
	s.finish()
}

// The same, with the CRD created again under its name before kgc lists
// its instances again: the list is empty (not 404), the graph holds the
// old CRD alive, and a quorum read finds a CRD of that name with another
// UID: the old one, which served the instances, is gone. Nothing trips.
func TestBreakerCRDRecreatedWhileCRDWatchLags(t *testing.T) {
	s := newScripted(t)
	s.SetBreaker(breakerConfig())
	o := s.create(Obj{GR: Gadgets, Name: "o"})
	s.create(Obj{GR: Gadgets, Name: "d"}, s.OwnerRef(o, false))
	s.start()
	s.Unserve(Gadgets, true)
	s.Serve(Gadgets)
	s.must(s.Expire(Gadgets))
	s.finish()
}

// At start-up, the resources' first lists end at different times. A
// dependent created after its own resource's list (it arrives while kgc
// watches) whose owner was created and deleted before the first list of
// the owner's resource has an owner kgc never observed alive, and yet
// nothing was restored: the owner went before kgc could see it, as a
// backlog's owners did. Such owners are not the restore signature; here
// two of them, with the signal's limit at one, trip nothing.
func TestBreakerOwnerGoneBeforeItsResourceWasFirstListed(t *testing.T) {
	s := newScripted(t)
	cfg := breakerConfig()
	cfg.UnobservedLimit = 1
	s.SetBreaker(cfg)
	s.HoldLists(Deployments, true) // the owners' first list waits
	s.start()
	var deps []Obj
	for _, name := range []string{"x", "y"} {
		owner := s.create(Obj{GR: Deployments, Namespace: "a", Name: name})
		deps = append(deps, s.create(Obj{GR: ConfigMaps, Namespace: "a", Name: name + "-dep"}, s.OwnerRef(owner, false)))
		s.must(s.Delete(owner, metav1.DeletePropagationBackground))
		s.must(s.Deliver(ConfigMaps)) // the dependent arrives
	}
	s.HoldLists(Deployments, false)
	s.must(s.Settle())
	s.finish()
	for _, d := range deps {
		if s.Get(d) != nil {
			t.Fatalf("%s/%s not collected\ntrace:\n%s", d.Namespace, d.Name, s.Trace())
		}
	}
}

// Schedule counts of TestRandomSchedulesTripNothing (CI, -short).
const (
	breakerSchedules      = 400
	breakerShortSchedules = 60
)

// TestRandomSchedulesTripNothing runs random schedules (the world of
// TestRandomSchedules: every feature) with the deletion breaker on
// (breakerConfig). The simulator injects no fault the breaker exists for,
// so every trip fails the schedule, unless it is an instance of a
// documented limit (LimitVanishInWatchGap), which is counted and logged.
// KGC_SIM_SEED replays one schedule, KGC_SIM_SCHEDULES and KGC_SIM_BASE
// set how many and the first seed.
func TestRandomSchedulesTripNothing(t *testing.T) {
	w := world()
	cfg := breakerConfig()
	w.Breaker = &cfg
	if v := os.Getenv("KGC_SIM_SEED"); v != "" {
		seed := envInt(t, "KGC_SIM_SEED", 0)
		s, out := RunRandom(seed, w)
		t.Logf("seed %d: documented limits hit: %v\ntrace:\n%s\nschedule:\n%s", seed, out.Limits, s.Trace(), FormatSchedule(seed, s.Actions()))
		if out.Failed() {
			t.Fatalf("%s", out)
		}
		return
	}
	n := envInt(t, "KGC_SIM_SCHEDULES", breakerSchedules)
	if testing.Short() && os.Getenv("KGC_SIM_SCHEDULES") == "" {
		n = breakerShortSchedules
	}
	base := envInt(t, "KGC_SIM_BASE", 1)
	var (
		next        atomic.Uint64
		mu          sync.Mutex
		wg          sync.WaitGroup
		gaps, fails int
		gapSeeds    []uint64
	)
	next.Store(base)
	for range 4 * runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed := next.Add(1) - 1
				if seed >= base+n {
					return
				}
				s, out := RunRandom(seed, w)
				mu.Lock()
				for _, l := range out.Limits {
					if l.Limit == LimitVanishInWatchGap || l.Limit == LimitVanishUnconfirmed {
						gaps++
						gapSeeds = append(gapSeeds, seed)
						break
					}
				}
				if out.Failed() && fails < 5 {
					fails++
					t.Errorf("%s\nreplay: KGC_SIM_SEED=%d go test -race -run TestRandomSchedulesTripNothing ./internal/sim/\ntrace of the objects involved:\n%s\nschedule:\n%s",
						out, seed, s.Trace(out.Focus()...), FormatSchedule(seed, s.Actions()))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(gapSeeds)
	t.Logf("%d schedules (seeds %d..%d); %d tripped %s (%s, %s), first seeds %v", n, base, base+n-1, gaps, breaker.Vanished, LimitVanishInWatchGap, LimitVanishUnconfirmed, gapSeeds[:min(len(gapSeeds), 5)])
}
