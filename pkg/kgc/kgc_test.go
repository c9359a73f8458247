package kgc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

func TestNewValidates(t *testing.T) {
	if _, err := kgc.New(nil, kgc.Options{}); err == nil {
		t.Error("New(nil) succeeded")
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := kgc.New(cfg, kgc.Options{QPS: -1}); err != nil {
		t.Errorf("negative QPS (no client-side rate limit) refused: %v", err)
	}
	if _, err := kgc.New(cfg, kgc.Options{Burst: -1}); err == nil {
		t.Error("negative Burst accepted")
	}
	if _, err := kgc.New(cfg, kgc.Options{Workers: -1}); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Errorf("negative Workers: %v", err)
	}
	if _, err := kgc.New(cfg, kgc.Options{MaxWritesInFlight: -1}); err == nil || !strings.Contains(err.Error(), "writes in flight") {
		t.Errorf("negative MaxWritesInFlight: %v", err)
	}
	if _, err := kgc.New(cfg, kgc.Options{DryRun: true, NamespaceLifecycle: true}); err == nil || !strings.Contains(err.Error(), "DryRun excludes NamespaceLifecycle") {
		t.Errorf("DryRun with NamespaceLifecycle: %v", err)
	}
	if _, err := kgc.New(cfg, kgc.Options{ShadowWindow: -1}); err == nil || !strings.Contains(err.Error(), "ShadowWindow") {
		t.Errorf("negative ShadowWindow: %v", err)
	}
	if _, err := kgc.New(cfg, kgc.Options{DryRun: true}); err != nil {
		t.Errorf("DryRun: %v", err)
	}
	for _, bad := range []kgc.BenchmarkShard{{Index: 0, Count: 0}, {Index: -1, Count: 2}, {Index: 2, Count: 2}} {
		if _, err := kgc.New(cfg, kgc.Options{BenchmarkShard: &bad}); err == nil || !strings.Contains(err.Error(), "BenchmarkShard") {
			t.Errorf("BenchmarkShard %+v: %v", bad, err)
		}
	}
	if _, err := kgc.New(cfg, kgc.Options{BenchmarkShard: &kgc.BenchmarkShard{Index: 1, Count: 2}}); err != nil {
		t.Errorf("BenchmarkShard 1 of 2: %v", err)
	}
}

func TestNewDoesNotTouchItsInputs(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls.Add(1) }))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL, UserAgent: "mine"}
	c, err := kgc.New(cfg, kgc.Options{QPS: 5, Burst: 6})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != 0 || cfg.Burst != 0 || cfg.UserAgent != "mine" {
		t.Errorf("New changed the caller's rest.Config: %+v", cfg)
	}
	if calls.Load() != 0 {
		t.Errorf("New made %d requests; it must not contact the server", calls.Load())
	}
	// Before Run: alive, not ready.
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/livez": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s before Run = %d, want %d", path, rec.Code, want)
		}
	}
}

func TestDefaultIgnoredResources(t *testing.T) {
	got := kgc.DefaultIgnoredResources()
	if len(got) != 2 || got[0].Resource != "events" || got[1].Resource != "events" {
		t.Errorf("DefaultIgnoredResources = %v", got)
	}
	got[0].Resource = "changed"
	if kgc.DefaultIgnoredResources()[0].Resource != "events" {
		t.Error("DefaultIgnoredResources returns shared state")
	}
}

// TestRunAgainstBrokenServer: with an API server that never answers
// discovery, Run keeps trying until its context ends, then returns nil
// having stopped what it started; WaitForSync gives up with the context.
func TestRunAgainstBrokenServer(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := kgc.New(&rest.Config{Host: srv.URL}, kgc.Options{Workers: 1, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := c.WaitForSync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForSync = %v, want the context's deadline", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil after cancellation", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if requests.Load() == 0 {
		t.Error("Run never contacted the server")
	}
}

func TestRunOnlyOnce(t *testing.T) {
	c, err := kgc.New(&rest.Config{Host: "http://127.0.0.1:1"}, kgc.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Two Runs race for the collector with an already-cancelled context, so
	// the winner returns at once: exactly one must be refused.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results := make(chan error, 2)
	for range 2 {
		go func() { results <- c.Run(ctx) }()
	}
	refused := 0
	for range 2 {
		select {
		case err := <-results:
			if errors.Is(err, kgc.ErrAlreadyStarted) {
				refused++
			} else if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
	}
	if refused != 1 {
		t.Errorf("%d of 2 Runs were refused, want exactly 1", refused)
	}
}

func TestWaitForSyncReportsStoppedCollector(t *testing.T) {
	c, err := kgc.New(&rest.Config{Host: "http://127.0.0.1:1"}, kgc.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(runCtx) }()
	cancel()
	<-done
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	if err := c.WaitForSync(waitCtx); !errors.Is(err, kgc.ErrStopped) {
		t.Errorf("WaitForSync after Run ended = %v, want ErrStopped", err)
	}
}

func TestStartGivesUpWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	gc, err := kgc.Start(ctx, &rest.Config{Host: "http://127.0.0.1:1"}, kgc.Options{Workers: 1})
	if err == nil {
		gc.Stop()
		t.Fatal("Start against an unreachable server succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Start = %v, want the context's deadline", err)
	}
}

func TestStopWithoutStartIsANoop(t *testing.T) {
	c, err := kgc.New(&rest.Config{Host: "http://127.0.0.1:1"}, kgc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Stop()
	c.Stop()
}

// /metrics names the kgc it serves: kgc_build_info with its version,
// revision, build date and Go version.
func TestMetricsScrapeHasBuildInfo(t *testing.T) {
	c, err := kgc.New(&rest.Config{Host: "http://127.0.0.1:1"}, kgc.Options{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	re := regexp.MustCompile(`(?m)^kgc_build_info\{builddate="[^"]+",goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="[^"]+",version="[^"]+"\} 1$`)
	if !re.MatchString(rec.Body.String()) {
		t.Errorf("/metrics lacks kgc_build_info{builddate,goversion,revision,version} 1:\n%s", rec.Body.String())
	}
}

// A New that fails after it registered its metrics leaves the registry as
// it found it: scraping it does not reach into a collector that was never
// built, and a corrected New may register on it again.
func TestFailedNewLeavesRegistryClean(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	if _, err := kgc.New(cfg, kgc.Options{Registerer: reg, Workers: -1}); err == nil {
		t.Fatal("negative Workers accepted")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("scraping after a failed New: %v", err)
	}
	for _, mf := range mfs {
		t.Errorf("a failed New left %s registered", mf.GetName())
	}
	if _, err := kgc.New(cfg, kgc.Options{Registerer: reg}); err != nil {
		t.Fatalf("New on the registry of a failed New: %v", err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// Shadow mode makes no write, and holds are writes (a trip is recorded on
// the Lease): the library refuses the two together.
func TestDryRunExcludesHolds(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	if _, err := kgc.New(cfg, kgc.Options{DryRun: true, HoldRestored: true}); err == nil || !strings.Contains(err.Error(), "DryRun excludes") {
		t.Errorf("DryRun with HoldRestored: %v", err)
	}
	if _, err := kgc.New(cfg, kgc.Options{DryRun: true, Breaker: &kgc.BreakerOptions{}}); err == nil || !strings.Contains(err.Error(), "DryRun excludes") {
		t.Errorf("DryRun with a Breaker: %v", err)
	}
}
