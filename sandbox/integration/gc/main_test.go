package gc

import (
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/safety"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
	collector      *testenv.Collector
	watcher        *safety.Watcher
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "gc"}, setup))
}

func setup(env *testenv.Env) error {
	// env.Config's rate limits are raised already: the test clients are not
	// the bottleneck.
	kubeClient, dynamicClient, metadataClient = env.Kube, env.Dynamic, env.Metadata

	var err error
	collector, err = env.StartCollector(rest.CopyConfig(env.Config), kgc.Options{
		Workers:               5,
		DiscoveryResyncPeriod: time.Second,
		Logger:                testenv.Logger("kgc"),
	}, 60*time.Second)
	if err != nil {
		return err
	}

	// Like kgc, the watcher is stopped (env.Ctx) before the control plane.
	if watcher, err = startSafetyWatcher(env.Ctx, metadataClient); err != nil {
		return fmt.Errorf("safety watcher: %w", err)
	}
	return nil
}
