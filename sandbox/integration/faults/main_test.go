package faults

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/safety"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Set up once by TestMain.
var (
	cp             *cpproc.ControlPlane
	kgcBinary      string
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
	watcher        *safety.Watcher
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{
		Name: "faults",
		ControlPlane: cpproc.Options{
			// Secrets are served by etcd directly: see TestWatchExpiry.
			WatchCacheSizes: []string{"secrets#0"},
		},
	}, setup))
}

// setup runs once the control plane is up. The tests restart the apiserver:
// testenv.Main fails the package if the control plane does not stop cleanly
// afterwards.
func setup(env *testenv.Env) error {
	cp, kubeClient, dynamicClient, metadataClient = env.CP, env.Kube, env.Dynamic, env.Metadata
	var err error
	// The binary, exactly as users build it (TestSIGKILLMidForegroundCascade).
	if kgcBinary, err = testenv.BuildKGC(env.Dir); err != nil {
		return err
	}
	if watcher, err = startSafetyWatcher(env.Ctx, metadataClient); err != nil {
		return fmt.Errorf("safety watcher: %w", err)
	}
	return nil
}
