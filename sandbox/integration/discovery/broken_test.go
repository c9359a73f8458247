package discovery

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

const brokenAPIService = "v1beta1.broken.example.com"

// cascadeDependents is the number of dependents per measured cascade.
const cascadeDependents = 50

// The cascades are measured without kgc's default client budget (20 QPS),
// which would otherwise be all that is measured.
const (
	unthrottledQPS   = 1000
	unthrottledBurst = 2000
)

// TestBrokenAPIsDoNotStallCollection runs kgc next to two broken APIs: a
// CRD whose preferred version needs a conversion webhook whose Service does
// not exist (its list fails), and an aggregated APIService whose Service
// does not exist. kgc must start without waiting for them, report them, keep
// collecting built-in kinds as fast as without them, and collect the CRD's
// garbage once the CRD heals.
func TestBrokenAPIsDoNotStallCollection(t *testing.T) {
	ns := newNamespace(t)
	var healthyBG, healthyFG, brokenBG, brokenFG, healthyDirect, brokenDirect time.Duration

	t.Run("none broken", func(t *testing.T) {
		gc, _, reg := startKGC(t, kgc.Options{Workers: 5, QPS: unthrottledQPS, Burst: unthrottledBurst})
		healthyBG = measureCascades(t, gc, ns, "healthy-bg", metav1.DeletePropagationBackground)
		healthyFG = measureCascades(t, gc, ns, "healthy-fg", metav1.DeletePropagationForeground)
		healthyDirect = measureDirectDeletes(t, ns, "healthy-direct")
		logRequests(t, reg)
	})

	// Break a CRD: instances stored at v1, then v2 (the preferred version,
	// which kgc monitors) switched to an unreachable conversion webhook.
	s := newCRDSpec("broken.kgc.test", "v1", "v2")
	createCRD(t, s)
	poll(t, "CRD to be established", func() bool { return crdEstablished(s.name()) })
	crOwner := configMap(t, ns, "cr-owner", nil)
	var instances []string
	for i := range 3 {
		cr := customResource(t, s, "v1", ns, fmt.Sprintf("dangling-%d", i), []metav1.OwnerReference{cmRef(crOwner, false)})
		instances = append(instances, cr.GetName())
	}
	breakConversion(t, s, ns)
	// Their owner goes while nobody can list them.
	deleteConfigMap(t, crOwner, metav1.DeletePropagationBackground)

	// Break an aggregated API.
	createBrokenAPIService(t)

	t.Run("broken present", func(t *testing.T) {
		began := time.Now()
		gc, _, reg := startKGC(t, kgc.Options{Workers: 5, QPS: unthrottledQPS, Burst: unthrottledBurst, UnlistedHold: brokenHold})
		// kgc.Start returns once workers run; the 60s SyncTimeout is only a
		// backstop, so being ready well before it means nothing waited for
		// the broken resources.
		if took := time.Since(began); took > 30*time.Second {
			t.Errorf("kgc took %s to become ready next to broken APIs", took)
		}
		srv := httptest.NewServer(gc.Handler())
		defer srv.Close()
		monitorName := "monitor:" + s.group + "/v2/" + s.plural
		var body string
		poll(t, "readyz to show the broken CRD failing", func() bool {
			var code int
			code, body = get(t, srv.URL+"/readyz?verbose")
			return code == http.StatusOK && strings.Contains(body, "[-]"+monitorName+" failed: failing: ") &&
				strings.Contains(body, "[-]discovery:broken.example.com/v1beta1 failed: ") && strings.Contains(body, "readyz check passed")
		})
		t.Logf("/readyz?verbose lines about the broken APIs:\n%s", grepLines(body, s.group, "broken.example.com", "readyz check"))
		if code, _ := get(t, srv.URL+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz = %d with a broken CRD present, want 200 (readiness counts healthy monitors only)", code)
		}
		resource := s.group + "/v2/" + s.plural
		if v, ok := gaugeValue(t, reg, "kgc_monitor_state", map[string]string{"resource": resource, "state": "failing"}); !ok || v != 1 {
			t.Errorf("kgc_monitor_state{resource=%q,state=failing} = %v (present %v), want 1", resource, v, ok)
		}

		if v, ok := gaugeValue(t, reg, "kgc_discovery_failed_group_versions", nil); !ok || v < 1 {
			t.Errorf("kgc_discovery_failed_group_versions = %v (present %v), want at least 1 (the broken APIService)", v, ok)
		}

		brokenBG = measureCascades(t, gc, ns, "broken-bg", metav1.DeletePropagationBackground)
		brokenFG = measureCascades(t, gc, ns, "broken-fg", metav1.DeletePropagationForeground)
		if brokenFG < brokenHold {
			t.Errorf("Foreground cascades next to a never-listed CRD took %s, less than the unlisted hold %s: the foregroundDeletion finalizer went before every resource that could hold a blocking dependent was listed", brokenFG, brokenHold)
		}
		brokenDirect = measureDirectDeletes(t, ns, "broken-direct")
		logRequests(t, reg)

		for _, name := range instances {
			if customResourceGone(s, "v1", ns, name) {
				t.Fatalf("instance %s went while its CRD was broken", name)
			}
		}
		// Heal the CRD: its monitor lists, and the dangling instances go.
		healed := time.Now()
		setConversion(t, s.name(), map[string]any{"strategy": "None"})
		poll(t, "the healed CRD's dangling instances to be collected", func() bool {
			for _, name := range instances {
				if !customResourceGone(s, "v1", ns, name) {
					return false
				}
			}
			return true
		})
		t.Logf("healed CRD's dangling instances collected %s after the fix", time.Since(healed).Round(time.Millisecond))
		poll(t, "readyz to show the healed CRD ok", func() bool {
			_, body = get(t, srv.URL+"/readyz?verbose")
			return strings.Contains(body, "[+]"+monitorName+" ok")
		})
		if v, ok := gaugeValue(t, reg, "kgc_monitor_state", map[string]string{"resource": resource, "state": "synced"}); !ok || v != 1 {
			t.Errorf("after healing: kgc_monitor_state{resource=%q,state=synced} = %v (present %v), want 1", resource, v, ok)
		}
	})
	t.Logf("cascade of %d ConfigMaps (median of %d): Background %s with no broken API, %s with a broken CRD and APIService; Foreground %s vs %s",
		cascadeDependents, cascadeRounds, healthyBG.Round(time.Millisecond), brokenBG.Round(time.Millisecond), healthyFG.Round(time.Millisecond), brokenFG.Round(time.Millisecond))
	t.Logf("control, no kgc involved: the test client deleting %d ConfigMaps (5 at a time) took %s with no broken API, %s with them",
		cascadeDependents, healthyDirect.Round(time.Millisecond), brokenDirect.Round(time.Millisecond))
}

// brokenHold is kgc's unlisted hold next to the broken CRD: each Foreground
// cascade then takes at least this long.
const brokenHold = 2 * time.Second

// cascadeRounds is how many cascades of each policy are measured.
const cascadeRounds = 5

// measureCascades deletes an owner of cascadeDependents ConfigMaps with
// policy cascadeRounds times and returns the median time from the DELETE to
// the last dependent (and the owner) gone.
func measureCascades(t *testing.T, gc *kgc.Collector, ns, prefix string, policy metav1.DeletionPropagation) time.Duration {
	t.Helper()
	srv := httptest.NewServer(gc.Handler())
	defer srv.Close()
	var ds []time.Duration
	for round := range cascadeRounds {
		name := fmt.Sprintf("%s-%d", prefix, round)
		owner := configMap(t, ns, name, nil)
		for i := range cascadeDependents {
			_, err := kubeClient.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-dep-%d", name, i), Labels: map[string]string{"cascade": name},
				OwnerReferences: []metav1.OwnerReference{cmRef(owner, true)},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		// Start the clock once kgc has seen every dependent, so that only
		// the cascade is measured.
		poll(t, "kgc to see the dependents", func() bool {
			_, body := get(t, srv.URL+"/debug/controllers/garbage-collector-controller/graph?uid="+string(owner.UID))
			return strings.Count(body, "->") >= cascadeDependents
		})
		began := time.Now()
		deleteConfigMap(t, owner, policy)
		poll(t, fmt.Sprintf("%s cascade of %s", policy, name), func() bool {
			l, err := kubeClient.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "cascade=" + name})
			return err == nil && len(l.Items) == 0 && configMapGone(ns, name)
		})
		ds = append(ds, time.Since(began))
	}
	t.Logf("%s cascades of %d dependents: %v", policy, cascadeDependents, roundAll(ds))
	return median(ds)
}

// measureDirectDeletes is the control: the API server's own speed at what
// a cascade asks of it, without kgc. It deletes cascadeDependents
// ConfigMaps, 5 at a time (kgc's worker count), cascadeRounds times, and
// returns the median.
func measureDirectDeletes(t *testing.T, ns, prefix string) time.Duration {
	t.Helper()
	var ds []time.Duration
	for round := range cascadeRounds {
		var names []string
		for i := range cascadeDependents {
			cm := configMap(t, ns, fmt.Sprintf("%s-%d-%d", prefix, round, i), nil)
			names = append(names, cm.Name)
		}
		began := time.Now()
		work := make(chan string)
		errs := make(chan error, len(names))
		for range 5 {
			go func() {
				for name := range work {
					errs <- kubeClient.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
				}
			}()
		}
		for _, n := range names {
			work <- n
		}
		close(work)
		for range names {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		ds = append(ds, time.Since(began))
	}
	return median(ds)
}

// logRequests logs kgc's API requests so far, by verb and code.
func logRequests(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != "kgc_api_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetValue())
			}
			out = append(out, fmt.Sprintf("%s=%d", strings.Join(ls, "/"), int(m.GetCounter().GetValue())))
		}
	}
	t.Logf("kgc's API requests so far (code/verb=count): %s", strings.Join(out, " "))
}

func setConversion(t *testing.T, crd string, conversion map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := dynamicClient.Resource(crdGVR).Get(context.Background(), crd, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, conversion, "spec", "conversion"); err != nil {
			return err
		}
		_, err = dynamicClient.Resource(crdGVR).Update(context.Background(), u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("set conversion of CRD %s: %v", crd, err)
	}
}

// createBrokenAPIService registers an aggregated API whose Service does not
// exist, waits until the aggregator reports it unavailable, and removes it
// when the test ends.
func createBrokenAPIService(t *testing.T) {
	t.Helper()
	u := testenv.UnavailableAPIService("broken.example.com", "v1beta1")
	if _, err := dynamicClient.Resource(apiServiceGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create APIService: %v", err)
	}
	t.Cleanup(func() {
		err := dynamicClient.Resource(apiServiceGVR).Delete(context.Background(), brokenAPIService, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: delete APIService: %v", err)
		}
	})
	poll(t, "the APIService to be reported unavailable", func() bool {
		got, err := dynamicClient.Resource(apiServiceGVR).Get(context.Background(), brokenAPIService, metav1.GetOptions{})
		return err == nil && testenv.HasCondition(got, "Available", "False")
	})
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return res.StatusCode, string(b)
}

// tryGet is get for goroutines other than the test's (no t.Fatal).
func tryGet(url string) (string, error) {
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func grepLines(body string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// gaugeValue returns the value of the gauge name with exactly labels.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
