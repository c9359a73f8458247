package hostile

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	metadataClient metadata.Interface
	registry       *prometheus.Registry
	logs           = &logSink{}
	requests       = &requestCounter{}
	runDone        = make(chan error, 1)
)

// Set KGC_IT_VERBOSE=1 to also print kgc's logs.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	cfg := rest.CopyConfig(cp.Config)
	if kubeClient, err = kubernetes.NewForConfig(cfg); err == nil {
		metadataClient, err = metadata.NewForConfig(cfg)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}

	registry = prometheus.NewRegistry()
	kcfg := rest.CopyConfig(cp.Config)
	// Every request kgc sends passes through the counter.
	kcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, c: requests} })
	collector, err := kgc.New(kcfg, kgc.Options{
		Workers:               10,
		DiscoveryResyncPeriod: 5 * time.Second,
		QPS:                   1000,
		Burst:                 2000,
		Logger:                logs.logger(),
		Registerer:            registry,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgc.New: %v\n", err)
		return 1
	}
	runCtx, stopCollector := context.WithCancel(ctx)
	go func() { runDone <- collector.Run(runCtx) }()
	defer func() {
		stopCollector()
		select {
		case err := <-runDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "kgc Run returned: %v\n", err)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "kgc Run did not return within 30s of its context being canceled")
		}
	}()
	syncCtx, cancelSync := context.WithTimeout(ctx, 60*time.Second)
	err = collector.WaitForSync(syncCtx)
	cancelSync()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgc WaitForSync: %v\n", err)
		return 1
	}
	return m.Run()
}

// alive fails t if kgc's Run has returned (it must run until the end).
func alive(t *testing.T) {
	t.Helper()
	select {
	case err := <-runDone:
		runDone <- err
		t.Fatalf("kgc stopped running: %v", err)
	default:
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
		if verbose {
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
