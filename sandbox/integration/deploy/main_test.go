package deploy

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
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

// Set KGC_IT_VERBOSE=1 to see the control plane's progress messages.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var err error
	if repoRoot, err = findRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if workDir, err = os.MkdirTemp("", "kgc-integration-deploy-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(workDir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := controlplane.Options{}
	if verbose {
		opts.Logf = func(format string, args ...any) { log.Printf("controlplane: "+format, args...) }
	}
	cp, err := controlplane.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start control plane:", err)
		return 1
	}
	// Tests stop their collectors and clients (t.Cleanup) before m.Run
	// returns, so before the control plane stops.
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}()
	adminConfig, kubeconfigPath = cp.Config, cp.KubeconfigPath
	if kubeClient, err = kubernetes.NewForConfig(rest.CopyConfig(adminConfig)); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	return m.Run()
}
