package leaderelection

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Set up once by TestMain.
var (
	kgcBinary      string
	kubeconfigPath string
	client         kubernetes.Interface
)

// Set KGC_IT_VERBOSE=1 to print the kgc processes' logs even when the
// tests pass.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "kgc-integration-le-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// The binary, exactly as users build it.
	began := time.Now()
	kgcBinary = filepath.Join(dir, "kgc")
	build := exec.Command("go", "build", "-o", kgcBinary, "github.com/kgc-dev/kgc/cmd/kgc")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kgc:", err)
		return 1
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "kgc built in %s\n", time.Since(began).Round(time.Millisecond))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start control plane:", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop control plane:", err)
		}
	}()
	kubeconfigPath = cp.KubeconfigPath
	httpClient, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		fmt.Fprintln(os.Stderr, "http client:", err)
		return 1
	}
	// The test's connections end before the control plane stops (deferred
	// calls run in reverse); the kgc processes are killed by the tests'
	// cleanups, which run inside m.Run.
	defer httpClient.CloseIdleConnections()
	if client, err = kubernetes.NewForConfigAndClient(cp.Config, httpClient); err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 1
	}
	return m.Run()
}
