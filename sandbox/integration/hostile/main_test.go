package hostile

import (
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	metadataClient metadata.Interface
	registry       *prometheus.Registry
	collector      *testenv.Collector
	logs           = &logSink{}
	requests       = &requestCounter{}
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "hostile"}, setup))
}

func setup(env *testenv.Env) error {
	kubeClient, metadataClient = env.Kube, env.Metadata
	registry = prometheus.NewRegistry()
	kcfg := rest.CopyConfig(env.Config)
	// Every request kgc sends passes through the counter.
	kcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, c: requests} })
	var err error
	collector, err = env.StartCollector(kcfg, kgc.Options{
		Workers:               10,
		DiscoveryResyncPeriod: 5 * time.Second,
		QPS:                   1000,
		Burst:                 2000,
		Logger:                logs.logger(),
		Registerer:            registry,
	}, 60*time.Second)
	return err
}

// alive fails t if kgc's Run has returned (it must run until the end).
func alive(t *testing.T) {
	t.Helper()
	if err := collector.Running(); err != nil {
		t.Fatalf("kgc stopped running: %v", err)
	}
}

// logSink keeps kgc's log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		line := prefix + " " + args
		s.mu.Lock()
		s.lines = append(s.lines, line)
		s.mu.Unlock()
		if testenv.Verbose {
			log.Printf("kgc: %s", line)
		}
	}, funcr.Options{Verbosity: 2})
}

// find returns the first line containing every one of parts.
func (s *logSink) find(parts ...string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		ok := true
		for _, p := range parts {
			if !strings.Contains(l, p) {
				ok = false
				break
			}
		}
		if ok {
			return l, true
		}
	}
	return "", false
}

// requestCounter counts kgc's requests.
type requestCounter struct {
	total atomic.Int64
}

type countingTransport struct {
	next http.RoundTripper
	c    *requestCounter
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.c.total.Add(1)
	return t.next.RoundTrip(r)
}
