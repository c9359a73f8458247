package breaker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// waitTimeout bounds every wait for kgc to do something.
	waitTimeout  = 120 * time.Second
	pollInterval = 100 * time.Millisecond
	// labelSet names the set a test object belongs to.
	labelSet = "kgc.test/set"
)

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// newNamespace creates a namespace for t; when t ends, its ConfigMaps go
// (whatever kgc held) and then the namespace.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := testenv.NamespaceName(t.Name())
	if _, err := kubeClient.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := kubeClient.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Logf("cleanup: delete configmaps in %s: %v", ns, err)
		}
		if err := testenv.DeleteNamespace(ctx, kubeClient, ns, metav1.DeleteOptions{}); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return ns
}

// running is one kgc collector with its HTTP handler served.
type running struct {
	c   *testenv.Collector
	srv *httptest.Server
	url string
	reg *prometheus.Registry
}

// breakerOptions are kgc run's defaults, with the Lease in ns and a short
// poll for resumes.
func breakerOptions(ns string) *kgc.BreakerOptions {
	o := kgc.DefaultBreakerOptions()
	o.LeaseNamespace, o.LeaseName = ns, "kgc"
	o.PollInterval = 200 * time.Millisecond
	return &o
}

// startKGC runs a collector with opts (plus a registry, a fast client and
// a logger) until stop or the end of t.
func startKGC(t *testing.T, opts kgc.Options) *running {
	t.Helper()
	return startKGCOn(t, restConfig, opts)
}

// startKGCOn is startKGC with the client configuration cfg (a fault
// proxy's).
func startKGCOn(t *testing.T, cfg *rest.Config, opts kgc.Options) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	opts.QPS = -1
	if opts.Workers == 0 {
		opts.Workers = 10
	}
	if testenv.Verbose {
		opts.Logger = funcr.New(func(prefix, args string) { t.Logf("kgc: %s %s", prefix, args) }, funcr.Options{Verbosity: 2})
	}
	c, err := testenv.StartCollector(cfg, opts, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.Handler())
	r := &running{c: c, srv: srv, url: srv.URL, reg: reg}
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.c == nil {
		return
	}
	r.srv.Close()
	if err := r.c.Stop(); err != nil {
		t.Error(err)
	}
	r.c = nil
}

// holds reads the collector's holds endpoint, as kgc breaker status does.
func (r *running) holds(t *testing.T) breaker.Report {
	t.Helper()
	res, err := http.Get(r.url + breaker.Path + "?limit=100000")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var rep breaker.Report
	if err := json.NewDecoder(res.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// get returns the body of one of the collector's endpoints.
func (r *running) get(t *testing.T, path string) string {
	t.Helper()
	res, err := http.Get(r.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metric returns the value of the series of name whose labels include
// labels (0 when there is none).
func (r *running) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// deletes is how many DELETEs kgc made that succeeded.
func (r *running) deletes(t *testing.T) int {
	return int(r.metric(t, "kgc_operations_total", map[string]string{"operation": "delete", "outcome": "success"}))
}

// createSet creates n ConfigMaps named set-i in ns, labelled with set, each
// with the ownerReferences refs(i) returns, from 16 clients at once (a
// restore creates in bulk).
func createSet(t *testing.T, ns, set string, n int, refs func(i int) []metav1.OwnerReference) {
	t.Helper()
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", set, i), Namespace: ns,
					Labels: map[string]string{labelSet: set}, OwnerReferences: refs(i)}}
				if _, err := kubeClient.CoreV1().ConfigMaps(ns).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating %s: %v", set, err)
	}
	t.Logf("created %d ConfigMaps of set %s in %s", n, set, time.Since(began).Round(time.Millisecond))
}

// count is how many ConfigMaps of set exist in ns (a quorum LIST).
func count(t *testing.T, ns, set string) int {
	t.Helper()
	l, err := metadataClient.Resource(cmGVR).Namespace(ns).List(t.Context(), metav1.ListOptions{LabelSelector: labelSet + "=" + set})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// waitFor polls cond until it holds, failing t after waitTimeout.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	waitWithin(t, waitTimeout, what, cond)
}

// waitWithin polls cond until it holds, failing t after timeout.
func waitWithin(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	began := time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, timeout, true, func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	t.Logf("%s after %s", what, time.Since(began).Round(time.Millisecond))
}

// cli runs `kgc args…` in-process, as a user runs it.
func cli(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := app.Execute(t.Context(), args, &out, &errb); code != 0 {
		return out.String(), fmt.Errorf("kgc %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), nil
}

// mustCLI is cli that fails t on an error, and logs the output
// (docs/operator/breaker.md quotes it).
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cli(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("$ kgc %s\n%s", strings.Join(args, " "), out)
	return out
}
