package hostile

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

func TestHostile(t *testing.T) {
	t.Run("UnknownKind", testUnknownKind)
	t.Run("UnservedVersion", testUnservedVersion)
	t.Run("WrongNameForLiveUID", testWrongNameForLiveUID)
	t.Run("CrossNamespaceOwner", testCrossNamespaceOwner)
	t.Run("ClusterScopedDependentOfNamespacedOwner", testClusterScopedDependent)
	t.Run("DuplicateReferences", testDuplicateReferences)
	t.Run("TwoHundredOwnerReferences", test200OwnerReferences)
	t.Run("LongNames", testLongNames)
	t.Run("LargeCascade", testLargeCascade)
	alive(t)
}

// A reference to a kind no API serves is never dangling: the object is kept,
// kgc says why (Event + log line) and re-checks with back-off.
func testUnknownKind(t *testing.T) {
	ns := newNamespace(t, "")
	unknown := testenv.OwnerRef("nothing.kgc.test/v1", "Nonexistent", "ghost", testenv.RandomUID(), true)
	d := cm(t, ns, "unknown-kind", unknown)
	// Also with a dangling reference next to it: still kept.
	d2 := cm(t, ns, "unknown-kind-and-dangling", unknown, testenv.OwnerRef("v1", "ConfigMap", "gone", testenv.RandomUID(), false))

	ev := waitEvent(t, ns, d.UID, "OwnerRefKindNotServed")
	t.Logf("event: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %q, want Warning", ev.Type)
	}
	waitEvent(t, ns, d2.UID, "OwnerRefKindNotServed")
	waitFor(t, "a log line about the unresolvable reference", func() bool {
		_, ok := logs.find("cannot be resolved", ns+"/unknown-kind", "Nonexistent")
		return ok
	})
	line, _ := logs.find("cannot be resolved", ns+"/unknown-kind", "Nonexistent")
	t.Logf("log: %s", line)
	stays(t, d, 2*time.Second)
	stays(t, d2, 0)
	// Two objects retried with exponential back-off (5ms doubling): a few
	// attempts each over the window, not hundreds.
	boundedRetries(t, "kind_not_served", 6*time.Second, 30, 300)
	stays(t, d, 0)
	stays(t, d2, 0)
	alive(t)
}

func deployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "fake"}}},
			},
		},
	}
	out, err := kubeClient.AppsV1().Deployments(ns).Create(t.Context(), dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	return out
}

// apps/v1beta1 is no longer served; a reference in that version resolves
// through the served apps/v1 Deployment: kept while the owner lives,
// collected once it is gone. A reference in an unserved version to an owner
// that does not exist is dangling, not unresolvable.
func testUnservedVersion(t *testing.T) {
	ns := newNamespace(t, "")
	owner := deployment(t, ns, "owner")
	d := cm(t, ns, "old-version-ref", testenv.OwnerRef("apps/v1beta1", "Deployment", owner.Name, owner.UID, true))
	missing := cm(t, ns, "old-version-missing", testenv.OwnerRef("apps/v1beta1", "Deployment", "nobody", testenv.RandomUID(), false))
	// The missing owner's dependent is collected, which shows kgc resolved
	// the unserved version (an unresolvable reference would keep it).
	waitGone(t, missing)
	logged(t, "Deleting garbage", ns+"/old-version-missing")
	stays(t, d, 2*time.Second)
	if err := kubeClient.AppsV1().Deployments(ns).Delete(t.Context(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Deployment: %v", err)
	}
	waitGone(t, d)
	quiet(t)
}

// A reference naming object X with the UID of live object Y is dangling for
// its dependent (collected), and Y is untouched; a correct reference to Y in
// the same namespace is unaffected by the wrong one (the absent cache is
// keyed by the full coordinates).
func testWrongNameForLiveUID(t *testing.T) {
	ns := newNamespace(t, "")
	y := cm(t, ns, "owner-y")
	cm(t, ns, "owner-x")
	wrong := cm(t, ns, "wrong-name", testenv.OwnerRef("v1", "ConfigMap", "owner-x", y.UID, true))
	right := cm(t, ns, "right-name", cmRef(y))
	waitGone(t, wrong)
	stays(t, right, 2*time.Second)
	if cur := stays(t, y, 0); len(cur.Finalizers) != 0 || cur.ResourceVersion != y.ResourceVersion {
		t.Errorf("owner Y was modified: finalizers %v, resourceVersion %s -> %s", cur.Finalizers, y.ResourceVersion, cur.ResourceVersion)
	}
	logged(t, "Deleting garbage", ns+"/wrong-name")
	quiet(t)
}

// A reference to an object in another namespace is dangling: the dependent
// is collected, the other namespace's object is untouched, and a Warning
// OwnerRefInvalidNamespace names the real owner's namespace.
func testCrossNamespaceOwner(t *testing.T) {
	nsA := newNamespace(t, "")
	nsB := newNamespace(t, "")
	owner := cm(t, nsA, "owner")
	d := cm(t, nsB, "cross-ns", cmRef(owner))
	ev := waitEvent(t, nsB, d.UID, "OwnerRefInvalidNamespace")
	t.Logf("event: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	waitGone(t, d)
	stays(t, owner, 0)
	quiet(t)
}

// A cluster-scoped object that names a namespaced owner is never collected,
// not even once that owner is deleted; kgc counts the invalid reference, logs
// it and does not retry it in a loop.
func testClusterScopedDependent(t *testing.T) {
	ns := newNamespace(t, "")
	owner := cm(t, ns, "owner")
	name := "hostile-" + utilrand.String(8)
	before := metric(t, "kgc_unresolvable_references_total", map[string]string{"reason": "invalid"})
	cr, err := kubeClient.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{cmRef(owner)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ClusterRole: %v", err)
	}
	t.Cleanup(func() {
		_ = kubeClient.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitFor(t, "kgc to count the invalid reference", func() bool {
		return metric(t, "kgc_unresolvable_references_total", map[string]string{"reason": "invalid"}) > before
	})
	waitFor(t, "a log line about the invalid reference", func() bool {
		_, ok := logs.find("cannot be resolved", name, "invalid")
		return ok
	})
	line, _ := logs.find("cannot be resolved", name, "invalid")
	t.Logf("log: %s", line)
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), owner.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete owner: %v", err)
	}
	// Kept, untouched, and not retried in a loop.
	boundedRetries(t, "invalid", 5*time.Second, 5, 300)
	got, err := kubeClient.RbacV1().ClusterRoles().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil || got.UID != cr.UID || got.DeletionTimestamp != nil || len(got.OwnerReferences) != 1 {
		t.Fatalf("ClusterRole %s must be kept untouched: %v %v", name, err, got)
	}
	alive(t)
}

// The same owner referenced twice (the apiserver may collapse exact
// duplicates; whatever it stores, kgc must handle): kept while the owner
// lives, collected once it is gone; orphaning removes every reference to
// the owner; a dangling reference next to duplicates goes, the duplicates
// stay.
func testDuplicateReferences(t *testing.T) {
	ns := newNamespace(t, "")
	a := cm(t, ns, "owner-a")
	d := cm(t, ns, "dup", cmRef(a), cmRef(a))
	// Same UID, different block flag and name: not an exact duplicate.
	d2 := cm(t, ns, "dup-variant", cmRef(a), testenv.OwnerRef("v1", "ConfigMap", a.Name, a.UID, true))
	t.Logf("the apiserver stored %d of 2 exact duplicates and %d of 2 same-UID references", len(d.OwnerReferences), len(d2.OwnerReferences))
	b := cm(t, ns, "owner-b")
	e := cm(t, ns, "dup-orphaned", cmRef(b), cmRef(b))
	dangling := testenv.OwnerRef("v1", "ConfigMap", "nobody", testenv.RandomUID(), false)
	f := cm(t, ns, "dup-and-dangling", cmRef(a), dangling, cmRef(a))
	waitFor(t, "the dangling reference to be removed", func() bool {
		cur := getCM(t, f)
		if cur == nil {
			t.Fatalf("%s was collected while its owner lives", f.Name)
		}
		for _, r := range cur.OwnerReferences {
			if r.UID != a.UID {
				return false
			}
		}
		return len(cur.OwnerReferences) == len(f.OwnerReferences)-1
	})
	logged(t, "Removing dangling", ns+"/dup-and-dangling")
	stays(t, d, time.Second)
	stays(t, d2, 0)

	orphan := metav1.DeletePropagationOrphan
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), b.Name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatalf("delete owner-b: %v", err)
	}
	waitGone(t, b)
	if cur := stays(t, e, 0); len(cur.OwnerReferences) != 0 {
		t.Errorf("orphaned dependent still has references %v", cur.OwnerReferences)
	}
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), a.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete owner-a: %v", err)
	}
	waitGone(t, d)
	waitGone(t, d2)
	waitGone(t, f)
	quiet(t)
}

// 200 ownerReferences, 100 to live owners and 100 dangling: kept while any
// owner lives (the dangling ones are removed), collected once all are gone.
func test200OwnerReferences(t *testing.T) {
	ns := newNamespace(t, "")
	var owners []*corev1.ConfigMap
	var refs []metav1.OwnerReference
	for i := range 100 {
		o := cm(t, ns, fmt.Sprintf("owner-%03d", i))
		owners = append(owners, o)
		refs = append(refs, testenv.OwnerRef("v1", "ConfigMap", o.Name, o.UID, i%2 == 0))
		refs = append(refs, testenv.OwnerRef("v1", "ConfigMap", fmt.Sprintf("missing-%03d", i), testenv.RandomUID(), i%3 == 0))
	}
	d := cm(t, ns, "many-owners", refs...)
	if len(d.OwnerReferences) != 200 {
		t.Fatalf("created with %d references, want 200", len(d.OwnerReferences))
	}
	waitFor(t, "the 100 dangling references to be removed", func() bool {
		cur := getCM(t, d)
		return cur != nil && len(cur.OwnerReferences) == 100
	})
	logged(t, "Removing dangling", ns+"/many-owners")
	for _, o := range owners[:99] {
		if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), o.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", o.Name, err)
		}
	}
	// Evidence that kgc processed the deletions: the references to the
	// deleted owners disappear; the object stays for its last owner.
	waitFor(t, "the references to the 99 deleted owners to be removed", func() bool {
		cur := getCM(t, d)
		if cur == nil {
			t.Fatalf("%s was collected while owner %s lives", d.Name, owners[99].Name)
		}
		return len(cur.OwnerReferences) == 1
	})
	stays(t, d, time.Second)
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), owners[99].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the last owner: %v", err)
	}
	waitGone(t, d)
	quiet(t)
}

// Names of the maximal length (253 for ConfigMaps, 63 for the namespace and
// a label value): kept while the owner lives, collected in a Foreground
// cascade; a long-named dependent of an owner in another namespace is
// collected, and the Event about it is recorded.
func testLongNames(t *testing.T) {
	ns := newNamespace(t, longName("h-", 63))
	owner := cm(t, ns, longName("owner-", 253))
	d := cm(t, ns, longName("dep-", 253), testenv.OwnerRef("v1", "ConfigMap", owner.Name, owner.UID, true))
	grand := cm(t, ns, longName("grand-", 253), testenv.OwnerRef("v1", "ConfigMap", d.Name, d.UID, true))
	other := newNamespace(t, "")
	cross := cm(t, other, longName("cross-", 253), cmRef(owner))
	waitGone(t, cross)
	ev := waitEvent(t, other, cross.UID, "OwnerRefInvalidNamespace")
	t.Logf("event %s about a %d-character name: %s", ev.Name, len(cross.Name), ev.Message[:60])
	stays(t, d, time.Second)
	stays(t, grand, 0)
	fg := metav1.DeletePropagationForeground
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), owner.Name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatalf("delete owner: %v", err)
	}
	waitGone(t, grand)
	waitGone(t, d)
	waitGone(t, owner)
	quiet(t)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// One owner with 20,000 dependents (created concurrently): a Background
// cascade completes; then a Foreground one. The times are logged.
func testLargeCascade(t *testing.T) {
	for _, c := range []struct {
		policy metav1.DeletionPropagation
		n      int
	}{
		{metav1.DeletePropagationBackground, envInt(t, "KGC_HOSTILE_DEPENDENTS", 20000)},
		{metav1.DeletePropagationForeground, envInt(t, "KGC_HOSTILE_FOREGROUND_DEPENDENTS", 2000)},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.policy, c.n), func(t *testing.T) { largeCascade(t, c.policy, c.n) })
	}
}

func largeCascade(t *testing.T, policy metav1.DeletionPropagation, n int) {
	ns := newNamespace(t, "")
	owner := cm(t, ns, "owner")
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	next := make(chan int)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("dep-%05d", i), OwnerReferences: []metav1.OwnerReference{cmRef(owner)},
				}}
				if _, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	func() {
		defer close(next)
		for i := range n {
			select {
			case next <- i:
			case err := <-errs:
				t.Errorf("create dependent: %v", err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create dependent: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("created %d dependents in %s", n, time.Since(start).Round(time.Millisecond))
	if got := count(t, ns); got != n+1 {
		t.Fatalf("%d ConfigMaps in the namespace, want %d", got, n+1)
	}

	start = time.Now()
	req0 := requests.total.Load()
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
		t.Fatalf("delete owner: %v", err)
	}
	left := -1
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		left = count(t, ns)
		return left == 0, nil
	})
	if err != nil {
		t.Fatalf("%s cascade of %d dependents did not complete in 10m: %d objects left", policy, n, left)
	}
	d := time.Since(start)
	reqs := requests.total.Load() - req0
	t.Logf("%s cascade of %d dependents completed in %s (%.0f objects/s, %d kgc requests = %.2f per dependent)",
		policy, n, d.Round(time.Millisecond), float64(n)/d.Seconds(), reqs, float64(reqs)/float64(n))
	alive(t)
}

// count returns how many ConfigMaps ns holds (one cheap paginated list).
func count(t *testing.T, ns string) int {
	t.Helper()
	l, err := metadataClient.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns).
		List(t.Context(), metav1.ListOptions{Limit: 1})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return 0
		}
		t.Fatalf("list ConfigMaps: %v", err)
	}
	n := len(l.Items)
	if l.RemainingItemCount != nil {
		n += int(*l.RemainingItemCount)
	}
	return n
}
