package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// waitTimeout bounds every wait for the controllers or kgc.
	waitTimeout = 90 * time.Second
	// pollInterval is how often waits re-check.
	pollInterval = 200 * time.Millisecond

	labelTest      = safety.LabelTest
	labelProtected = safety.LabelProtected

	// terminationDelay is the simulated kubelet's annotation slowing a
	// Pod's termination (milliseconds).
	terminationDelay = "kgc.dev/termination-delay"
)

var (
	podsGVR                = corev1.SchemeGroupVersion.WithResource("pods")
	configMapsGVR          = corev1.SchemeGroupVersion.WithResource("configmaps")
	pvcsGVR                = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	deploymentsGVR         = appsv1.SchemeGroupVersion.WithResource("deployments")
	replicaSetsGVR         = appsv1.SchemeGroupVersion.WithResource("replicasets")
	statefulSetsGVR        = appsv1.SchemeGroupVersion.WithResource("statefulsets")
	daemonSetsGVR          = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	controllerRevisionsGVR = appsv1.SchemeGroupVersion.WithResource("controllerrevisions")
	jobsGVR                = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	cronJobsGVR            = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
)

// obj identifies one object.
type obj struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
	uid       types.UID
}

func (o obj) String() string {
	return fmt.Sprintf("%s %s/%s (uid %s)", o.gvr.Resource, o.namespace, o.name, o.uid)
}

func (o obj) client() metadata.ResourceInterface {
	return metadataClient.Resource(o.gvr).Namespace(o.namespace)
}

func objOf(gvr schema.GroupVersionResource, m metav1.Object) obj {
	return obj{gvr: gvr, namespace: m.GetNamespace(), name: m.GetName(), uid: m.GetUID()}
}

// testCase is one test's namespace and checks.
type testCase struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

// newTestCase creates a namespace for t; when t ends, the safety watcher's
// and the auditor's verdicts are checked and the namespace is deleted
// (kube-controller-manager's namespace controller and kgc empty it).
func newTestCase(t *testing.T) *testCase {
	t.Helper()
	tc := &testCase{t: t, ctx: t.Context(), ns: testenv.NamespaceName(t.Name())}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(tc.ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", tc.ns, err)
	}
	t.Cleanup(tc.finish)
	return tc
}

func (tc *testCase) finish() {
	tc.checkSafety()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := kubeClient.CoreV1().Namespaces().Delete(ctx, tc.ns, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		tc.t.Logf("cleanup: delete namespace %s: %v", tc.ns, err)
	}
}

// checkSafety fails the test for each deletion of a protected object seen
// so far and each wrong deletion by kgc; it closes the test's account with
// the safety watcher (later deletions of protected objects are not charged).
func (tc *testCase) checkSafety() {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, v := range watcher.Check(ctx, tc.ns, 30*time.Second, markerFunc(tc.ns)) {
		tc.t.Errorf("safety: %s", v)
	}
	for _, p := range audit.problems(tc.ns) {
		tc.t.Errorf("kgc deleted wrongly: %s", p)
	}
	if tc.t.Failed() {
		ds := audit.in(tc.ns)
		for i, d := range ds {
			if i == 50 {
				tc.t.Logf("kgc deleted: … and %d more", len(ds)-i)
				break
			}
			tc.t.Logf("kgc deleted: %s", d)
		}
	}
}

// poll calls cond until it returns true, failing the test after timeout
// with what cond last described.
func (tc *testCase) poll(what string, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) {
	tc.t.Helper()
	var last string
	var lastErr error
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, desc, err := cond(ctx)
		if err != nil {
			lastErr = err
			return false, nil
		}
		last = desc
		return ok, nil
	})
	if err != nil {
		tc.t.Fatalf("waited %s for %s: %v; last seen: %s (last error: %v)", timeout, what, err, last, lastErr)
	}
}

// get returns o's metadata, or nil when o (with its UID) is gone.
func (tc *testCase) get(ctx context.Context, o obj) (*metav1.PartialObjectMetadata, error) {
	return testenv.GetMeta(ctx, o.client(), o.name, o.uid)
}

// waitGone waits until every one of objs is gone.
func (tc *testCase) waitGone(objs ...obj) {
	tc.t.Helper()
	tc.poll(fmt.Sprintf("%d objects to be gone", len(objs)), waitTimeout, func(ctx context.Context) (bool, string, error) {
		var left []string
		for _, o := range objs {
			m, err := tc.get(ctx, o)
			if err != nil {
				return false, "", err
			}
			if m != nil {
				left = append(left, o.String()+" "+safety.Describe(m))
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
}

// list returns the objects of gvr in the test namespace whose labels match
// selector.
func (tc *testCase) list(ctx context.Context, gvr schema.GroupVersionResource, selector string) ([]metav1.PartialObjectMetadata, error) {
	l, err := metadataClient.Resource(gvr).Namespace(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// objs returns the objects of gvr in the test namespace matching selector.
func (tc *testCase) objs(gvr schema.GroupVersionResource, selector string) []obj {
	tc.t.Helper()
	items, err := tc.list(tc.ctx, gvr, selector)
	if err != nil {
		tc.t.Fatalf("list %s: %v", gvr.Resource, err)
	}
	var out []obj
	for i := range items {
		out = append(out, objOf(gvr, &items[i]))
	}
	return out
}

// Deletion options.
func policy(p metav1.DeletionPropagation) metav1.DeleteOptions {
	return metav1.DeleteOptions{PropagationPolicy: &p}
}

// del deletes o with the given propagation (preconditioned on its UID).
func (tc *testCase) del(o obj, p metav1.DeletionPropagation) {
	tc.t.Helper()
	opts := policy(p)
	opts.Preconditions = &metav1.Preconditions{UID: &o.uid}
	if err := o.client().Delete(tc.ctx, o.name, opts); err != nil {
		tc.t.Fatalf("delete %s: %v", o, err)
	}
}

// waitObserved waits until kgc has observed each of dependents with its
// reference to owner (testenv's ObservedDependent says why a test that
// asserts a Foreground deletion's order needs this).
func (tc *testCase) waitObserved(owner obj, dependents ...obj) {
	tc.t.Helper()
	tc.poll(fmt.Sprintf("kgc to observe %d dependents of %s", len(dependents), owner), waitTimeout, func(ctx context.Context) (bool, string, error) {
		for _, d := range dependents {
			if ok, missing, err := collector.ObservedDependent(ctx, d.client(), d.name, d.uid, owner.uid); !ok || err != nil {
				return false, missing, err
			}
		}
		return true, "", nil
	})
}

// assertDeletedBefore waits until the recorder has seen the removal of
// owner and of each of dependents, and checks that each dependent was
// removed at an earlier etcd revision than owner: while any of them
// existed, the owner did.
func (tc *testCase) assertDeletedBefore(owner obj, dependents []obj) {
	tc.t.Helper()
	rvs := map[types.UID]uint64{}
	tc.poll("the recorder to see the removals", 30*time.Second, func(context.Context) (bool, string, error) {
		var missing []string
		for _, o := range append([]obj{owner}, dependents...) {
			if _, ok := rvs[o.uid]; ok {
				continue
			}
			rv, ok, err := rec.deletionRV(tc.ns, o.uid)
			if err != nil {
				tc.t.Fatalf("%v", err)
			}
			if !ok {
				missing = append(missing, o.String())
				continue
			}
			rvs[o.uid] = rv
		}
		return len(missing) == 0, "not yet seen removed: " + strings.Join(missing, ", "), nil
	})
	for _, d := range dependents {
		if rvs[d.uid] >= rvs[owner.uid] {
			tc.t.Errorf("%s removed at revision %d, after its owner %s (revision %d)", d, rvs[d.uid], owner, rvs[owner.uid])
		}
	}
}

// kept is an object that must have survived, with a check of its metadata.
type kept struct {
	o     obj
	check safety.Check
}

// aliveOwnedBy: o exists, is not being deleted, and is owned by exactly
// owners.
func aliveOwnedBy(o obj, owners ...types.UID) kept {
	return kept{o: o, check: safety.OwnedBy(owners...)}
}

// assertKeptAfterGC proves a negative: that kgc, having had its chance, did
// not delete objs. It creates a ConfigMap owned by another, deletes the
// owner, waits until kgc has collected the dependent, and only then checks
// each object (safety.AssertKeptAfter).
func (tc *testCase) assertKeptAfterGC(objs ...kept) {
	tc.t.Helper()
	safety.AssertKeptAfter(tc.ctx, tc.t, func() {
		suffix := utilrand.String(5)
		owner := tc.configMap("sentinel-owner-"+suffix, nil)
		dep := tc.configMap("sentinel-"+suffix, []metav1.OwnerReference{ownerRef(owner, "v1", "ConfigMap", false)})
		tc.del(owner, metav1.DeletePropagationBackground)
		tc.waitGone(dep)
	}, tc.keptObjects(objs)...)
}

// keptObjects turns kept objects into safety.Kept, read through tc.get.
func (tc *testCase) keptObjects(objs []kept) []safety.Kept {
	out := make([]safety.Kept, 0, len(objs))
	for _, k := range objs {
		out = append(out, safety.KeptOf(k.o, tc.get, k.check))
	}
	return out
}

// configMap creates a ConfigMap with the given owners.
func (tc *testCase) configMap(name string, owners []metav1.OwnerReference) obj {
	tc.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: tc.ns, OwnerReferences: owners,
		Labels: map[string]string{labelTest: tc.ns},
	}}
	cm, err := kubeClient.CoreV1().ConfigMaps(tc.ns).Create(tc.ctx, cm, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create configmap %s: %v", name, err)
	}
	return objOf(configMapsGVR, cm)
}

// ownerRef is a reference to o, as a controller would write it when
// controller is set.
func ownerRef(o obj, apiVersion, kind string, controller bool) metav1.OwnerReference {
	r := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: o.name, UID: o.uid}
	if controller {
		r.Controller, r.BlockOwnerDeletion = ptr.To(true), ptr.To(true)
	}
	return r
}

// podLabels are the labels of the Pods (and what else the controllers copy
// them to) of a workload named app in the test's namespace.
func (tc *testCase) podLabels(app string, protect bool) map[string]string {
	l := map[string]string{"app": app, labelTest: tc.ns}
	if protect {
		l[labelProtected] = "true"
	}
	return l
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "fake"}},
		// The simulated kubelet honours at most this much of a
		// termination-delay.
		TerminationGracePeriodSeconds: ptr.To[int64](30),
	}
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()}
}

// replicaSet is a ReplicaSet whose selector is its own name.
func replicaSet(m metav1.ObjectMeta, replicas int32) *appsv1.ReplicaSet {
	sel := map[string]string{"rs": m.Name}
	labels := map[string]string{"rs": m.Name}
	for k, v := range m.Labels {
		labels[k] = v
	}
	return &appsv1.ReplicaSet{
		ObjectMeta: m,
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: podTemplate(labels),
		},
	}
}

// claimSpec asks for 1Gi of storageClass ("" is no class: the claim binds
// only to a PersistentVolume made for it).
func claimSpec(storageClass string) corev1.PersistentVolumeClaimSpec {
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: &storageClass,
		Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		},
	}
}

// podRunning reports whether the Pod is bound, Running and not deleting.
func podRunning(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil
}

func describePods(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		owner := "-"
		if c := metav1.GetControllerOf(&p); c != nil {
			owner = c.Kind + "/" + c.Name
		}
		fmt.Fprintf(&b, "%s(owner=%s node=%q phase=%s deleting=%v) ", p.Name, owner, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil)
	}
	return b.String()
}
