package signals

import (
	"fmt"
	"os"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"

	// kube-controller-manager's main loads these adapters: its client-go
	// REST client, leader election and work queues then export their
	// series on component-base's registry, which this process's
	// kube-controller-manager shares.
	_ "k8s.io/component-base/metrics/prometheus/clientgo"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Set up once by TestMain.
var (
	kgcBinary      string
	kubeconfigPath string
	client         kubernetes.Interface
)

func TestMain(m *testing.M) {
	// kube-controller-manager exits the process when its leader election
	// stops (the control plane's stop), unless told to release the Lease
	// and return; its code reads the process-wide gate.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{"ControllerManagerReleaseLeaderElectionLockOnExit": true}); err != nil {
		fmt.Fprintln(os.Stderr, "feature gate:", err)
		os.Exit(1)
	}
	os.Exit(testenv.Main(m, testenv.Options{Name: "signals", ControlPlane: controlplane.Options{
		Cluster: true,
		// kube-controller-manager with its garbage collector on, and
		// leader election, as it runs in a cluster.
		ControllerManagerFlags: []string{"--controllers=*", "--leader-elect=true"},
	}}, func(env *testenv.Env) error {
		kubeconfigPath, client = env.CP.KubeconfigPath, env.Kube
		var err error
		kgcBinary, err = testenv.BuildKGC(env.Dir)
		return err
	}))
}
