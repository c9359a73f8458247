package discovery

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Shared by every test of the package; set up once by TestMain.
var (
	restConfig     *rest.Config
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
)

// Set KGC_IT_VERBOSE=1 to see kgc's logs.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "kgc-integration-discovery-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Logf: func(format string, args ...any) {
		if verbose {
			log.Printf("controlplane: "+format, args...)
		}
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	restConfig = rest.CopyConfig(cp.Config)
	if kubeClient, err = kubernetes.NewForConfig(restConfig); err == nil {
		if dynamicClient, err = dynamic.NewForConfig(restConfig); err == nil {
			metadataClient, err = metadata.NewForConfig(restConfig)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}
	return m.Run()
}
