package discovery

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
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "discovery"}, func(env *testenv.Env) error {
		restConfig = env.Config
		kubeClient, dynamicClient, metadataClient = env.Kube, env.Dynamic, env.Metadata
		return nil
	}))
}
