package breaker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// A simulated restore at kgc run's default thresholds: ConfigMaps created
// in bulk, each naming a Deployment that never existed. The breaker lets
// exactly its limit go, trips, and says so (Lease, Event, /readyz, metrics,
// explain, kgc breaker status); nothing more is deleted, also across a
// restart of kgc; `kgc breaker resume` lets the rest go.
func TestSimulatedRestoreTripsBreaker(t *testing.T) {
	ns := newNamespace(t)
	opts := kgc.Options{Breaker: breakerOptions(ns), HoldRestored: true}
	limit := opts.Breaker.UnobservedOwners
	const n = 500
	gc := startKGC(t, opts)

	createSet(t, ns, "restored", n, func(i int) []metav1.OwnerReference {
		return []metav1.OwnerReference{testenv.OwnerRef("apps/v1", "Deployment", fmt.Sprintf("gone-%d", i), testenv.RandomUID(), true)}
	})
	// Every object decided: the limit deleted, the rest held.
	waitFor(t, "kgc to decide every restored object", func() (bool, error) {
		r := gc.holds(t)
		return r.Breaker != nil && r.Breaker.HeldTotal == n-limit, nil
	})
	if got := count(t, ns, "restored"); got != n-limit {
		t.Fatalf("%d of %d restored objects left, want %d: the breaker let %d go, its limit is %d", got, n, n-limit, n-got, limit)
	}
	if d := gc.deletes(t); d != limit {
		t.Fatalf("kgc made %d DELETEs, want the limit %d", d, limit)
	}
	t.Logf("THRESHOLD BEHAVIOUR (defaults: window %s, unobserved-owner limit %d): %d of %d restored objects deleted before the breaker tripped",
		opts.Breaker.Window, limit, n-count(t, ns, "restored"), n)

	// It says so.
	r := gc.holds(t)
	if len(r.Breaker.Trips) != 1 || r.Breaker.Trips[0].Signal != breaker.Unobserved || r.Breaker.Trips[0].Count != limit+1 {
		t.Fatalf("trips %+v, want one %s at %d", r.Breaker.Trips, breaker.Unobserved, limit+1)
	}
	if v := gc.metric(t, "kgc_deletion_breaker_tripped", map[string]string{"signal": "unobserved-owners"}); v != 1 {
		t.Errorf("kgc_deletion_breaker_tripped{unobserved-owners} = %v, want 1", v)
	}
	if v := gc.metric(t, "kgc_held_objects", map[string]string{"reason": "unobserved-owners"}); v != n-float64(limit) {
		t.Errorf("kgc_held_objects{unobserved-owners} = %v, want %d", v, n-limit)
	}
	readyz := gc.get(t, "/readyz?verbose")
	if !strings.Contains(readyz, "[-]deletion-breaker:unobserved-owners") || !strings.Contains(readyz, "readyz check passed") {
		t.Errorf("/readyz?verbose:\n%s", readyz)
	}
	t.Logf("/readyz?verbose:\n%s", readyz)
	waitFor(t, "the trip recorded on the Lease", func() (bool, error) {
		l, err := kubeClient.CoordinationV1().Leases(ns).Get(t.Context(), "kgc", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		st, err := breaker.ParseState(l.Annotations)
		return len(st.Active()) == 1, err
	})
	waitFor(t, "an Event on the Lease", func() (bool, error) {
		evs, err := kubeClient.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "kgc").String()})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "DeletionsHeld" && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "Lease" {
				t.Logf("Event: %s %s: %s", e.Type, e.Reason, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
	held := r.Breaker.Held[0]
	_, name, _ := strings.Cut(strings.Fields(held.Object)[1], "/") // "ConfigMap.v1 ns/name (uid …)"
	out := mustCLI(t, "explain", "configmap/"+name, "-n", ns, "--kgc-url", gc.url, "--kubeconfig", kubeconfigPath)
	if !strings.Contains(out, "Held:    since") || !strings.Contains(out, "the deletion circuit breaker tripped at") ||
		!strings.Contains(out, "kgc breaker resume --lease-namespace "+ns+" --lease-name kgc") {
		t.Errorf("explain of a held object:\n%s", out)
	}
	out = mustCLI(t, "breaker", "status", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath, "--kgc-url", gc.url)
	if !strings.Contains(out, "TRIPPED unobserved-owners at") || !strings.Contains(out, fmt.Sprintf("held: %d", n-limit)) {
		t.Errorf("kgc breaker status:\n%s", out)
	}

	// A restart does not resume: the new kgc reads the trip from the Lease
	// and deletes nothing.
	gc.stop(t)
	gc = startKGC(t, opts)
	waitFor(t, "the restarted kgc to hold every restored object", func() (bool, error) {
		r := gc.holds(t)
		return r.Breaker != nil && r.Breaker.HeldTotal == n-limit, nil
	})
	if got, d := count(t, ns, "restored"), gc.deletes(t); got != n-limit || d != 0 {
		t.Fatalf("after a restart: %d left (want %d), %d DELETEs (want 0)", got, n-limit, d)
	}

	// Resumed: everything goes.
	out = mustCLI(t, "breaker", "resume", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath)
	if !strings.Contains(out, "Resumed unobserved-owners") {
		t.Errorf("kgc breaker resume:\n%s", out)
	}
	waitFor(t, "every restored object deleted after resume", func() (bool, error) { return count(t, ns, "restored") == 0, nil })
	if r := gc.holds(t); len(r.Breaker.Trips) != 0 || r.Breaker.HeldTotal != 0 {
		t.Errorf("after resume: trips %+v, %d held", r.Breaker.Trips, r.Breaker.HeldTotal)
	}
	mustCLI(t, "breaker", "status", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath)
}

// The variant where the owners were restored too, under new UIDs, with the
// restore-signature hold off: every dependent names a UID kgc never saw
// while its owner's name holds another. The breaker trips on them; the
// owners are never touched; a resume written by hand on the Lease (the
// documented annotation) lets the dependents go.
func TestRestoreWithRecreatedOwnersTripsBreaker(t *testing.T) {
	ns := newNamespace(t)
	opts := kgc.Options{Breaker: breakerOptions(ns)}
	opts.Breaker.UnobservedOwners = 20
	const n = 60
	gc := startKGC(t, opts)
	createSet(t, ns, "owner", n, func(int) []metav1.OwnerReference { return nil })
	createSet(t, ns, "dep", n, func(i int) []metav1.OwnerReference {
		return []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", fmt.Sprintf("owner-%d", i), testenv.RandomUID(), false)}
	})
	waitFor(t, "kgc to decide every dependent", func() (bool, error) {
		r := gc.holds(t)
		return r.Breaker.HeldTotal == n-20, nil
	})
	if got := count(t, ns, "dep"); got != n-20 {
		t.Fatalf("%d dependents left, want %d", got, n-20)
	}
	l, err := kubeClient.CoordinationV1().Leases(ns).Get(t.Context(), "kgc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trip on the Lease", func() (bool, error) {
		l, err = kubeClient.CoordinationV1().Leases(ns).Get(t.Context(), "kgc", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st, err := breaker.ParseState(l.Annotations)
		return len(st.Active()) == 1, err
	})
	// By hand, as an operator with kubectl annotate would.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := kubeClient.CoordinationV1().Leases(ns).Get(t.Context(), "kgc", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations[breaker.AnnotationResume] = time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
		_, err = kubeClient.CoordinationV1().Leases(ns).Update(t.Context(), l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every dependent deleted after resume", func() (bool, error) { return count(t, ns, "dep") == 0, nil })
	if got := count(t, ns, "owner"); got != n {
		t.Fatalf("%d owners left, want all %d", got, n)
	}
}

// A user's ordinary cascades at the default thresholds: a Job-like owner
// with 1,500 direct dependents and a Deployment-like chain (owner → one
// middle owner → 1,000 dependents), both deleted with Background. Each
// cascade has more dependents than either limit (200 unobserved, 1,000
// dangling), so a breaker that counted dependents would trip; kgc's counts
// no owner whose deletion it observed, and everything goes. (Sizes: the sandbox's
// apiserver runs under -race on a shared machine, where 5,000 objects take
// minutes to create; the counting does not depend on the size.)
func TestOrdinaryCascadeDoesNotTrip(t *testing.T) {
	ns := newNamespace(t)
	opts := kgc.Options{Breaker: breakerOptions(ns), HoldRestored: true}
	gc := startKGC(t, opts)
	const jobPods, rsPods = 1500, 1000
	job, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "job"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deploy, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deploy"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rs",
		OwnerReferences: []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", "deploy", deploy.UID, true)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createSet(t, ns, "pod-of-job", jobPods, func(int) []metav1.OwnerReference {
		return []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", "job", job.UID, true)}
	})
	createSet(t, ns, "pod-of-rs", rsPods, func(int) []metav1.OwnerReference {
		return []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", "rs", rs.UID, true)}
	})
	bg := metav1.DeletePropagationBackground
	for _, name := range []string{"job", "deploy"} {
		if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if t.Failed() {
			r := gc.holds(t)
			t.Logf("left: %d of the job's, %d of the rs's; breaker %+v", count(t, ns, "pod-of-job"), count(t, ns, "pod-of-rs"), r.Breaker)
		}
	}()
	waitWithin(t, 5*time.Minute, "both cascades finished", func() (bool, error) {
		return count(t, ns, "pod-of-job") == 0 && count(t, ns, "pod-of-rs") == 0, nil
	})
	r := gc.holds(t)
	if len(r.Breaker.Trips) != 0 || r.Breaker.HeldTotal != 0 {
		t.Fatalf("an ordinary cascade tripped the breaker: %+v", r.Breaker)
	}
	if c := r.Breaker.Counts[breaker.Dangling]; c != 0 {
		t.Errorf("the dangling fraction counted %d owners, want 0 (off by default; and both owners were observed going)", c)
	}
	if c := r.Breaker.Counts[breaker.Unobserved]; c != 0 {
		t.Errorf("%d deletions counted as resting on unobserved owners, want 0", c)
	}
	if d := gc.deletes(t); d != jobPods+rsPods+1 {
		t.Errorf("%d DELETEs, want %d", d, jobPods+rsPods+1)
	}
}

// The restore signature: dependents naming a UID kgc never saw while an
// object of that kind and name exists with another UID are held (never
// counted, never deleted) while a dependent of an owner that never existed
// goes as upstream's would. kgc relink rewrites a reference on request
// (dry run first), and --all-held the rest; once relinked they follow
// their owner again.
func TestRestoreHoldAndRelink(t *testing.T) {
	ns := newNamespace(t)
	gc := startKGC(t, kgc.Options{Breaker: breakerOptions(ns), HoldRestored: true})
	web, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := testenv.RandomUID()
	createSet(t, ns, "dep", 5, func(int) []metav1.OwnerReference {
		return []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", "web", old, true)}
	})
	createSet(t, ns, "orphan", 1, func(int) []metav1.OwnerReference {
		return []metav1.OwnerReference{testenv.OwnerRef("v1", "ConfigMap", "never", testenv.RandomUID(), true)}
	})
	waitFor(t, "the restore holds and the ordinary deletion", func() (bool, error) {
		return len(gc.holds(t).Restored) == 5 && count(t, ns, "orphan") == 0, nil
	})
	if got := count(t, ns, "dep"); got != 5 {
		t.Fatalf("%d held dependents left, want 5", got)
	}
	if v := gc.metric(t, "kgc_held_objects", map[string]string{"reason": "restored-owner"}); v != 5 {
		t.Errorf("kgc_held_objects{restored-owner} = %v, want 5", v)
	}
	if c := gc.holds(t).Breaker.Counts[breaker.Unobserved]; c != 1 {
		t.Errorf("the breaker counted %d unobserved deletions, want 1 (the orphan; held objects are not counted)", c)
	}
	out := mustCLI(t, "explain", "configmap/dep-0", "-n", ns, "--kgc-url", gc.url, "--kubeconfig", kubeconfigPath)
	if !strings.Contains(out, "which kgc never observed, while ConfigMap web exists with uid "+string(web.UID)) || !strings.Contains(out, "kgc relink -n "+ns+" configmap/dep-0") {
		t.Errorf("explain of a restore-held object:\n%s", out)
	}
	mustCLI(t, "breaker", "status", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath, "--kgc-url", gc.url)

	out = mustCLI(t, "relink", "configmap/dep-0", "-n", ns, "--dry-run", "--kubeconfig", kubeconfigPath)
	want := fmt.Sprintf("configmaps %s/dep-0 (uid ", ns)
	if !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("ConfigMap web: uid %s -> %s (dry run: not written)", old, web.UID)) {
		t.Errorf("relink --dry-run:\n%s", out)
	}
	if refs := ownerUIDs(t, ns, "dep-0"); refs != string(old) {
		t.Fatalf("a dry run wrote: %s", refs)
	}
	out = mustCLI(t, "relink", "configmap/dep-0", "-n", ns, "--owner-uid", string(old), "--kubeconfig", kubeconfigPath)
	if !strings.Contains(out, "(relinked)") || ownerUIDs(t, ns, "dep-0") != string(web.UID) {
		t.Fatalf("relink: %s; owner now %s", out, ownerUIDs(t, ns, "dep-0"))
	}
	// Nothing left to relink on it; an owner name that resolves to nothing
	// is refused.
	if _, err := cli(t, "relink", "configmap/dep-0", "-n", ns, "--kubeconfig", kubeconfigPath); err == nil || !strings.Contains(err.Error(), "nothing to relink") {
		t.Errorf("a second relink: %v", err)
	}
	mustCLI(t, "relink", "--all-held", "--kgc-url", gc.url, "--kubeconfig", kubeconfigPath)
	for i := range 5 {
		if got := ownerUIDs(t, ns, fmt.Sprintf("dep-%d", i)); got != string(web.UID) {
			t.Errorf("dep-%d names %s after relink --all-held, want %s", i, got, web.UID)
		}
	}
	waitFor(t, "kgc to release the relinked objects", func() (bool, error) { return len(gc.holds(t).Restored) == 0, nil })
	// Relinked, they follow their owner.
	bg := metav1.DeletePropagationBackground
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relinked dependents collected with their owner", func() (bool, error) { return count(t, ns, "dep") == 0, nil })
}

func ownerUIDs(t *testing.T, ns, name string) string {
	t.Helper()
	cm, err := kubeClient.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, r := range cm.OwnerReferences {
		uids = append(uids, string(r.UID))
	}
	return strings.Join(uids, ",")
}
