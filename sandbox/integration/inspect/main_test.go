package inspect

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Shared by every test of the package; set up once by TestMain.
var (
	restConfig     *rest.Config
	kubeClient     kubernetes.Interface
	metadataClient metadata.Interface
	kubeconfigPath string
)

// Set KGC_IT_VERBOSE=1 to see the control plane's and kgc's logs.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir, err := os.MkdirTemp("", "kgc-integration-inspect-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Logf: logf("controlplane")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	logf("setup")("control plane up after %s", time.Since(start).Round(time.Millisecond))

	restConfig = rest.CopyConfig(cp.Config)
	kubeconfigPath = cp.KubeconfigPath
	if kubeClient, err = kubernetes.NewForConfig(restConfig); err == nil {
		metadataClient, err = metadata.NewForConfig(restConfig)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}
	return m.Run()
}

func logf(component string) func(string, ...any) {
	return func(format string, args ...any) {
		if verbose {
			log.Printf(component+": "+format, args...)
		}
	}
}

func kgcLogger() logr.Logger {
	if !verbose {
		return logr.Discard()
	}
	return funcr.New(func(prefix, args string) {
		log.Printf("kgc: %s %s", prefix, args)
	}, funcr.Options{Verbosity: 4})
}
