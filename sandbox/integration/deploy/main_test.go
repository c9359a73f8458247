package deploy

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Shared by every test of the package; set up once by TestMain.
var (
	// adminConfig is the control plane's admin (system:masters) config.
	adminConfig *rest.Config
	// kubeconfigPath is an admin kubeconfig for the control plane.
	kubeconfigPath string
	kubeClient     kubernetes.Interface
	// repoRoot is the root of the repository (the root module).
	repoRoot string
	// workDir holds what outlives a single test (the kgc binary built the
	// Dockerfile's way); removed after the tests.
	workDir string
)

func TestMain(m *testing.M) {
	var err error
	if repoRoot, err = findRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Tests stop their collectors and clients (t.Cleanup) before m.Run
	// returns, so before the control plane stops.
	os.Exit(testenv.Main(m, testenv.Options{Name: "deploy"}, func(env *testenv.Env) error {
		adminConfig, kubeconfigPath, kubeClient = env.Config, env.CP.KubeconfigPath, env.Kube
		workDir = env.Dir
		return nil
	}))
}
