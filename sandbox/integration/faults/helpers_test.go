package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

const (
	// waitTimeout bounds every wait; pollInterval is how often waits re-check.
	waitTimeout  = 90 * time.Second
	pollInterval = 50 * time.Millisecond

	// labelCascade names the cascade a dependent belongs to.
	labelCascade = "kgc.test/cascade"
	// The safety watcher's labels (package safety).
	labelTest      = safety.LabelTest
	labelProtected = safety.LabelProtected
	labelMarker    = safety.LabelMarker
)

// kind is one of the two kinds the tests use.
type kind struct {
	resource string
	kind     string
}

var (
	configMaps = kind{"configmaps", "ConfigMap"}
	secrets    = kind{"secrets", "Secret"}
)

func (k kind) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: k.resource}
}

// obj is one object a test created.
type obj struct {
	kind
	ns, name string
	uid      types.UID
}

func (o obj) String() string {
	return fmt.Sprintf("%s %s/%s (uid %s)", o.kind.kind, o.ns, o.name, o.uid)
}

func (o obj) client() metadata.ResourceInterface {
	return metadataClient.Resource(o.gvr()).Namespace(o.ns)
}

func (o obj) ref(block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: o.kind.kind, Name: o.name, UID: o.uid, BlockOwnerDeletion: ptr.To(block)}
}

// create creates a ConfigMap or Secret named name in ns with the given
// labels (labelTest is added) and owner references.
func create(ctx context.Context, k kind, ns, name string, labels map[string]string, refs ...metav1.OwnerReference) (obj, error) {
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labelTest: ns}, OwnerReferences: refs}
	for k, v := range labels {
		meta.Labels[k] = v
	}
	var uid types.UID
	switch k {
	case configMaps:
		cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta}, metav1.CreateOptions{})
		if err != nil {
			return obj{}, err
		}
		uid = cm.UID
	case secrets:
		s, err := kubeClient.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: meta}, metav1.CreateOptions{})
		if err != nil {
			return obj{}, err
		}
		uid = s.UID
	default:
		return obj{}, fmt.Errorf("unknown kind %v", k)
	}
	return obj{kind: k, ns: ns, name: name, uid: uid}, nil
}

func mustCreate(t *testing.T, k kind, ns, name string, labels map[string]string, refs ...metav1.OwnerReference) obj {
	t.Helper()
	o, err := create(t.Context(), k, ns, name, labels, refs...)
	if err != nil {
		t.Fatalf("creating %s %s/%s: %v", k.kind, ns, name, err)
	}
	return o
}

// parallel runs f(0..n-1) on a few goroutines and returns the first error.
func parallel(n int, f func(i int) error) error {
	const workers = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

// cascade is an owner and its dependents (labelled labelCascade=name).
type cascade struct {
	kind
	ns, name string
	owner    obj
	size     int
}

// createCascade creates an owner and size dependents referring to it
// (blockOwnerDeletion block).
func createCascade(t *testing.T, k kind, ns, name string, size int, block bool) cascade {
	t.Helper()
	return createCascadeLabels(t, k, ns, name, size, block, nil)
}

// createCascadeLabels is createCascade with more labels on the dependents
// (protected(nil) for dependents that must survive, as an Orphan
// cascade's).
func createCascadeLabels(t *testing.T, k kind, ns, name string, size int, block bool, labels map[string]string) cascade {
	t.Helper()
	c := cascade{kind: k, ns: ns, name: name, size: size}
	c.owner = mustCreate(t, k, ns, name+"-owner", nil)
	depLabels := map[string]string{labelCascade: name}
	for k, v := range labels {
		depLabels[k] = v
	}
	err := parallel(size, func(i int) error {
		_, err := create(t.Context(), k, ns, fmt.Sprintf("%s-%03d", name, i), depLabels, c.owner.ref(block))
		return err
	})
	if err != nil {
		t.Fatalf("creating cascade %s: %v", name, err)
	}
	return c
}

// left returns how many of the cascade's dependents exist.
func (c cascade) left(ctx context.Context) (int, error) {
	list, err := metadataClient.Resource(c.gvr()).Namespace(c.ns).List(ctx, metav1.ListOptions{LabelSelector: labelCascade + "=" + c.name})
	if err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

func (c cascade) deleteOwner(t *testing.T, policy metav1.DeletionPropagation) {
	t.Helper()
	err := c.owner.client().Delete(t.Context(), c.owner.name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &c.owner.uid},
	})
	if err != nil {
		t.Fatalf("deleting %s: %v", c.owner, err)
	}
}

// ownerGone reports whether the owner no longer exists.
func (c cascade) ownerGone(ctx context.Context) (bool, error) {
	m, err := c.owner.client().Get(ctx, c.owner.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return m.UID != c.owner.uid, nil
}

// gone reports whether the owner and every dependent are gone.
func (c cascade) gone(ctx context.Context) (bool, error) {
	n, err := c.left(ctx)
	if err != nil || n > 0 {
		return false, err
	}
	return c.ownerGone(ctx)
}

// waitGone waits until the whole cascade is gone and returns how long that
// took.
func (c cascade) waitGone(t *testing.T) time.Duration {
	t.Helper()
	began := time.Now()
	poll(t, "cascade "+c.name+" to be collected", c.gone)
	return time.Since(began)
}

func poll(t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// createNamespace creates a namespace for t. Nothing removes it: the
// package's control plane goes away with its directory.
func createNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + utilrand.String(5)}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// bystanders are protected objects next to the cascades of a test: a live
// owner with dependents (blocking and not), unowned objects, and objects
// that also have an owner being deleted (created by the test itself) —
// none may ever be deleted.
type bystanders struct {
	keeper obj
	objs   []obj
}

func protected(extra map[string]string) map[string]string {
	l := map[string]string{labelProtected: "true"}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// createBystanders creates a protected live owner with n dependents and n
// unowned objects of kind k in ns.
func createBystanders(t *testing.T, k kind, ns string, n int) *bystanders {
	t.Helper()
	b := &bystanders{keeper: mustCreate(t, k, ns, "keeper", protected(nil))}
	b.objs = append(b.objs, b.keeper)
	var mu sync.Mutex
	err := parallel(2*n, func(i int) error {
		var o obj
		var err error
		if i < n {
			o, err = create(t.Context(), k, ns, fmt.Sprintf("kept-%03d", i), protected(nil), b.keeper.ref(i%2 == 0))
		} else {
			o, err = create(t.Context(), k, ns, fmt.Sprintf("unowned-%03d", i-n), protected(nil))
		}
		mu.Lock()
		b.objs = append(b.objs, o)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("creating bystanders: %v", err)
	}
	return b
}

// add records more protected objects.
func (b *bystanders) add(o ...obj) { b.objs = append(b.objs, o...) }

// check fails t for every bystander that no longer exists, is a different
// object, or is being deleted.
func (b *bystanders) check(t *testing.T) {
	t.Helper()
	for _, o := range b.objs {
		m, err := o.client().Get(t.Context(), o.name, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("bystander %s: %v", o, err)
		case m.UID != o.uid:
			t.Errorf("bystander %s was replaced by uid %s", o, m.UID)
		case m.DeletionTimestamp != nil:
			t.Errorf("bystander %s is being deleted", o)
		}
	}
}

// defaultSeed is the fault injector's seed unless KGC_SEED says otherwise.
const defaultSeed = 20261121

// seed returns the fault injector's seed: $KGC_SEED, or defaultSeed. It is
// always logged so that a failure can be replayed.
func seed(t *testing.T) int64 {
	t.Helper()
	var s int64 = defaultSeed
	if v := os.Getenv("KGC_SEED"); v != "" {
		var err error
		if s, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("KGC_SEED=%q: %v", v, err)
		}
	}
	t.Logf("seed %d (set KGC_SEED=%d to replay)", s, s)
	return s
}
