package gc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// waitTimeout bounds every wait for kgc to do something.
	waitTimeout = 60 * time.Second
	// pollInterval is how often waits re-check.
	pollInterval = 100 * time.Millisecond

	// holdFinalizer is the custom finalizer tests use to keep objects around.
	holdFinalizer = "kgc.test/hold"

	// The safety watcher's labels (package safety).
	labelTest      = safety.LabelTest
	labelProtected = safety.LabelProtected
	labelMarker    = safety.LabelMarker
)

// kindInfo says how to reach one kind of object.
type kindInfo struct {
	gvr        schema.GroupVersionResource
	apiVersion string
	kind       string
	namespaced bool
}

var (
	podKind         = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "v1", "Pod", true}
	configMapKind   = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "v1", "ConfigMap", true}
	rcKind          = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "replicationcontrollers"}, "v1", "ReplicationController", true}
	namespaceKind   = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "v1", "Namespace", false}
	clusterRoleKind = kindInfo{
		schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		"rbac.authorization.k8s.io/v1", "ClusterRole", false,
	}
)

// obj identifies one object created by a test.
type obj struct {
	kindInfo
	namespace string
	name      string
	uid       types.UID
}

func (o obj) String() string {
	if o.namespace == "" {
		return fmt.Sprintf("%s %s (uid %s)", o.kind, o.name, o.uid)
	}
	return fmt.Sprintf("%s %s/%s (uid %s)", o.kind, o.namespace, o.name, o.uid)
}

func (o obj) client() metadata.ResourceInterface {
	r := metadataClient.Resource(o.gvr)
	if o.namespace == "" {
		return r
	}
	return r.Namespace(o.namespace)
}

// ref returns an ownerReference to o.
func (o obj) ref(blockOwnerDeletion bool) metav1.OwnerReference {
	return testenv.OwnerRef(o.apiVersion, o.kind, o.name, o.uid, blockOwnerDeletion)
}

// missingRef is an ownerReference to an object of kind k that never existed.
func missingRef(k kindInfo, name string) metav1.OwnerReference {
	return obj{kindInfo: k, name: name, uid: testenv.RandomUID()}.ref(false)
}

// objOpt adjusts an object's metadata before it is created.
type objOpt func(*metav1.ObjectMeta)

func withOwners(refs ...metav1.OwnerReference) objOpt {
	return func(m *metav1.ObjectMeta) { m.OwnerReferences = append(m.OwnerReferences, refs...) }
}

func withFinalizers(finalizers ...string) objOpt {
	return func(m *metav1.ObjectMeta) { m.Finalizers = append(m.Finalizers, finalizers...) }
}

// protected marks an object the safety watcher guards: any deletion of it
// while its test runs fails that test.
func protected() objOpt {
	return func(m *metav1.ObjectMeta) { m.Labels[labelProtected] = "true" }
}

// testCase is one test's context: its namespace(s), its cleanups.
type testCase struct {
	t        *testing.T
	ctx      context.Context
	ns       string
	extraNS  []string
	cleanups []func(context.Context)
	objs     []obj // every object the test created, in order
}

// newTestCase creates a fresh namespace for t and arranges for everything to
// be checked (safety watcher) and cleaned up when t ends.
func newTestCase(t *testing.T) *testCase {
	t.Helper()
	tc := &testCase{t: t, ctx: t.Context()}
	tc.ns = tc.createNamespace()
	t.Cleanup(tc.finish)
	return tc
}

func (tc *testCase) createNamespace() string {
	tc.t.Helper()
	name := testenv.NamespaceName(tc.t.Name())
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(tc.ctx, ns, metav1.CreateOptions{}); err != nil {
		tc.t.Fatalf("create namespace %s: %v", name, err)
	}
	if tc.ns != "" {
		tc.extraNS = append(tc.extraNS, name)
	}
	return name
}

// cleanup registers f to run when the test ends, after the safety check and
// before the namespaces are removed (last registered runs first).
func (tc *testCase) cleanup(f func(ctx context.Context)) {
	tc.cleanups = append(tc.cleanups, f)
}

func (tc *testCase) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	// First: is everything the test protected still there, and was it there
	// all along? The barrier makes sure the watcher saw every event up to now.
	for _, v := range checkSafety(ctx, tc) {
		tc.t.Errorf("safety: %s", v)
	}
	for i := len(tc.cleanups) - 1; i >= 0; i-- {
		tc.cleanups[i](ctx)
	}
	for _, ns := range append([]string{tc.ns}, tc.extraNS...) {
		removeNamespace(ctx, tc.t, ns)
	}
}

// removeNamespace deletes what tests leave in ns and then ns itself. With no
// namespace controller in the sandbox, the namespace is finalized by hand.
func removeNamespace(ctx context.Context, t *testing.T, ns string) {
	bg := metav1.DeletePropagationBackground
	for _, k := range []kindInfo{podKind, configMapKind, rcKind} {
		err := metadataClient.Resource(k.gvr).Namespace(ns).DeleteCollection(ctx,
			metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
		if err != nil {
			t.Logf("cleanup: delete %s in %s: %v", k.gvr.Resource, ns, err)
		}
	}
	if err := testenv.DeleteNamespace(ctx, kubeClient, ns, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// objectMeta builds metadata carrying the test label.
func (tc *testCase) objectMeta(ns, name string, opts []objOpt) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{labelTest: tc.ns}}
	for _, o := range opts {
		o(&m)
	}
	return m
}

// created records o and, when it carries the hold finalizer, makes sure the
// finalizer is released at the end of the test.
func (tc *testCase) created(k kindInfo, m metav1.Object) obj {
	o := obj{kindInfo: k, namespace: m.GetNamespace(), name: m.GetName(), uid: m.GetUID()}
	tc.objs = append(tc.objs, o)
	if slices.Contains(m.GetFinalizers(), holdFinalizer) {
		tc.cleanup(func(ctx context.Context) { releaseFinalizer(ctx, tc.t, o, holdFinalizer) })
	}
	if !k.namespaced {
		tc.cleanup(func(ctx context.Context) {
			err := o.client().Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				tc.t.Logf("cleanup: delete %s: %v", o, err)
			}
		})
	}
	return o
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "fake"}}}
}

// pod creates a Pod in the test namespace.
func (tc *testCase) pod(name string, opts ...objOpt) obj {
	tc.t.Helper()
	p := &corev1.Pod{ObjectMeta: tc.objectMeta(tc.ns, name, opts), Spec: podSpec()}
	p, err := kubeClient.CoreV1().Pods(tc.ns).Create(tc.ctx, p, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create pod %s/%s: %v", tc.ns, name, err)
	}
	return tc.created(podKind, p)
}

// configMap creates a ConfigMap in the test namespace.
func (tc *testCase) configMap(name string, opts ...objOpt) obj {
	tc.t.Helper()
	return tc.configMapIn(tc.ns, name, opts...)
}

// configMapIn creates a ConfigMap in namespace ns.
func (tc *testCase) configMapIn(ns, name string, opts ...objOpt) obj {
	tc.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: tc.objectMeta(ns, name, opts)}
	cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(tc.ctx, cm, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create configmap %s/%s: %v", ns, name, err)
	}
	return tc.created(configMapKind, cm)
}

// rc creates a ReplicationController in the test namespace. Nothing
// reconciles it: its pods are whatever the test creates.
func (tc *testCase) rc(name string, opts ...objOpt) obj {
	tc.t.Helper()
	one := int32(1)
	rc := &corev1.ReplicationController{
		ObjectMeta: tc.objectMeta(tc.ns, name, opts),
		Spec: corev1.ReplicationControllerSpec{
			Replicas: &one,
			Selector: map[string]string{"rc": name},
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"rc": name}},
				Spec:       podSpec(),
			},
		},
	}
	rc, err := kubeClient.CoreV1().ReplicationControllers(tc.ns).Create(tc.ctx, rc, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create rc %s/%s: %v", tc.ns, name, err)
	}
	return tc.created(rcKind, rc)
}

// clusterRole creates a (cluster-scoped) ClusterRole with a unique name
// derived from prefix; it is deleted when the test ends.
func (tc *testCase) clusterRole(prefix string, opts ...objOpt) obj {
	tc.t.Helper()
	name := tc.ns + "-" + prefix
	cr := &rbacv1.ClusterRole{ObjectMeta: tc.objectMeta("", name, opts)}
	cr, err := kubeClient.RbacV1().ClusterRoles().Create(tc.ctx, cr, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create clusterrole %s: %v", name, err)
	}
	return tc.created(clusterRoleKind, cr)
}

// namespaceObj is the test namespace as an owner.
func (tc *testCase) namespaceObj() obj {
	tc.t.Helper()
	n, err := kubeClient.CoreV1().Namespaces().Get(tc.ctx, tc.ns, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatalf("get namespace %s: %v", tc.ns, err)
	}
	return obj{kindInfo: namespaceKind, name: n.Name, uid: n.UID}
}

// Deletion options.
func background() metav1.DeleteOptions { return policy(metav1.DeletePropagationBackground) }
func foreground() metav1.DeleteOptions { return policy(metav1.DeletePropagationForeground) }
func orphan() metav1.DeleteOptions     { return policy(metav1.DeletePropagationOrphan) }

func policy(p metav1.DeletionPropagation) metav1.DeleteOptions {
	return metav1.DeleteOptions{PropagationPolicy: &p}
}

// del deletes o with opts (preconditioned on its UID). Before a Foreground
// or Orphan deletion it waits until kgc's graph holds each object of the
// test that references o, with that reference: kgc's watches of different
// resources are not ordered, so a dependent created (or given its reference)
// just before would otherwise race its owner's deletion event, and the order
// those policies promise holds only for dependents kgc has seen when it
// decides (docs/correctness.md, Known limits).
func (tc *testCase) del(o obj, opts metav1.DeleteOptions) {
	tc.t.Helper()
	if p := opts.PropagationPolicy; p != nil && *p != metav1.DeletePropagationBackground {
		tc.waitDependentsObserved(o)
	}
	opts.Preconditions = &metav1.Preconditions{UID: &o.uid}
	if err := o.client().Delete(tc.ctx, o.name, opts); err != nil {
		tc.t.Fatalf("delete %s: %v", o, err)
	}
}

// waitDependentsObserved waits until kgc has observed every object of the
// test that references owner, with that reference (testenv's
// ObservedDependent).
func (tc *testCase) waitDependentsObserved(owner obj) {
	tc.t.Helper()
	for _, d := range tc.objs {
		if d.uid == owner.uid {
			continue
		}
		var missing string
		err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (ok bool, err error) {
			ok, missing, err = collector.ObservedDependent(ctx, d.client(), d.name, d.uid, owner.uid)
			return ok, err
		})
		if err != nil {
			tc.t.Fatalf("waiting for kgc to observe %s referencing %s: %v (%s)", d, owner, err, missing)
		}
	}
}

// get returns o's current metadata, or nil when o (with its UID) is gone.
func (tc *testCase) get(ctx context.Context, o obj) (*metav1.PartialObjectMetadata, error) {
	return testenv.GetMeta(ctx, o.client(), o.name, o.uid)
}

// waitFor polls until cond holds for o's metadata (nil when o is gone).
func (tc *testCase) waitFor(o obj, what string, cond func(m *metav1.PartialObjectMetadata) bool) {
	tc.t.Helper()
	var last *metav1.PartialObjectMetadata
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		m, err := tc.get(ctx, o)
		if err != nil {
			if ctx.Err() == nil {
				tc.t.Logf("get %s: %v (retrying)", o, err)
			}
			return false, nil
		}
		last = m
		return cond(m), nil
	})
	if err != nil {
		tc.t.Fatalf("%s: waited %s for it to be %s; last seen: %s", o, waitTimeout, what, safety.Describe(last))
	}
}

// waitGone waits until every one of objs is deleted.
func (tc *testCase) waitGone(objs ...obj) {
	tc.t.Helper()
	for _, o := range objs {
		tc.waitFor(o, "deleted", func(m *metav1.PartialObjectMetadata) bool { return m == nil })
	}
}

// waitOwnerRefs waits until o exists and its ownerReferences name exactly
// the UIDs want (in any order).
func (tc *testCase) waitOwnerRefs(o obj, want ...types.UID) {
	tc.t.Helper()
	tc.waitFor(o, fmt.Sprintf("present with owners %v", want), func(m *metav1.PartialObjectMetadata) bool {
		return m != nil && sameUIDs(ownerUIDs(m), want)
	})
}

// waitTerminating waits until o exists with a deletionTimestamp.
func (tc *testCase) waitTerminating(o obj) {
	tc.t.Helper()
	tc.waitFor(o, "terminating", func(m *metav1.PartialObjectMetadata) bool {
		return m != nil && m.DeletionTimestamp != nil
	})
}

func ownerUIDs(m *metav1.PartialObjectMetadata) []types.UID {
	var uids []types.UID
	for _, r := range m.OwnerReferences {
		uids = append(uids, r.UID)
	}
	return uids
}

func sameUIDs(a, b []types.UID) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// releaseFinalizer removes finalizer from o (if o still exists).
func releaseFinalizer(ctx context.Context, t *testing.T, o obj, finalizer string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := o.client().Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if m.UID != o.uid || !slices.Contains(m.Finalizers, finalizer) {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"finalizers":      slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == finalizer }),
			"resourceVersion": m.ResourceVersion, // conflict instead of a lost update
		}})
		if err != nil {
			return err
		}
		_, err = o.client().Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("remove finalizer %s from %s: %v", finalizer, o, err)
	}
}

// release removes the hold finalizer from o now.
func (tc *testCase) release(o obj) {
	tc.t.Helper()
	releaseFinalizer(tc.ctx, tc.t, o, holdFinalizer)
}

// addOwnerRefs appends refs to o's ownerReferences.
func (tc *testCase) addOwnerRefs(o obj, refs ...metav1.OwnerReference) {
	tc.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := o.client().Get(tc.ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"ownerReferences": append(slices.Clone(m.OwnerReferences), refs...),
			"resourceVersion": m.ResourceVersion,
		}})
		if err != nil {
			return err
		}
		_, err = o.client().Patch(tc.ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		tc.t.Fatalf("add owner references to %s: %v", o, err)
	}
}

// kept is an object that must have survived, with an optional extra check.
type kept struct {
	o     obj
	check safety.Check
}

// alive: o exists (same UID) and is not being deleted.
func alive(o obj) kept { return kept{o: o, check: safety.NotDeleting} }

// aliveWithOwners: alive, and owned by exactly owners.
func aliveWithOwners(o obj, owners ...types.UID) kept {
	return kept{o: o, check: safety.OwnedBy(owners...)}
}

// assertKeptAfterGC proves a negative: that kgc, having had its chance, did
// not delete the given objects. It creates a sentinel of kind sentinelKind
// owned by a fresh owner, deletes the owner, waits until kgc has collected the
// sentinel, and only then checks each object (safety.AssertKeptAfter).
// Objects whose events came before the sentinel's have been seen by kgc by
// the time the sentinel goes.
func (tc *testCase) assertKeptAfterGC(sentinelKind kindInfo, objs ...kept) {
	tc.t.Helper()
	keep := make([]safety.Kept, 0, len(objs))
	for _, k := range objs {
		keep = append(keep, safety.KeptOf(k.o, tc.get, k.check))
	}
	safety.AssertKeptAfter(tc.ctx, tc.t, func() {
		s := tc.sentinel(sentinelKind)
		tc.del(s.owner, background())
		tc.waitFor(s.dependent, "collected by kgc (sentinel)", func(m *metav1.PartialObjectMetadata) bool { return m == nil })
	}, keep...)
}

type sentinel struct{ owner, dependent obj }

// sentinel creates a dependent of kind k and its owner (a ConfigMap in the
// test namespace, or a ClusterRole for a cluster-scoped dependent).
func (tc *testCase) sentinel(k kindInfo) sentinel {
	tc.t.Helper()
	suffix := utilrand.String(5)
	var owner obj
	if k.namespaced {
		owner = tc.configMap("sentinel-owner-" + suffix)
	} else {
		owner = tc.clusterRole("sentinel-owner-" + suffix)
	}
	opts := withOwners(owner.ref(false))
	var dep obj
	switch k {
	case podKind:
		dep = tc.pod("sentinel-"+suffix, opts)
	case configMapKind:
		dep = tc.configMap("sentinel-"+suffix, opts)
	case clusterRoleKind:
		dep = tc.clusterRole("sentinel-"+suffix, opts)
	default:
		tc.t.Fatalf("no sentinel for kind %s", k.kind)
	}
	return sentinel{owner: owner, dependent: dep}
}

// names returns prefix-0 … prefix-(n-1).
func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}
