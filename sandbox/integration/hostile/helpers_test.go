package hostile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	waitTimeout  = 60 * time.Second
	pollInterval = 100 * time.Millisecond
)

// newNamespace creates a namespace removed (with its ConfigMaps) when t ends.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	if name == "" {
		name = "h-" + utilrand.String(8)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { removeNamespace(t, name) })
	return name
}

func removeNamespace(t *testing.T, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	bg := metav1.DeletePropagationBackground
	if err := kubeClient.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
		t.Logf("cleanup: delete configmaps in %s: %v", ns, err)
	}
	if err := testenv.DeleteNamespace(ctx, kubeClient, ns, metav1.DeleteOptions{}); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// cm creates a ConfigMap.
func cm(t *testing.T, ns, name string, refs ...metav1.OwnerReference) *corev1.ConfigMap {
	t.Helper()
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: refs}}
	out, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), c, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ConfigMap %s/%s: %v", ns, name, err)
	}
	return out
}

func cmRef(c *corev1.ConfigMap) metav1.OwnerReference {
	return testenv.OwnerRef("v1", "ConfigMap", c.Name, c.UID, false)
}

// getCM returns the ConfigMap or nil when it is gone (or replaced).
func getCM(t *testing.T, c *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	out, err := kubeClient.CoreV1().ConfigMaps(c.Namespace).Get(t.Context(), c.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get ConfigMap %s/%s: %v", c.Namespace, c.Name, err)
	}
	if out.UID != c.UID {
		return nil
	}
	return out
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
}

func waitGone(t *testing.T, c *corev1.ConfigMap) {
	t.Helper()
	waitFor(t, fmt.Sprintf("ConfigMap %s/%s to be collected", c.Namespace, c.Name), func() bool { return getCM(t, c) == nil })
}

// stays checks, polling over d, that c stays present and not being deleted.
// Call it only after evidence that kgc has looked at c, so that it cannot
// pass just because kgc did not get to c yet.
func stays(t *testing.T, c *corev1.ConfigMap, d time.Duration) *corev1.ConfigMap {
	t.Helper()
	var cur *corev1.ConfigMap
	for end := time.Now().Add(d); ; {
		cur = getCM(t, c)
		if cur == nil || cur.DeletionTimestamp != nil {
			t.Fatalf("ConfigMap %s/%s was deleted; it must be kept", c.Namespace, c.Name)
		}
		if time.Now().After(end) {
			return cur
		}
		time.Sleep(pollInterval * 2)
	}
}

// waitEvent waits for an Event with reason about the object with uid.
func waitEvent(t *testing.T, ns string, uid types.UID, reason string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	sel := fields.Set{"involvedObject.uid": string(uid), "reason": reason}.String()
	waitFor(t, fmt.Sprintf("a %s event about %s", reason, uid), func() bool {
		l, err := kubeClient.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		found = &l.Items[0]
		return true
	})
	return found
}

// metric returns the sum of the samples of the named counter or gauge whose
// labels include want.
func metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := registry.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n := 0
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
					n++
				}
			}
			if n != len(want) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				sum += g.GetValue()
			}
		}
	}
	return sum
}

// boundedRetries watches, over window, how often kgc counts an unresolvable
// reference (reason) and how many requests it sends, and fails t if either
// exceeds its bound: a reference kgc cannot act on must be retried with
// back-off, not in a tight loop.
func boundedRetries(t *testing.T, reason string, window time.Duration, maxAttempts float64, maxRequests int64) {
	t.Helper()
	labels := map[string]string{"reason": reason}
	a0, r0 := metric(t, "kgc_unresolvable_references_total", labels), requests.total.Load()
	time.Sleep(window) // a measurement window, not an assertion by itself
	a1, r1 := metric(t, "kgc_unresolvable_references_total", labels), requests.total.Load()
	t.Logf("over %s: %v more %s attempts, %d requests from kgc", window, a1-a0, reason, r1-r0)
	if a1-a0 > maxAttempts {
		t.Errorf("kgc retried an unresolvable (%s) reference %v times in %s; want at most %v (back-off)", reason, a1-a0, window, maxAttempts)
	}
	if r1-r0 > maxRequests {
		t.Errorf("kgc sent %d requests in %s while idle except for unresolvable references; want at most %d", r1-r0, window, maxRequests)
	}
}

// longName returns a valid DNS subdomain of exactly n characters.
func longName(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix)-1) + "z"
}

// quiet checks that, once a case's outcome is reached, kgc does not keep
// working on it: its requests over a few seconds stay under a small bound
// (the periodic rediscovery and the monitors' watch renewals fit in it; a
// hot retry loop does not).
func quiet(t *testing.T) {
	t.Helper()
	const window, bound = 3 * time.Second, 100
	r0 := requests.total.Load()
	time.Sleep(window) // a measurement window; the assertion is the bound below
	if n := requests.total.Load() - r0; n > bound {
		t.Errorf("kgc sent %d requests in the %s after the outcome; want at most %d (no hot loop)", n, window, bound)
	}
	alive(t)
}

// logged checks that kgc logged a line containing every one of parts.
func logged(t *testing.T, parts ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("a log line with %q", parts), func() bool {
		_, ok := logs.find(parts...)
		return ok
	})
}
