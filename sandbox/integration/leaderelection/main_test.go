package leaderelection

import (
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Set up once by TestMain.
var (
	kgcBinary      string
	kubeconfigPath string
	client         kubernetes.Interface
)

func TestMain(m *testing.M) {
	// The kgc processes are killed by the tests' cleanups, which run inside
	// m.Run, before the control plane stops.
	os.Exit(testenv.Main(m, testenv.Options{Name: "le"}, func(env *testenv.Env) error {
		kubeconfigPath, client = env.CP.KubeconfigPath, env.Kube
		var err error
		// The binary, exactly as users build it.
		kgcBinary, err = testenv.BuildKGC(env.Dir)
		return err
	}))
}
