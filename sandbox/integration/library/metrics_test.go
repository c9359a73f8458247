package library

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// TestMetricsEndpoint runs kgc with a registry, drives a cascade and an
// unresolvable reference through the real API server, and checks that
// /metrics shows every metric docs/metrics.md documents.
func TestMetricsEndpoint(t *testing.T) {
	ctx := t.Context()
	gc, err := kgc.Start(ctx, cfg, kgc.Options{Registerer: prometheus.NewRegistry(), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Stop()
	srv := httptest.NewServer(gc.Handler())
	defer srv.Close()

	ns := newNamespace(t)
	cascade(t, gc, ns)
	// A reference to a kind no API serves: kept, counted, reported.
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "unresolvable",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "nothing.kgc.test/v1", Kind: "Nothing", Name: "x", UID: types.UID("00000000-0000-0000-0000-000000000001"),
		}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	documented := documentedMetrics(t)
	var missing []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		body := get(t, srv.URL+"/metrics")
		missing = missing[:0]
		for _, name := range documented {
			if !regexp.MustCompile(`(?m)^` + name + `(_bucket|_sum|_count)?[{ ]`).MatchString(body) {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("/metrics lacks documented metrics %v", missing)
	}
	// Series exist from the start at zero: require the ones this test drove
	// to have counted.
	var body string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		body = get(t, srv.URL+"/metrics")
		for _, want := range []string{
			`(?m)^kgc_operations_total\{operation="delete",outcome="success"\} [1-9]`,
			`(?m)^kgc_unresolvable_references_total\{reason="kind_not_served"\} [1-9]`,
			`(?m)^kgc_monitor_synced\{resource="v1/configmaps"\} 1$`,
			`(?m)^kgc_api_requests_total\{code="200",verb="watch"\} [1-9]`, // every monitor watches its resource
			`(?m)^kgc_cascade_duration_seconds_count [1-9]`,
		} {
			if !regexp.MustCompile(want).MatchString(body) {
				missing = []string{want}
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("/metrics does not match %v; API request counts:\n%s", missing, grepLines(body, "kgc_api_requests_total"))
	}
	if verbose := get(t, srv.URL+"/readyz?verbose"); !strings.Contains(verbose, "[+]monitor:v1/configmaps ok") || !strings.Contains(verbose, "readyz check passed") {
		t.Errorf("/readyz?verbose:\n%s", verbose)
	}
}

func documentedMetrics(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(kgc_[a-z_]+)`").FindAllStringSubmatch(string(data), -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("found only %d metrics in docs/metrics.md", len(out))
	}
	return out
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
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

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
