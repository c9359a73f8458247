package signals

import (
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Set up once by TestMain.
var (
	kgcBinary      string
	kubeconfigPath string
	controlPlane   *cpproc.ControlPlane
	client         kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "signals", ControlPlane: cpproc.Options{
		Cluster: true,
		// kube-controller-manager with its garbage collector on, and
		// leader election, as it runs in a cluster.
		ControllerManagerFlags: []string{"--controllers=*", "--leader-elect=true"},
		// kube-controller-manager exits its process when its leader
		// election stops (the control plane's stop), unless told to
		// release the Lease and return; its code reads the process-wide
		// gate, set in the control plane's process.
		FeatureGates: map[string]bool{"ControllerManagerReleaseLeaderElectionLockOnExit": true},
	}}, func(env *testenv.Env) error {
		kubeconfigPath, client, controlPlane = env.CP.KubeconfigPath, env.Kube, env.CP
		var err error
		kgcBinary, err = testenv.BuildKGC(env.Dir)
		return err
	}))
}
