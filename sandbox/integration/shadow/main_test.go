// Package shadow tests kgc's shadow mode (kgc run --dry-run) against
// kube-controller-manager's own garbage collector doing the real work: a
// whole cluster runs in-process with every controller on, the garbage
// collector included (--controllers=*), and one kgc in shadow mode beside
// it decides everything, writes nothing, and compares its decisions with
// what upstream's collector does.
package shadow

import (
	"flag"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// window is kgc's --shadow-window in these tests.
const window = 30 * time.Second

var (
	kubeClient     kubernetes.Interface
	metadataClient metadata.Interface
	collector      *testenv.Collector
	registry       *prometheus.Registry
	requests       = &requestCounter{byMethod: map[string]int{}}
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testenv.Main(m, testenv.Options{
		Name: "shadow",
		ControlPlane: cpproc.Options{
			Cluster: true, Nodes: 2,
			// KGC_SHADOW_VERBOSE=1: kube-apiserver's and
			// kube-controller-manager's own logs too.
			Verbose: os.Getenv("KGC_SHADOW_VERBOSE") != "",
			// Upstream's garbage collector on: it does the work here.
			ControllerManagerFlags: []string{"--controllers=*"},
			// Upstream's collector races kgc, which runs under the race
			// detector in this binary, on every object: without it,
			// upstream is several times faster and often acts before kgc
			// has decided, where the comparison cannot tell (an owner kgc
			// never observed, a finalizer removed before kgc saw its
			// dependents go) and counts a disagreement.
			Race: true,
		},
	}, setup))
}

func setup(env *testenv.Env) error {
	kubeClient, metadataClient = env.Kube, env.Metadata
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(requests.wrap)
	registry = prometheus.NewRegistry()
	var err error
	collector, err = env.StartCollector(cfg, kgc.Options{
		DryRun:       true,
		ShadowWindow: window,
		Workers:      10,
		QPS:          -1,
		Registerer:   registry,
		Logger:       testenv.Logger("kgc"),
	}, time.Minute)
	return err
}

// requestCounter counts kgc's HTTP requests by method.
type requestCounter struct {
	mu       sync.Mutex
	byMethod map[string]int
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.byMethod[r.Method]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// writes returns the requests kgc sent that were not reads.
func (c *requestCounter) writes() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for m, n := range c.byMethod {
		if m != http.MethodGet && m != http.MethodHead {
			out[m] = n
		}
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
