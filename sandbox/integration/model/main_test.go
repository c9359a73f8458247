package model

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
	watcher        *safetyWatcher
)

// Set KGC_IT_VERBOSE=1 to see the control plane's and kgc's logs.
var verbose = os.Getenv("KGC_IT_VERBOSE") != ""

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cp, err := controlplane.Start(ctx, controlplane.Options{Logf: logf("controlplane")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start control plane: %v\n", err)
		return 1
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop control plane: %v\n", err)
		}
	}()
	cfg := rest.CopyConfig(cp.Config)
	if kubeClient, err = kubernetes.NewForConfig(cfg); err == nil {
		if dynamicClient, err = dynamic.NewForConfig(cfg); err == nil {
			metadataClient, err = metadata.NewForConfig(cfg)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clients: %v\n", err)
		return 1
	}

	// The custom kinds exist before kgc starts, so its first discovery
	// monitors them.
	for _, k := range []kindInfo{widgetKind, gadgetKind} {
		if err := installCRD(ctx, k); err != nil {
			fmt.Fprintf(os.Stderr, "install CRD for %s: %v\n", k.kind, err)
			return 1
		}
	}
	logf("setup")("control plane and CRDs up after %s", time.Since(start).Round(time.Millisecond))

	collector, err := kgc.New(rest.CopyConfig(cp.Config), kgc.Options{
		Workers:               10,
		DiscoveryResyncPeriod: 5 * time.Second,
		QPS:                   1000,
		Burst:                 2000,
		Logger:                kgcLogger(),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgc.New: %v\n", err)
		return 1
	}
	runCtx, stopCollector := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- collector.Run(runCtx) }()
	defer func() {
		stopCollector()
		select {
		case err := <-runDone:
			if err != nil && !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "kgc Run returned: %v\n", err)
			}
		case <-time.After(30 * time.Second):
			fmt.Fprintln(os.Stderr, "kgc Run did not return within 30s of its context being canceled")
		}
	}()
	syncCtx, cancelSync := context.WithTimeout(ctx, 60*time.Second)
	err = collector.WaitForSync(syncCtx)
	cancelSync()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kgc WaitForSync: %v\n", err)
		return 1
	}

	watchCtx, stopWatcher := context.WithCancel(ctx)
	defer stopWatcher()
	if watcher, err = startSafetyWatcher(watchCtx, metadataClient); err != nil {
		fmt.Fprintf(os.Stderr, "safety watcher: %v\n", err)
		return 1
	}
	logf("setup")("kgc and watcher synced after %s", time.Since(start).Round(time.Millisecond))

	code := m.Run()
	select {
	case err := <-runDone:
		fmt.Fprintf(os.Stderr, "kgc Run returned while the tests were running: %v\n", err)
		code = 1
	default:
	}
	return code
}

// installCRD creates the CustomResourceDefinition serving k and waits until
// it is Established and its resource answers a list.
func installCRD(ctx context.Context, k kindInfo) error {
	scope := "Cluster"
	if k.namespaced {
		scope = "Namespaced"
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": k.gvr.Resource + "." + k.gvr.Group},
		"spec": map[string]any{
			"group": k.gvr.Group,
			"scope": scope,
			"names": map[string]any{
				"plural":   k.gvr.Resource,
				"singular": k.gvr.Resource[:len(k.gvr.Resource)-1],
				"kind":     k.kind,
				"listKind": k.kind + "List",
			},
			"versions": []any{map[string]any{
				"name": k.gvr.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if _, err := dynamicClient.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := dynamicClient.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		established := false
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				established = true
			}
		}
		if !established {
			return false, nil
		}
		_, err = metadataClient.Resource(k.gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
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
