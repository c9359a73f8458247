package breaker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// What the breaker exists for, at `kgc run`'s defaults: an API that
// suddenly answers an empty list, or 404, for a resource that has
// objects, and a rollback of etcd under a running kgc. Each holds the
// deletions resting on what it can no longer vouch for, and nothing else.

// gadgets is a CRD of the test's own in ns with n instances, each owning
// one ConfigMap of set "dep" (Background).
type gadgets struct {
	group string
	gvr   schema.GroupVersionResource
	uids  []types.UID
}

func newGadgets(t *testing.T, ns string, n int) gadgets {
	t.Helper()
	g := gadgets{group: "gadgets" + ns[len(ns)-5:] + ".kgc.test"}
	g.gvr = schema.GroupVersionResource{Group: g.group, Version: "v1", Resource: "gadgets"}
	crd := testenv.CRD(g.group, "gadgets", "Gadget", true, "v1")
	crds := dynamicClient.Resource(testenv.CRDGVR)
	if _, err := crds.Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crds.Delete(context.Background(), crd.GetName(), metav1.DeleteOptions{}) })
	waitFor(t, "the CRD established", func() (bool, error) {
		u, err := crds.Get(t.Context(), crd.GetName(), metav1.GetOptions{})
		return err == nil && testenv.HasCondition(u, "Established", "True"), nil
	})
	uids := make([]types.UID, n)
	parallel(t, "create gadgets", n, func(i int) error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": g.group + "/v1", "kind": "Gadget",
			"metadata": map[string]any{"name": fmt.Sprintf("g-%d", i)}}}
		for {
			got, err := dynamicClient.Resource(g.gvr).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
				time.Sleep(100 * time.Millisecond) // not served yet
				continue
			}
			if err != nil {
				return err
			}
			uids[i] = got.GetUID()
			return nil
		}
	})
	createOwned(t, ns, "dep", n, func(i int) metav1.OwnerReference {
		return testenv.OwnerRef(g.group+"/v1", "Gadget", fmt.Sprintf("g-%d", i), uids[i], false)
	})
	g.uids = uids
	return g
}

// nodeState is the state kgc's graph holds for uid ("" if none).
func (r *running) nodeState(t *testing.T, uid types.UID) string {
	t.Helper()
	var g graphapi.Graph
	if err := json.Unmarshal([]byte(r.get(t, "/debug/controllers/garbage-collector-controller/graph?format=json&uid="+string(uid))), &g); err != nil {
		return ""
	}
	for _, n := range g.Nodes {
		if n.UID == uid {
			return n.State
		}
	}
	return ""
}

// resource is how the breaker names the gadgets' resource.
func (g gadgets) resource() string { return "Gadget." + g.group }

// queueIdle reports whether kgc's deletion queue holds nothing and no
// item is being worked on.
func (r *running) queueIdle(t *testing.T) bool {
	q := map[string]string{"name": "garbage_collector_attempt_to_delete"}
	return r.metric(t, "kgc_workqueue_depth", q) == 0 && r.metric(t, "kgc_workqueue_longest_running_processor_seconds", q) == 0
}

// vanish runs one API fault that makes a resource look empty (fault
// returns the heal): kgc trips vanished-resource for that resource, holds
// its dependents, keeps collecting everything else, records the trip
// durably, and, once the API is healed and an operator resumes, deletes
// nothing (the owners are there again).
func vanish(t *testing.T, fault func(fp *faultproxy.Transport, match func(string) bool) (heal func())) {
	ns := newNamespace(t)
	const n = 20 // above the default minimum of 10
	g := newGadgets(t, ns, n)
	fp := faultproxy.New(faultproxy.Config{})
	cfg := rest.CopyConfig(restConfig)
	cfg.WrapTransport = fp.Wrap
	gc := startKGCOn(t, cfg, defaultOptions(ns))

	heal := fault(fp, faultproxy.ResourcePath(g.group, "v1", "gadgets"))
	waitFor(t, "the vanished-resource trip", func() (bool, error) {
		r := gc.holds(t)
		return len(r.Breaker.Trips) == 1 && r.Breaker.HeldTotal == n, nil
	})
	tr := gc.holds(t).Breaker.Trips[0]
	if tr.Signal != breaker.Vanished || tr.Resource != g.resource() || tr.Count != n {
		t.Fatalf("trip %+v, want %s of %s counting %d", tr, breaker.Vanished, g.resource(), n)
	}
	t.Logf("trip: %s", tr.Because())
	if got := count(t, ns, "dep"); got != n {
		t.Fatalf("%d of %d dependents left: the breaker let deletions through", got, n)
	}

	// Everything else goes on: an unrelated Background cascade finishes.
	owner, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "solo"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createOwned(t, ns, "solo-dep", 1, func(int) metav1.OwnerReference { return testenv.OwnerRef("v1", "ConfigMap", "solo", owner.UID, false) })
	if err := kubeClient.CoreV1().ConfigMaps(ns).Delete(t.Context(), "solo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "an unrelated cascade collected while tripped", func() (bool, error) { return count(t, ns, "solo-dep") == 0, nil })

	// Durable, and said.
	waitFor(t, "the trip recorded on the Lease", func() (bool, error) {
		l, err := kubeClient.CoordinationV1().Leases(ns).Get(t.Context(), "kgc", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		st, err := breaker.ParseState(l.Annotations)
		return len(st.Active()) == 1 && st.Active()[0].Resource == g.resource(), err
	})
	if v := gc.metric(t, "kgc_deletion_breaker_tripped", map[string]string{"signal": "vanished-resource"}); v != 1 {
		t.Errorf("kgc_deletion_breaker_tripped{vanished-resource} = %v, want 1", v)
	}
	if readyz := gc.get(t, "/readyz?verbose"); !strings.Contains(readyz, "[-]deletion-breaker:vanished-resource") {
		t.Errorf("/readyz?verbose:\n%s", readyz)
	}
	out := mustCLI(t, "breaker", "status", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath, "--kgc-url", gc.url)
	if !strings.Contains(out, "TRIPPED vanished-resource "+g.resource()) {
		t.Errorf("kgc breaker status:\n%s", out)
	}

	// The API is fixed: the gadgets are listed again. The operator
	// resumes; the held dependents are decided again and kept.
	heal()
	waitFor(t, "kgc to list the gadgets again", func() (bool, error) {
		for _, uid := range g.uids {
			if gc.nodeState(t, uid) != graphapi.StateLive {
				return false, nil
			}
		}
		return true, nil
	})
	mustCLI(t, "breaker", "resume", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", kubeconfigPath)
	waitFor(t, "the resume applied and its releases decided", func() (bool, error) {
		r := gc.holds(t)
		return len(r.Breaker.Trips) == 0 && r.Breaker.HeldTotal == 0 && gc.queueIdle(t), nil
	})
	if got := count(t, ns, "dep"); got != n {
		t.Fatalf("%d of %d dependents left after the heal and resume, want all: their owners exist", got, n)
	}
}

// The API answers an empty list for a resource that has objects.
func TestEmptyListHoldsItsResource(t *testing.T) {
	vanish(t, func(fp *faultproxy.Transport, match func(string) bool) func() { return fp.EmptyLists(match) })
}

// The API answers 404 for a resource that discovery serves and whose CRD
// is not being deleted.
func TestNotFoundListHoldsItsResource(t *testing.T) {
	vanish(t, func(fp *faultproxy.Transport, match func(string) bool) func() {
		return fp.FailReads(match, http.StatusNotFound)
	})
}

// etcd rolled back under a running kgc: an owner kgc saw deleted, and
// whose dependent it was deleting, is back, with the dependent as it was
// before (not deleting). Upstream's collector, and kgc without the
// breaker, take the deletion they observed as final: if the dependent's
// resource is listed again before the owner's, they delete the dependent
// of an owner that exists. kgc lists again (the watches answer 410 after
// etcd's recommended restore, which bumps and compacts the revision;
// after a plain restore it finds its storage's resourceVersion gone back
// when it reconnects), trips rollback on the first object whose history
// cannot reach its new state, and deletes nothing resting on a gone owner
// until an operator resumes. The owner's resource (Secrets) is kept
// unreadable until the dependent's is listed again, so that the dangerous
// order is the one that happens.
func TestEtcdRollbackHoldsDeletions(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	cp, err := cpproc.Start(ctx, cpproc.Options{Dir: filepath.Join(dir, "cp"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	kube := kubernetes.NewForConfigOrDie(cp.Config)
	const ns = "default"
	opts := kgc.Options{Breaker: breakerOptions(ns), HoldRestored: true,
		OrphanJournal: &kgc.OrphanJournalOptions{LeaseNamespace: ns, LeaseName: "kgc-orphans"}}
	fp := faultproxy.New(faultproxy.Config{})
	cfg := rest.CopyConfig(cp.Config)
	cfg.WrapTransport = fp.Wrap
	gc := startKGCOn(t, cfg, opts)
	secrets := faultproxy.ResourcePath("", "v1", "secrets")

	for _, tc := range []struct {
		name string
		bump int
	}{{"restore-bumped", 1000}, {"restore-plain", 0}} {
		// A finalizer keeps the dependent, deleting, after kgc's DELETE.
		owner, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "owner-" + tc.name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dep := "dependent-" + tc.name
		depObj, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dep,
			Finalizers:      []string{"kgc.test/hold"},
			OwnerReferences: []metav1.OwnerReference{testenv.OwnerRef("v1", "Secret", owner.Name, owner.UID, true)}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		snapshot := filepath.Join(dir, "snapshot-"+tc.name)
		if err := cp.SnapshotEtcd(ctx, snapshot); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tc.name+": kgc to observe the owner after the snapshot", func() (bool, error) {
			return gc.nodeState(t, owner.UID) == graphapi.StateLive, nil
		})
		bg := metav1.DeletePropagationBackground
		if err := kube.CoreV1().Secrets(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, tc.name+": kgc to delete the dependent (a finalizer keeps it)", func() (bool, error) {
			cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, dep, metav1.GetOptions{})
			return err == nil && cm.DeletionTimestamp != nil, nil
		})
		// The rollback is evidence only against what kgc observed: the
		// dependent's deletion must have reached its graph before the
		// restore takes it back (the writes below can take less time than
		// the watch event).
		waitFor(t, tc.name+": kgc to observe the dependent deleting", func() (bool, error) {
			return gc.nodeState(t, depObj.UID) == graphapi.StateDeleting, nil
		})
		// Writes after the snapshot, so that the plain restore's revision
		// is far behind kgc's watches: the restarted apiserver does not
		// reach it again before kgc reconnects.
		parallel(t, "writes after the snapshot", 200, func(i int) error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("later-%s-%d", tc.name, i)}}, metav1.CreateOptions{})
			return err
		})

		// The rollback: the owner is back, the dependent not deleting.
		heal := fp.FailReads(secrets, http.StatusServiceUnavailable)
		if err := cp.RestoreEtcd(ctx, snapshot, tc.bump); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().Secrets(ns).Get(ctx, owner.Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: the owner after the rollback: %v", tc.name, err)
		}
		waitFor(t, tc.name+": kgc to see the dependent as the rollback left it", func() (bool, error) {
			cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, dep, metav1.GetOptions{})
			if err != nil || cm.DeletionTimestamp != nil {
				return false, fmt.Errorf("the dependent of an owner that exists after the rollback was deleted: %v, deleting %v", err, cm.GetDeletionTimestamp())
			}
			return gc.nodeState(t, cm.UID) == graphapi.StateLive && gc.queueIdle(t), nil
		})
		r := gc.holds(t)
		if len(r.Breaker.Trips) != 1 || r.Breaker.Trips[0].Signal != breaker.Rollback {
			t.Fatalf("%s: trips %+v, want one %s", tc.name, r.Breaker.Trips, breaker.Rollback)
		}
		t.Logf("%s: %s", tc.name, r.Breaker.Trips[0].Because())
		// The owner's resource is read again: kgc catches up, the owner
		// observed again, and still deletes nothing.
		heal()
		waitFor(t, tc.name+": kgc to observe the owner again", func() (bool, error) {
			return gc.nodeState(t, owner.UID) == graphapi.StateLive && gc.queueIdle(t), nil
		})
		mustCLI(t, "breaker", "resume", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", cp.KubeconfigPath)
		waitFor(t, tc.name+": the resume applied", func() (bool, error) {
			r := gc.holds(t)
			return len(r.Breaker.Trips) == 0 && r.Breaker.HeldTotal == 0 && gc.queueIdle(t), nil
		})
		if cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, dep, metav1.GetOptions{}); err != nil || cm.DeletionTimestamp != nil {
			t.Fatalf("%s: the dependent after the resume: %v, deleting %v", tc.name, err, cm.GetDeletionTimestamp())
		}
	}
}
