package discovery

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/collector"
	kgcdiscovery "github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// waitTimeout bounds every wait for kgc to do something.
	waitTimeout = 60 * time.Second
	// pollInterval is how often waits re-check (short: some waits measure).
	pollInterval = 10 * time.Millisecond
	// labelKey is the pprof label every collector of these tests runs under.
	labelKey = "kgc-test-collector"
)

var crdGVR = testenv.CRDGVR

var collectorSeq atomic.Int64

// kgcConfig is a copy of the admin config with a transport of its own (a
// Proxy func keeps client-go from sharing its cached transport with the test
// clients), so that the collector's connections are its own goroutines.
func kgcConfig() *rest.Config {
	cfg := rest.CopyConfig(restConfig)
	cfg.Proxy = http.ProxyFromEnvironment
	return cfg
}

func kgcLogger(t *testing.T) logr.Logger {
	return testenv.Logger("kgc[" + t.Name() + "]")
}

// startKGC starts the public library's collector under its own pprof label
// and stops it when the test ends. It returns the collector, its label and
// its metrics registry.
func startKGC(t *testing.T, opts kgc.Options) (*kgc.Collector, string, *prometheus.Registry) {
	t.Helper()
	gc, label, reg, _ := startStoppableKGC(t, opts)
	return gc, label, reg
}

// startStoppableKGC is startKGC that also returns a function stopping kgc
// before the test ends (a restart).
func startStoppableKGC(t *testing.T, opts kgc.Options) (*kgc.Collector, string, *prometheus.Registry, func()) {
	t.Helper()
	label := strconv.FormatInt(collectorSeq.Add(1), 10)
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	opts.Logger = kgcLogger(t)
	gc, err := kgc.New(kgcConfig(), opts)
	if err != nil {
		t.Fatalf("kgc.New: %v", err)
	}
	began := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	pprof.Do(ctx, pprof.Labels(labelKey, label), func(ctx context.Context) {
		go func() {
			defer close(done)
			_ = gc.Run(ctx)
		}()
	})
	stop := sync.OnceFunc(func() { stopWithin(t, "kgc", cancel, done) })
	t.Cleanup(stop)
	syncCtx, cancelSync := context.WithTimeout(context.Background(), waitTimeout)
	defer cancelSync()
	if err := gc.WaitForSync(syncCtx); err != nil {
		t.Fatalf("kgc.WaitForSync: %v\nkgc's goroutines:\n%s", err, goroutineStacks(label))
	}
	t.Logf("kgc ready %s after Run", time.Since(began).Round(time.Millisecond))
	return gc, label, reg, stop
}

// startCollector runs the internal collector (for its test hooks) the way
// the library does, under its own pprof label, until the test ends.
func startCollector(t *testing.T, resync time.Duration) (*collector.Collector, string) {
	t.Helper()
	return startCollectorVia(t, nil, resync)
}

// startCollectorVia is startCollector with the collector's requests going
// through ft (nil: none); ft's held watches are released when the test ends,
// before the collector stops.
func startCollectorVia(t *testing.T, ft *faultproxy.Transport, resync time.Duration) (*collector.Collector, string) {
	t.Helper()
	label := strconv.FormatInt(collectorSeq.Add(1), 10)
	cfg := kgcConfig()
	if ft != nil {
		cfg.WrapTransport = ft.Wrap
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	c, err := collector.New(collector.Config{
		Metadata:     md,
		Discovery:    dc,
		Mapper:       restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		Workers:      5,
		Ignored:      kgcdiscovery.DefaultIgnored(),
		ResyncPeriod: resync,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), kgcLogger(t)))
	done := make(chan struct{})
	pprof.Do(ctx, pprof.Labels(labelKey, label), func(ctx context.Context) {
		go func() {
			defer close(done)
			defer httpClient.CloseIdleConnections()
			_ = c.Run(ctx)
		}()
	})
	t.Cleanup(func() { stopWithin(t, "collector", cancel, done) })
	if ft != nil {
		t.Cleanup(ft.ReleaseWatches) // runs first: the collector's watches must be able to end
	}
	poll(t, "collector to sync", c.Synced)
	return c, label
}

// stopWithin cancels what runs until done closes, and waits waitTimeout
// for it to end.
func stopWithin(t *testing.T, what string, cancel func(), done <-chan struct{}) {
	cancel()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Errorf("%s did not stop within %s", what, waitTimeout)
	}
}

var profileRecord = regexp.MustCompile(`^(\d+) @ `)

// goroutines counts the goroutines running under the collector label.
func goroutines(label string) int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	want := fmt.Sprintf("%q:%q", labelKey, label)
	n, current := 0, 0
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := profileRecord.FindStringSubmatch(line); m != nil {
			current, _ = strconv.Atoi(m[1])
			continue
		}
		if strings.HasPrefix(line, "# labels:") && strings.Contains(line, want) {
			n += current
		}
	}
	return n
}

// goroutineStacks returns the stacks of the collector's goroutines (for
// failure messages).
func goroutineStacks(label string) string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	want := fmt.Sprintf("%q:%q", labelKey, label)
	var out []string
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(rec, want) {
			out = append(out, rec)
		}
	}
	return strings.Join(out, "\n\n")
}

// poll waits for cond, failing the test after waitTimeout.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := pollErr(waitTimeout, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func pollErr(timeout time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(context.Background(), pollInterval, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
}

// newNamespace creates a namespace for t and removes it (and what is left in
// it) when t ends. No namespace controller runs: it is finalized by hand.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := testenv.NamespaceName(t.Name())
	if _, err := kubeClient.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		bg := metav1.DeletePropagationBackground
		// Drop test finalizers first, or the objects never go.
		cms, err := kubeClient.CoreV1().ConfigMaps(name).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, cm := range cms.Items {
				if len(cm.Finalizers) > 0 {
					_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
						c, err := kubeClient.CoreV1().ConfigMaps(name).Get(ctx, cm.Name, metav1.GetOptions{})
						if err != nil {
							return err
						}
						c.Finalizers = nil
						_, err = kubeClient.CoreV1().ConfigMaps(name).Update(ctx, c, metav1.UpdateOptions{})
						return err
					})
				}
			}
		}
		_ = kubeClient.CoreV1().ConfigMaps(name).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
		if err := testenv.DeleteNamespace(ctx, kubeClient, name, metav1.DeleteOptions{}); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return name
}

// configMap creates a ConfigMap with the given owners and finalizers.
func configMap(t *testing.T, ns, name string, refs []metav1.OwnerReference, finalizers ...string) *corev1.ConfigMap {
	t.Helper()
	cm, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: ns, OwnerReferences: refs, Finalizers: finalizers,
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap %s/%s: %v", ns, name, err)
	}
	return cm
}

func refTo(o metav1.Object, apiVersion, kind string, block bool) metav1.OwnerReference {
	return testenv.OwnerRef(apiVersion, kind, o.GetName(), o.GetUID(), block)
}

func cmRef(cm *corev1.ConfigMap, block bool) metav1.OwnerReference {
	return refTo(cm, "v1", "ConfigMap", block)
}

// configMapGone reports whether the ConfigMap is gone (any error but
// NotFound counts as not gone).
func configMapGone(ns, name string) bool {
	_, err := kubeClient.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

func deleteConfigMap(t *testing.T, cm *corev1.ConfigMap, policy metav1.DeletionPropagation) {
	t.Helper()
	err := kubeClient.CoreV1().ConfigMaps(cm.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{
		PropagationPolicy: &policy, Preconditions: &metav1.Preconditions{UID: &cm.UID},
	})
	if err != nil {
		t.Fatalf("delete configmap %s/%s (%s): %v", cm.Namespace, cm.Name, policy, err)
	}
}

// crdSpec describes a namespaced CRD in group kgc.test with a random plural.
type crdSpec struct {
	group, plural, kind string
	// versions in order; the first is the storage version.
	versions []string
}

func newCRDSpec(group string, versions ...string) crdSpec {
	suffix := utilrand.String(6)
	return crdSpec{group: group, plural: "widgets" + suffix, kind: "Widget" + strings.ToUpper(suffix[:1]) + suffix[1:], versions: versions}
}

func (s crdSpec) name() string { return s.plural + "." + s.group }

func (s crdSpec) gvr(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: s.group, Version: version, Resource: s.plural}
}

func (s crdSpec) object() *unstructured.Unstructured {
	return testenv.CRD(s.group, s.plural, s.kind, true, s.versions...)
}

// createCRD creates the CRD (deleted when the test ends unless gone by then).
func createCRD(t *testing.T, s crdSpec) {
	t.Helper()
	if _, err := dynamicClient.Resource(crdGVR).Create(context.Background(), s.object(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD %s: %v", s.name(), err)
	}
	t.Cleanup(func() {
		err := dynamicClient.Resource(crdGVR).Delete(context.Background(), s.name(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: delete CRD %s: %v", s.name(), err)
		}
	})
}

// crdEstablished reports whether the CRD's Established condition is True.
func crdEstablished(name string) bool {
	u, err := dynamicClient.Resource(crdGVR).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil && testenv.HasCondition(u, "Established", "True")
}

// deleteCRDAndWait deletes the CRD and waits until it is gone (the
// apiserver deletes its instances first).
func deleteCRDAndWait(t *testing.T, name string) {
	t.Helper()
	if err := dynamicClient.Resource(crdGVR).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD %s: %v", name, err)
	}
	poll(t, "CRD "+name+" to be gone", func() bool {
		_, err := dynamicClient.Resource(crdGVR).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// customResource creates an instance through version (retrying while the
// freshly established endpoint still answers NotFound).
func customResource(t *testing.T, s crdSpec, version, ns, name string, refs []metav1.OwnerReference) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(s.group + "/" + version)
	u.SetKind(s.kind)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetOwnerReferences(refs)
	var created *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		created, err = dynamicClient.Resource(s.gvr(version)).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", s.kind, ns, name, err)
	}
	return created
}

func customResourceGone(s crdSpec, version, ns, name string) bool {
	_, err := dynamicClient.Resource(s.gvr(version)).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// ghostRef is a reference to a ConfigMap that never existed.
func ghostRef(name string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: testenv.RandomUID()}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
