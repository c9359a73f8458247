package breaker

import (
	"os"
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Shared by every test of the package; set up once by TestMain.
var (
	restConfig     *rest.Config
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
	kubeconfigPath string
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "breaker"}, func(env *testenv.Env) error {
		restConfig, kubeconfigPath = env.Config, env.CP.KubeconfigPath
		kubeClient, metadataClient, dynamicClient = env.Kube, env.Metadata, env.Dynamic
		return nil
	}))
}
