package inspect

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	waitTimeout   = 60 * time.Second
	pollInterval  = 100 * time.Millisecond
	holdFinalizer = "example.com/keep"
)

var (
	cmGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	secretGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	crGVR     = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
)

// obj is one object a test created.
type obj struct {
	gvr        schema.GroupVersionResource
	apiVersion string
	kind       string
	namespace  string
	name       string
	uid        types.UID
}

func (o obj) client() metadata.ResourceInterface {
	if o.namespace == "" {
		return metadataClient.Resource(o.gvr)
	}
	return metadataClient.Resource(o.gvr).Namespace(o.namespace)
}

// arg is the object as the commands take it: resource/name.
func (o obj) arg() string { return o.gvr.Resource + "/" + o.name }

func (o obj) key() string { return o.namespace + "/" + o.kind + "/" + o.name }

func (o obj) ref(block bool) metav1.OwnerReference {
	return testenv.OwnerRef(o.apiVersion, o.kind, o.name, o.uid, block)
}

type objOpt func(*metav1.ObjectMeta)

func ownedBy(o obj, block bool) objOpt {
	return func(m *metav1.ObjectMeta) { m.OwnerReferences = append(m.OwnerReferences, o.ref(block)) }
}

func withFinalizers(fs ...string) objOpt {
	return func(m *metav1.ObjectMeta) { m.Finalizers = append(m.Finalizers, fs...) }
}

// testCase is one test's namespace and cleanups.
type testCase struct {
	t        *testing.T
	ctx      context.Context
	ns       string
	mu       sync.Mutex
	cleanups []func(context.Context)
}

func newTestCase(t *testing.T) *testCase {
	t.Helper()
	tc := &testCase{t: t, ctx: t.Context()}
	tc.ns = testenv.NamespaceName(t.Name())
	if _, err := kubeClient.CoreV1().Namespaces().Create(tc.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", tc.ns, err)
	}
	t.Cleanup(tc.finish)
	return tc
}

func (tc *testCase) cleanup(f func(context.Context)) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.cleanups = append(tc.cleanups, f)
}

func (tc *testCase) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	for i := len(tc.cleanups) - 1; i >= 0; i-- {
		tc.cleanups[i](ctx)
	}
	bg := metav1.DeletePropagationBackground
	for _, gvr := range []schema.GroupVersionResource{cmGVR, secretGVR} {
		if err := metadataClient.Resource(gvr).Namespace(tc.ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{}); err != nil {
			tc.t.Logf("cleanup: delete %s in %s: %v", gvr.Resource, tc.ns, err)
		}
	}
	if err := testenv.DeleteNamespace(ctx, kubeClient, tc.ns, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		tc.t.Logf("cleanup: %v", err)
	}
}

func meta(ns, name string, opts []objOpt) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Namespace: ns, Name: name}
	for _, o := range opts {
		o(&m)
	}
	return m
}

// created arranges for o's custom finalizers to be released and, for a
// cluster-scoped o, for o to be deleted when the test ends.
func (tc *testCase) created(o obj, m metav1.Object) obj {
	o.uid = m.GetUID()
	if slices.Contains(m.GetFinalizers(), holdFinalizer) {
		tc.cleanup(func(ctx context.Context) { release(ctx, tc.t, o) })
	}
	if o.namespace == "" {
		tc.cleanup(func(ctx context.Context) {
			err := o.client().Delete(ctx, o.name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &o.uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				tc.t.Logf("cleanup: delete %s: %v", o.key(), err)
			}
		})
	}
	return o
}

func (tc *testCase) configMap(name string, opts ...objOpt) obj {
	tc.t.Helper()
	cm, err := kubeClient.CoreV1().ConfigMaps(tc.ns).Create(tc.ctx, &corev1.ConfigMap{ObjectMeta: meta(tc.ns, name, opts)}, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create configmap %s: %v", name, err)
	}
	return tc.created(obj{gvr: cmGVR, apiVersion: "v1", kind: "ConfigMap", namespace: tc.ns, name: name}, cm)
}

func (tc *testCase) secret(name string, opts ...objOpt) obj {
	tc.t.Helper()
	s, err := kubeClient.CoreV1().Secrets(tc.ns).Create(tc.ctx, &corev1.Secret{ObjectMeta: meta(tc.ns, name, opts)}, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create secret %s: %v", name, err)
	}
	return tc.created(obj{gvr: secretGVR, apiVersion: "v1", kind: "Secret", namespace: tc.ns, name: name}, s)
}

// clusterRole creates a ClusterRole named after the test namespace.
func (tc *testCase) clusterRole(prefix string, opts ...objOpt) obj {
	tc.t.Helper()
	name := tc.ns + "-" + prefix
	cr, err := kubeClient.RbacV1().ClusterRoles().Create(tc.ctx, &rbacv1.ClusterRole{ObjectMeta: meta("", name, opts)}, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create clusterrole %s: %v", name, err)
	}
	return tc.created(obj{gvr: crGVR, apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", name: name}, cr)
}

// release removes the hold finalizer from o, if o still exists.
func release(ctx context.Context, t *testing.T, o obj) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		m, err := o.client().Get(ctx, o.name, metav1.GetOptions{})
		if err != nil || m.UID != o.uid {
			return err
		}
		fs := slices.DeleteFunc(slices.Clone(m.Finalizers), func(f string) bool { return f == holdFinalizer })
		if len(fs) == len(m.Finalizers) {
			return nil
		}
		patch := fmt.Appendf(nil, `{"metadata":{"finalizers":%s,"resourceVersion":%q}}`, jsonList(fs), m.ResourceVersion)
		_, err = o.client().Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Logf("cleanup: release %s: %v", o.key(), err)
	}
}

func jsonList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ",") + "]"
}

func (tc *testCase) get(o obj) (*metav1.PartialObjectMetadata, error) {
	m, err := o.client().Get(tc.ctx, o.name, metav1.GetOptions{})
	if err == nil && m.UID != o.uid {
		return nil, apierrors.NewNotFound(o.gvr.GroupResource(), o.name)
	}
	return m, err
}

func (tc *testCase) remove(o obj, policy metav1.DeletionPropagation) {
	tc.t.Helper()
	if err := o.client().Delete(tc.ctx, o.name, metav1.DeleteOptions{PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &o.uid}}); err != nil {
		tc.t.Fatalf("delete %s: %v", o.key(), err)
	}
}

// waitFor polls cond until it holds or waitTimeout passes.
func (tc *testCase) waitFor(what string, cond func() (bool, error)) {
	tc.t.Helper()
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) { return cond() })
	if err != nil {
		tc.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// startKGC runs kgc against the control plane until the test ends.
func startKGC(t *testing.T) *testenv.Collector {
	t.Helper()
	c, err := testenv.StartCollector(rest.CopyConfig(restConfig), kgc.Options{Workers: 5, DiscoveryResyncPeriod: time.Second, Logger: testenv.Logger("kgc")}, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// writeCounter counts the requests of a client that could change anything.
type writeCounter struct {
	reads, writes atomic.Int64
	mu            sync.Mutex
	seen          []string
}

func (w *writeCounter) wrap(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				w.reads.Add(1)
			default:
				w.writes.Add(1)
				w.mu.Lock()
				w.seen = append(w.seen, r.Method+" "+r.URL.Path)
				w.mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// kgcCLI runs a kgc inspection command in-process through its cobra wiring.
func kgcCLI(t *testing.T, deps app.InspectDeps, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = app.ExecuteInspect(t.Context(), deps, args, &out, &errb)
	return out.String(), errb.String(), err
}

// waitObserved waits until c's graph holds every object of objs, live: a
// decision made after that sees them. (A test that deletes an owner right
// after creating its dependents would otherwise race kgc's watches: a
// dependent still on its way is not among the owner's dependents when kgc
// decides.)
func (tc *testCase) waitObserved(c *testenv.Collector, objs ...obj) {
	tc.t.Helper()
	for _, o := range objs {
		tc.waitFor("kgc to observe "+o.key(), func() (bool, error) {
			n, err := c.GraphNode(o.uid)
			return n != nil && n.State == graphapi.StateLive, err
		})
	}
}

func pollUntil(tc *testCase, cond func() (bool, error)) error {
	return wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) { return cond() })
}
