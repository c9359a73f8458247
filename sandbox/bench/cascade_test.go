package bench

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
)

var (
	cfg    *rest.Config // unthrottled admin config for the benchmark's own traffic
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	stopControlPlane()
	os.Exit(code)
}

var (
	cpOnce  sync.Once
	cpErr   error
	cpStop  func()
	cpAdmin *rest.Config // cp.Config as returned (keeps its TLS server name)
)

// controlPlane starts the package's control plane on first use, so that a
// run that selects no test or benchmark needing it stays fast. TestMain
// stops it after the last test.
func controlPlane(tb testing.TB) {
	tb.Helper()
	cpOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cp, err := cpproc.Start(ctx, cpproc.Options{})
		if err != nil {
			cancel()
			cpErr = fmt.Errorf("start control plane: %w", err)
			return
		}
		cpStop = func() { _ = cp.Stop(); cancel() }
		cpAdmin = rest.CopyConfig(cp.Config)
		cfg = rest.CopyConfig(cp.Config)
		cfg.QPS, cfg.Burst = -1, 0 // unthrottled: setup must not be the bottleneck
		client = kubernetes.NewForConfigOrDie(cfg)
	})
	if cpErr != nil {
		tb.Fatal(cpErr)
	}
}

func stopControlPlane() {
	if cpStop != nil {
		cpStop()
	}
}

// startKGC runs kgc with opts on the shared control plane for the rest of
// the benchmark.
func startKGC(b *testing.B, opts kgc.Options) {
	b.Helper()
	controlPlane(b)
	startCollector(b, cfg, opts)
}

// startCollector runs kgc with opts against config until b ends, and waits (a
// minute at most) until its monitors have synced.
func startCollector(b *testing.B, config *rest.Config, opts kgc.Options) {
	b.Helper()
	c, err := kgc.New(rest.CopyConfig(config), opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if err := c.WaitForSync(wctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBackgroundCascade1000 measures the time from deleting an owner
// (Background) to the last of its 1,000 ConfigMap dependents being gone.
// DefaultFlags is kgc run's defaults (20 workers, 20 QPS, burst 30);
// Unthrottled lifts the client budget to show kgc's own ceiling.
func BenchmarkBackgroundCascade1000(b *testing.B) {
	b.Run("DefaultFlags", func(b *testing.B) {
		startKGC(b, kgc.Options{QPS: 20, Burst: 30})
		benchmarkBackgroundCascade(b, 1000)
	})
	b.Run("Unthrottled", func(b *testing.B) {
		startKGC(b, kgc.Options{QPS: 5000, Burst: 5000})
		benchmarkBackgroundCascade(b, 1000)
	})
}

func benchmarkBackgroundCascade(b *testing.B, dependents int) {
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		ns := fmt.Sprintf("bench-bg-%d-%d", time.Now().UnixNano(), i)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		owner, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		createDependents(b, ns, owner, dependents)
		b.StartTimer()
		start := time.Now()
		bg := metav1.DeletePropagationBackground
		if err := client.CoreV1().ConfigMaps(ns).Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			b.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			// kube-root-ca.crt is not published without a controller manager;
			// count only ours.
			n := 0
			for i := range l.Items {
				if len(l.Items[i].OwnerReferences) > 0 {
					n++
				}
			}
			return n == 0, nil
		})
		if err != nil {
			b.Fatalf("cascade did not finish: %v", err)
		}
		elapsed := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(dependents)/elapsed.Seconds(), "objects/s")
		b.Logf("%d-dependent Background cascade: %s (%.0f objects/s)", dependents, elapsed.Round(time.Millisecond), float64(dependents)/elapsed.Seconds())
		_ = client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		b.StartTimer()
	}
}

func createDependents(b *testing.B, ns string, owner *corev1.ConfigMap, n int) {
	b.Helper()
	refs := []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
	createCMs(b, ns, n, func(i int) string { return fmt.Sprintf("dep-%04d", i) },
		func(int) []metav1.OwnerReference { return refs })
}
