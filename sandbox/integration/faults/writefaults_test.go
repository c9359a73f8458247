package faults

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
)

const (
	// faultCascade is the size of each of the three cascades.
	faultCascade = 200
	// faultRate is the fraction of kgc's writes that fail.
	faultRate = 0.3
	// maxAttemptsFactor bounds all write attempts: at most this many times
	// the writes needed. With 30% failures about 1.45 attempts are expected
	// per write.
	maxAttemptsFactor = 3
	// maxAttemptsPerObject bounds the attempts at one object, beyond its
	// forced failures (0.3^15 is about 1e-8).
	maxAttemptsPerObject = 15

	// probeCascade is the size of the backoff probe: a Background cascade
	// run once the queues are idle, whose dependents' DELETEs fail
	// probeFailures times in a row before the random faults apply.
	probeCascade  = 5
	probeFailures = 6
	// baseBackoff is kgc's per-item backoff after an item's first failure;
	// it doubles with every further failure (up to a minute).
	baseBackoff = 5 * time.Millisecond
)

// probe reports whether a name belongs to the backoff probe's dependents.
func probe(name string) bool { return strings.HasPrefix(name, "probe-") && name != "probe-owner" }

// TestInjectedWriteFaults runs a Background, a Foreground and an Orphan
// cascade of 200 dependents each while a seeded 30% of kgc's writes (DELETE
// and PATCH in the test's namespace) fail with 409 Conflict, 500 or 503
// (without Retry-After, so client-go does not retry them itself). Every
// cascade must end right and nothing else may be deleted. kgc must not
// hot-loop: the write attempts stay within 3× the writes needed and at
// most 15 per object. Then a backoff probe: with kgc idle, the DELETEs of a
// small cascade's dependents fail six times in a row, and the attempts at
// each must be spread by kgc's per-item exponential backoff (the k-th retry
// comes at least 5 ms × 2^(k-1) after the attempt before it).
func TestInjectedWriteFaults(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "writefaults")
	by := createBystanders(t, configMaps, ns, 20)
	bg := createCascade(t, configMaps, ns, "bg", faultCascade, false)
	fg := createCascade(t, configMaps, ns, "fg", faultCascade, true)
	or := createCascadeLabels(t, configMaps, ns, "or", faultCascade, false, protected(nil))
	pr := createCascade(t, configMaps, ns, "probe", probeCascade, false)

	prefix := "/api/v1/namespaces/" + ns + "/"
	ft := faultproxy.New(faultproxy.Config{
		Seed:             seed(t),
		WriteFailureRate: faultRate,
		Codes:            []int{http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable},
		Eligible:         func(r *http.Request) bool { return faultproxy.HasPrefix(r, prefix) },
		Stubborn: func(r *http.Request) int {
			if probe(path.Base(r.URL.Path)) {
				return probeFailures
			}
			return 0
		},
	})
	// A budget that keeps the run short; it is the backoff, not the
	// client's rate limiter, that must spread the retries.
	startInProcess(t, ft, 200, 400)

	began := time.Now()
	bg.deleteOwner(t, metav1.DeletePropagationBackground)
	fg.deleteOwner(t, metav1.DeletePropagationForeground)
	or.deleteOwner(t, metav1.DeletePropagationOrphan)
	bg.waitGone(t)
	fg.waitGone(t)
	poll(t, "the Orphan cascade to end", func(ctx context.Context) (bool, error) {
		if gone, err := or.ownerGone(ctx); !gone || err != nil {
			return false, err
		}
		return orphaned(ctx, or) == nil, nil
	})
	t.Logf("three cascades of %d ended in %s under faults; transport: %s", faultCascade, time.Since(began).Round(time.Millisecond), ft)
	if err := orphaned(ctx, or); err != nil {
		t.Error(err)
	}

	// The writes needed: a DELETE per Background and Foreground dependent,
	// a PATCH per Orphan dependent, and a finalizer PATCH per Foreground
	// and Orphan owner.
	needed := map[string]bool{}
	for _, c := range []cascade{bg, fg, or} {
		method := http.MethodDelete
		if c.name == "or" {
			method = http.MethodPatch
		}
		for i := range c.size {
			needed[method+" "+prefix+"configmaps/"+fmt.Sprintf("%s-%03d", c.name, i)] = true
		}
	}
	needed[http.MethodPatch+" "+prefix+"configmaps/"+fg.owner.name] = true
	needed[http.MethodPatch+" "+prefix+"configmaps/"+or.owner.name] = true

	attempts := writesByObject(ft, prefix)
	var total, injected, conflicts int
	for _, rs := range attempts {
		for _, r := range rs {
			total++
			switch {
			case r.Injected:
				injected++
			case r.Status == http.StatusConflict:
				conflicts++
			}
		}
	}
	t.Logf("writes: %d needed, %d attempted (%.2f per needed write), %d failures injected, %d real conflicts, %d objects written",
		len(needed), total, float64(total)/float64(len(needed)), injected, conflicts, len(attempts))
	if injected == 0 {
		t.Fatal("no fault was injected")
	}
	if limit := maxAttemptsFactor * len(needed); total > limit {
		t.Errorf("%d write attempts for %d needed writes, more than %d: a hot loop", total, len(needed), limit)
	}
	for key := range needed {
		if !succeeded(attempts[key]) {
			t.Errorf("%s: no successful attempt among %d", key, len(attempts[key]))
		}
	}
	worst, worstKey := 0, ""
	for key, rs := range attempts {
		if len(rs) > maxAttemptsPerObject {
			t.Errorf("%s: %d attempts, more than %d", key, len(rs), maxAttemptsPerObject)
		}
		if len(rs) > worst {
			worst, worstKey = len(rs), key
		}
	}
	t.Logf("most attempts at one object: %d (%s)", worst, worstKey)

	// The backoff probe, on idle queues.
	began = time.Now()
	pr.deleteOwner(t, metav1.DeletePropagationBackground)
	pr.waitGone(t)
	t.Logf("probe cascade ended in %s", time.Since(began).Round(time.Millisecond))
	attempts = writesByObject(ft, prefix+"configmaps/probe-")
	if len(attempts) != probeCascade {
		t.Errorf("writes to %d probe dependents, want %d", len(attempts), probeCascade)
	}
	for key, rs := range attempts {
		t.Logf("probe %s: attempts at %s", path.Base(key), offsets(rs))
		if len(rs) <= probeFailures || !succeeded(rs) {
			t.Errorf("%s: %d attempts, want %d forced failures and then a success", key, len(rs), probeFailures)
			continue
		}
		if len(rs) > probeFailures+maxAttemptsPerObject {
			t.Errorf("%s: %d attempts, more than %d", key, len(rs), probeFailures+maxAttemptsPerObject)
		}
		for k := 1; k <= probeFailures; k++ {
			gap := rs[k].Start.Sub(rs[k-1].Start)
			if least := baseBackoff << (k - 1); gap < least {
				t.Errorf("%s: retry %d came %s after the failure before it, want at least %s of backoff (attempts at %s)",
					key, k, gap, least, offsets(rs))
			}
		}
	}

	by.check(t)
	checkSafety(t, ns)
}

// writesByObject returns the recorded writes under prefix by method and
// path, each in the order sent.
func writesByObject(ft *faultproxy.Transport, prefix string) map[string][]faultproxy.Request {
	out := map[string][]faultproxy.Request{}
	for _, r := range ft.Writes() {
		if strings.HasPrefix(r.Path, prefix) {
			key := r.Method + " " + r.Path
			out[key] = append(out[key], r)
		}
	}
	for _, rs := range out {
		slices.SortFunc(rs, func(a, b faultproxy.Request) int { return a.Start.Compare(b.Start) })
	}
	return out
}

// succeeded reports whether one of the attempts got through: 2xx, or 404
// for an object already gone.
func succeeded(rs []faultproxy.Request) bool {
	return slices.ContainsFunc(rs, func(r faultproxy.Request) bool {
		return !r.Injected && (r.Status/100 == 2 || r.Status == http.StatusNotFound)
	})
}

// orphaned checks that every dependent of c exists, is not being deleted
// and no longer refers to c's owner.
func orphaned(ctx context.Context, c cascade) error {
	list, err := metadataClient.Resource(c.gvr()).Namespace(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelCascade + "=" + c.name})
	if err != nil {
		return err
	}
	if len(list.Items) != c.size {
		return fmt.Errorf("orphan cascade %s: %d of %d dependents exist", c.name, len(list.Items), c.size)
	}
	for _, m := range list.Items {
		if m.DeletionTimestamp != nil {
			return fmt.Errorf("orphaned dependent %s is being deleted", m.Name)
		}
		if slices.ContainsFunc(m.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == c.owner.uid }) {
			return fmt.Errorf("dependent %s still refers to the orphaning owner", m.Name)
		}
	}
	return nil
}

// offsets renders attempt times relative to the first.
func offsets(rs []faultproxy.Request) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("+%s(%d)", r.Start.Sub(rs[0].Start).Round(time.Millisecond), r.Status)
	}
	return out
}
