package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
)

// BenchmarkNamespaceDeletion times the deletion of a namespace holding n
// ConfigMaps — from the namespace's DELETE to the Namespace being gone —
// under the two implementations of the namespace lifecycle, each on the
// same kind of sandbox: a whole cluster (cpproc.Options.Cluster:
// kube-controller-manager v1.36.3 without its garbage collector,
// kube-scheduler, one simulated node) with kgc as the garbage collector.
//
//   - kgc: kube-controller-manager's namespace controller is off
//     (--controllers=*,-garbage-collector-controller,-namespace-controller)
//     and kgc runs with NamespaceLifecycle;
//   - kcm: kube-controller-manager's namespace controller empties the
//     namespace, kgc's lifecycle is off.
//
// Both have the same client budget (1000 QPS, burst 2000: what the sandbox
// gives kube-controller-manager) and both wait 5 s before the namespace
// may go (upstream before it starts, kgc before it removes the finalizer),
// which is the floor of every time. The two clusters run one after the
// other, never at once.
//
// Each size is one iteration (run with -benchtime 1x; make bench-namespaces);
// sizes are KGC_NS_BENCH_SIZES (default 1000,10000). Reported: s/namespace
// (the time), and for kgc its API requests during the deletion by verb
// (kgc_api_requests_total, the monitors' own lists and watches included;
// kube-controller-manager's are not counted) and the resources whose
// DELETECOLLECTION its graph saved (kgc_namespace_resources_skipped_total).
func BenchmarkNamespaceDeletion(b *testing.B) {
	sizes := []int{1000, 10000}
	if s := os.Getenv("KGC_NS_BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("KGC_NS_BENCH_SIZES: %q is not a positive number", f)
			}
			sizes = append(sizes, n)
		}
	}
	for _, impl := range []string{"kgc", "kcm"} {
		b.Run(impl, func(b *testing.B) {
			env := startNamespaceCluster(b, impl == "kgc")
			for _, n := range sizes {
				b.Run(fmt.Sprint(n), func(b *testing.B) {
					var total time.Duration
					var calls callCounts
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						ns := fmt.Sprintf("bench-ns-%d-%d-%d", n, i, time.Now().UnixNano()%100000)
						if _, err := env.client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
							b.Fatal(err)
						}
						began := time.Now()
						createConfigMaps(b, env.client, ns, n)
						b.Logf("%s: created %d configmaps in %s", impl, n, time.Since(began).Round(time.Millisecond))
						before := readAllCalls(b, env.reg)
						b.StartTimer()
						began = time.Now()
						if err := env.client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}); err != nil {
							b.Fatal(err)
						}
						err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
							_, err := env.client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
							return apierrors.IsNotFound(err), nil
						})
						d := time.Since(began)
						b.StopTimer()
						if err != nil {
							b.Fatalf("namespace %s with %d configmaps not gone: %v", ns, n, err)
						}
						total += d
						calls = readAllCalls(b, env.reg).minus(before)
						b.Logf("%s: namespace with %d configmaps gone in %s; kgc's requests meanwhile: %s", impl, n, d.Round(time.Millisecond), calls)
					}
					b.ReportMetric(total.Seconds()/float64(b.N), "s/namespace")
					if impl == "kgc" {
						for _, verb := range []string{"deletecollection", "list", "delete"} {
							b.ReportMetric(calls[verb], verb+"-requests")
						}
						// DELETECOLLECTIONs saved by the graph (resources it
						// showed empty, confirmed by their LIST).
						b.ReportMetric(calls["skipped"], "skipped-resources")
					}
				})
			}
		})
	}
}

type namespaceCluster struct {
	client kubernetes.Interface
	reg    *prometheus.Registry
}

// startNamespaceCluster starts a sandbox cluster and kgc on it, with the
// namespace lifecycle done by kgc (kgcLifecycle) or by
// kube-controller-manager; both stop when b ends.
func startNamespaceCluster(b *testing.B, kgcLifecycle bool) namespaceCluster {
	b.Helper()
	opts := cpproc.Options{Cluster: true, Nodes: 1, Logf: b.Logf}
	if kgcLifecycle {
		opts.ControllerManagerFlags = []string{"--controllers=" + cpproc.DefaultControllers + ",-namespace-controller"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp, err := cpproc.Start(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Logged, not failed: the times are measured by then, and
		// cpproc's Stop still reports kube-scheduler's ordinary exit
		// ("finished without leader elect") as an error.
		if err := cp.Stop(); err != nil {
			b.Logf("stopping the cluster: %v", err)
		}
	})
	reg := prometheus.NewRegistry()
	startCollector(b, cp.Config, kgc.Options{QPS: 1000, Burst: 2000, NamespaceLifecycle: kgcLifecycle, Registerer: reg})
	admin := rest.CopyConfig(cp.Config)
	admin.QPS, admin.Burst = -1, 0 // the benchmark's own traffic is unthrottled
	return namespaceCluster{client: kubernetes.NewForConfigOrDie(admin), reg: reg}
}

// readAllCalls reads kgc_api_requests_total by verb (every request kgc
// sent, watches and lists of its monitors included).
func readAllCalls(b *testing.B, reg *prometheus.Registry) callCounts {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := callCounts{}
	for _, mf := range mfs {
		if mf.GetName() == "kgc_namespace_resources_skipped_total" {
			for _, m := range mf.GetMetric() {
				out["skipped"] += m.GetCounter().GetValue()
			}
		}
		if mf.GetName() != "kgc_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "verb" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

func (c callCounts) minus(before callCounts) callCounts {
	out := callCounts{}
	for v, n := range c {
		if d := n - before[v]; d > 0 {
			out[v] = d
		}
	}
	return out
}

// createConfigMaps creates n ConfigMaps in ns with 32 clients at once.
func createConfigMaps(b *testing.B, client kubernetes.Interface, ns string, n int) {
	b.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"k": strings.Repeat("v", 64)}}
				if _, err := client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
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
	if firstErr != nil {
		b.Fatalf("create configmaps: %v", firstErr)
	}
}
