package faults

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// sigkillCascade is the size of the Foreground cascade kgc is killed in.
	// At 20 QPS (burst 30) kgc needs about 25 s for it, so the test finds
	// it part done with room to spare.
	sigkillCascade = 500
	// killAfterMin/Max: kgc is killed once at least killAfterMin and at
	// most killAfterMax dependents are gone.
	killAfterMin = 50
	killAfterMax = 200
	// quietPeriod is how long the cascade must stay where it is while no
	// kgc runs.
	quietPeriod = 2 * time.Second

	// logDeleting is logged at -v=2 for every DELETE kgc issues.
	logDeleting = "Deleting garbage"
)

// TestSIGKILLMidForegroundCascade kills `kgc run` with SIGKILL in the middle
// of a 500-dependent Foreground cascade (blockOwnerDeletion on every
// dependent), checks that the cascade is stuck, not broken, while no kgc
// runs (owner present, deletionTimestamp and foregroundDeletion finalizer
// set, the remaining dependents untouched), restarts kgc and requires the
// cascade to finish with nothing else deleted: a live owner's dependents,
// unowned objects, and dependents shared with a live owner (which must only
// lose their reference to the deleted owner).
func TestSIGKILLMidForegroundCascade(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "sigkill")
	by := createBystanders(t, configMaps, ns, 20)

	c := createCascade(t, configMaps, ns, "big", sigkillCascade, true)
	// Dependents of both the cascade's owner and the live keeper.
	var shared []obj
	for i := range 10 {
		shared = append(shared, mustCreate(t, configMaps, ns, fmt.Sprintf("shared-%02d", i), protected(nil),
			c.owner.ref(true), by.keeper.ref(i%2 == 0)))
	}
	by.add(shared...)

	first := startKGC(t, "first")
	c.deleteOwner(t, metav1.DeletePropagationForeground)
	deleteStart := time.Now()
	var left int
	poll(t, "the cascade to be part done", func(ctx context.Context) (bool, error) {
		n, err := c.left(ctx)
		if err != nil {
			return false, err
		}
		if n < sigkillCascade-killAfterMax {
			return false, fmt.Errorf("%d of %d dependents already gone: the cascade ran too fast to kill kgc in time", sigkillCascade-n, sigkillCascade)
		}
		left = n
		return n <= sigkillCascade-killAfterMin, nil
	})
	first.Kill(t)
	killedAt := time.Now()
	t.Logf("killed kgc %s after the owner's deletion, with %d of %d dependents left", killedAt.Sub(deleteStart).Round(time.Millisecond), left, sigkillCascade)

	// Requests already on the wire when kgc died may still land: wait
	// until the count holds still, then require it to stay there.
	stable := stableCount(t, c)
	if stable == 0 {
		t.Fatal("no dependent left after the kill")
	}
	consistently(t, quietPeriod, "the cascade to stay stuck while no kgc runs", func(ctx context.Context) error {
		n, err := c.left(ctx)
		if err != nil {
			return err
		}
		if n != stable {
			return fmt.Errorf("%d dependents left, was %d with no kgc running", n, stable)
		}
		return checkForegroundOwner(ctx, c)
	})
	t.Logf("cascade stuck at %d dependents with the owner waiting in foreground deletion", stable)

	second := startKGC(t, "second")
	took := c.waitGone(t)
	t.Logf("restarted kgc finished the cascade (%d dependents) %s after its start; %s after the first kill",
		stable, took.Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
	if n := second.Count(t, logDeleting); n < stable {
		t.Errorf("the restarted kgc logged %d %q lines for %d remaining dependents", n, logDeleting, stable)
	}

	// Shared dependents lost only their reference to the deleted owner.
	for _, o := range shared {
		m, err := o.client().Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("shared dependent %s: %v", o, err)
			continue
		}
		if i := slices.IndexFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == c.owner.uid }); i >= 0 {
			t.Errorf("shared dependent %s still refers to the deleted owner", o)
		}
		if i := slices.IndexFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == by.keeper.uid }); i < 0 {
			t.Errorf("shared dependent %s lost its reference to the live keeper", o)
		}
	}
	by.check(t)
	checkSafety(t, ns)
}

// checkForegroundOwner requires the cascade's owner to be waiting for its
// dependents: present, being deleted, with the foregroundDeletion finalizer.
func checkForegroundOwner(ctx context.Context, c cascade) error {
	m, err := c.owner.client().Get(ctx, c.owner.name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	if m.UID != c.owner.uid || m.DeletionTimestamp == nil || !slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
		return fmt.Errorf("owner not waiting in foreground deletion: uid %s, deletionTimestamp %v, finalizers %v", m.UID, m.DeletionTimestamp, m.Finalizers)
	}
	return nil
}

// stableCount waits until the number of dependents left holds still for
// half a second and returns it.
func stableCount(t *testing.T, c cascade) int {
	t.Helper()
	last, since := -1, time.Now()
	poll(t, "the dependent count to settle", func(ctx context.Context) (bool, error) {
		n, err := c.left(ctx)
		if err != nil {
			return false, err
		}
		if n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 500*time.Millisecond, nil
	})
	return last
}

// consistently requires cond to hold at every poll for d.
func consistently(t *testing.T, d time.Duration, what string, cond func(context.Context) error) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if err := cond(t.Context()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(end) {
			return
		}
		time.Sleep(pollInterval)
	}
}

// startKGC starts `kgc run` without leader election at a production-like
// budget (20 QPS, burst 30) and logging every deletion (-v=2). A cleanup
// kills and reaps it and shows its log if the test failed.
func startKGC(t *testing.T, name string) *testenv.Proc {
	t.Helper()
	return testenv.StartProc(t, name, waitTimeout, kgcBinary, "run",
		"--kubeconfig", cp.KubeconfigPath,
		"--leader-elect=false",
		"--http-address=127.0.0.1:0", "--secure-port=0",
		"--kube-api-qps=20", "--kube-api-burst=30",
		"-v=2",
	)
}
