package model

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	dynamicClient  dynamic.Interface
	metadataClient metadata.Interface
	watcher        *safetyWatcher
	envConfig      *rest.Config
)

var crdGVR = testenv.CRDGVR

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "model"}, setup))
}

func setup(env *testenv.Env) error {
	kubeClient, dynamicClient, metadataClient = env.Kube, env.Dynamic, env.Metadata

	// The custom kinds exist before kgc starts, so its first discovery
	// monitors them.
	for _, k := range []kindInfo{widgetKind, gadgetKind} {
		if err := installCRD(env.Ctx, k); err != nil {
			return fmt.Errorf("install CRD for %s: %w", k.kind, err)
		}
	}
	testenv.Logf("setup")("CRDs up")

	// Each seed runs its own collectors (see chaos_test.go), through a
	// fault proxy, on a copy of this config.
	envConfig = rest.CopyConfig(env.Config)

	var err error
	// Stopped (env.Ctx) before the control plane.
	if watcher, err = startSafetyWatcher(env.Ctx, metadataClient); err != nil {
		return fmt.Errorf("safety watcher: %w", err)
	}
	return nil
}

// installCRD creates the CustomResourceDefinition serving k and waits until
// it is Established and its resource answers a list.
func installCRD(ctx context.Context, k kindInfo) error {
	crd := testenv.CRD(k.gvr.Group, k.gvr.Resource, k.kind, k.namespaced, k.gvr.Version)
	if _, err := dynamicClient.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := dynamicClient.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if !testenv.HasCondition(u, "Established", "True") {
			return false, nil
		}
		_, err = metadataClient.Resource(k.gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
}
