package discovery

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// A CRD created while kgc runs has its garbage collected right after it is
// Established. The periodic rediscovery is set to 5 minutes, so what is
// measured is the event-driven path: kgc sees the CRD change, rediscovers,
// retries until discovery serves the new resource, and starts its monitor.
func TestCRDEstablishedToFirstCollected(t *testing.T) {
	gc, _, _ := startKGC(t, kgc.Options{Workers: 5, DiscoveryResyncPeriod: 5 * time.Minute})
	srv := httptest.NewServer(gc.Handler())
	defer srv.Close()
	ns := newNamespace(t)
	liveOwner := configMap(t, ns, "live-owner", nil)

	const rounds = 5
	var toCollected, toCreated, createdToCollected, toMonitor []time.Duration
	for i := range rounds {
		s := newCRDSpec("established.kgc.test", "v1")
		createCRD(t, s)
		poll(t, "CRD "+s.name()+" to be established", func() bool { return crdEstablished(s.name()) })
		established := time.Now()
		// Meanwhile, note when kgc's monitor for the new resource is synced.
		monitorUp := make(chan time.Duration, 1)
		go func() {
			line := "[+]monitor:" + s.group + "/v1/" + s.plural + " ok"
			err := pollErr(10*time.Second, func() bool {
				body, err := tryGet(srv.URL + "/readyz?verbose")
				return err == nil && strings.Contains(body, line)
			})
			if err != nil {
				monitorUp <- -1
				return
			}
			monitorUp <- time.Since(established)
		}()
		garbage := customResource(t, s, "v1", ns, "garbage", []metav1.OwnerReference{ghostRef("ghost")})
		created := time.Now()
		kept := customResource(t, s, "v1", ns, "kept", []metav1.OwnerReference{cmRef(liveOwner, false)})
		// Generous bound; the number that matters is logged below.
		if err := pollErr(10*time.Second, func() bool { return customResourceGone(s, "v1", ns, garbage.GetName()) }); err != nil {
			t.Fatalf("round %d: garbage instance of %s not collected within 10s of the CRD being established", i, s.name())
		}
		toCollected = append(toCollected, time.Since(established))
		createdToCollected = append(createdToCollected, time.Since(created))
		toCreated = append(toCreated, created.Sub(established))
		if customResourceGone(s, "v1", ns, kept.GetName()) {
			t.Fatalf("round %d: instance with a live owner was deleted", i)
		}
		if d := <-monitorUp; d < 0 {
			t.Fatalf("round %d: kgc's monitor of %s not reported synced within 10s", i, s.name())
		} else {
			toMonitor = append(toMonitor, d)
		}
	}
	t.Logf("CRD Established -> first instance collected: median %s, all %v; of which the apiserver took median %s to accept the instance (its endpoint answers 404 until then), and kgc median %s from the instance's creation to its deletion (all %v)",
		median(toCollected).Round(time.Millisecond), roundAll(toCollected), median(toCreated).Round(time.Millisecond),
		median(createdToCollected).Round(time.Millisecond), roundAll(createdToCollected))
	t.Logf("CRD Established -> kgc's monitor of it synced (/readyz?verbose): median %s, all %v", median(toMonitor).Round(time.Millisecond), roundAll(toMonitor))
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// Creating and deleting the same CRD (with instances) 20 times while kgc
// runs leaves kgc with the goroutines, monitors and monitor loops it had
// before: a deleted CRD's monitor is stopped and its list-and-watch loop
// ends.
func TestCRDChurnLeavesNothing(t *testing.T) {
	// Earlier tests' cleanups delete their CRDs without waiting: a
	// collector started while one is still terminating monitors it for a
	// moment, and the monitor count at start would not be this test's
	// baseline.
	poll(t, "earlier tests' CRDs to be gone", func() bool {
		l, err := dynamicClient.Resource(crdGVR).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, crd := range l.Items {
			if crd.GetDeletionTimestamp() != nil {
				return false
			}
		}
		return true
	})
	c, label := startCollector(t, 5*time.Minute)
	ns := newNamespace(t)
	s := newCRDSpec("churn.kgc.test", "v1")
	gvr := s.gvr("v1")
	startMonitors, startHandlers := c.MonitorHandlers()
	if startHandlers != startMonitors {
		t.Fatalf("at start: %d handlers for %d monitors", startHandlers, startMonitors)
	}

	cycle := func(i int) {
		t.Helper()
		t0 := time.Now()
		createCRD(t, s)
		poll(t, "CRD to be established", func() bool { return crdEstablished(s.name()) })
		t1 := time.Now()
		garbage := customResource(t, s, "v1", ns, "garbage", []metav1.OwnerReference{ghostRef("ghost")})
		customResource(t, s, "v1", ns, "plain-1", nil)
		customResource(t, s, "v1", ns, "plain-2", nil)
		// The garbage instance going proves this incarnation is monitored.
		poll(t, "garbage instance to be collected", func() bool { return customResourceGone(s, "v1", ns, garbage.GetName()) })
		t2 := time.Now()
		deleteCRDAndWait(t, s.name())
		t3 := time.Now()
		poll(t, "the deleted CRD's monitor to stop", func() bool {
			_, ok := c.MonitorStatus()[gvr]
			return !ok
		})
		if i%5 == 0 {
			t.Logf("cycle %d: %d goroutines; established in %s, garbage collected %s later, CRD deleted in %s, monitor stopped %s later", i, goroutines(label),
				t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond), time.Since(t3).Round(time.Millisecond))
		}
	}

	cycle(0) // warm-up: first use of the CRD path (REST mapper, connections)
	baseline := settledGoroutines(label)
	baseMonitors, baseHandlers := c.MonitorHandlers()
	for i := 1; i <= 20; i++ {
		cycle(i)
	}
	var n, monitors, handlers int
	err := pollErr(30*time.Second, func() bool {
		n = goroutines(label)
		monitors, handlers = c.MonitorHandlers()
		return n <= baseline && monitors == baseMonitors && handlers == baseHandlers
	})
	if err != nil {
		t.Fatalf("after 20 CRD create/delete cycles: %d goroutines (baseline %d), %d monitors (baseline %d), %d handlers (baseline %d)\n%s",
			n, baseline, monitors, baseMonitors, handlers, baseHandlers, goroutineStacks(label))
	}
	if baseMonitors != startMonitors || baseHandlers != startHandlers {
		t.Errorf("after the warm-up cycle: %d monitors, %d handlers; at start %d, %d", baseMonitors, baseHandlers, startMonitors, startHandlers)
	}
	t.Logf("after 20 cycles: %d goroutines (baseline %d), %d monitors, %d handlers", n, baseline, monitors, handlers)
}

// settledGoroutines returns the collector's goroutine count once it has been
// the same for three samples in a row (or the last sample after 5s).
func settledGoroutines(label string) int {
	prev, same := -1, 0
	n := 0
	_ = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		n = goroutines(label)
		if n == prev {
			same++
		} else {
			same = 0
		}
		prev = n
		return same >= 2, nil
	})
	return n
}
