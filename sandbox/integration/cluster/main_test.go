package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/safety"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// Shared by every test of the package; set up once by TestMain.
var (
	kubeClient     kubernetes.Interface
	metadataClient metadata.Interface
	restConfig     *rest.Config
	mapper         meta.RESTMapper
	audit          *auditor
	rec            *recorder
	watcher        *safety.Watcher
	collector      *testenv.Collector
	// markerNamespace holds the safety watcher's barrier markers, so that a
	// test can check its account after its own namespace is gone.
	markerNamespace string
)

// recordedResources are the resources the recorder watches (objects
// labelled safety.LabelTest).
var recordedResources = []schema.GroupVersionResource{
	deploymentsGVR, replicaSetsGVR, podsGVR, jobsGVR, cronJobsGVR,
	statefulSetsGVR, daemonSetsGVR, controllerRevisionsGVR, pvcsGVR,
}

// protectedResources are the resources whose protected objects the safety
// watcher guards.
var protectedResources = []schema.GroupVersionResource{podsGVR, replicaSetsGVR, pvcsGVR}

func TestMain(m *testing.M) {
	// The tests mostly wait for the controllers and the simulated
	// kubelet: run more of them at once than GOMAXPROCS (the default),
	// unless -test.parallel says how many.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "6")
	}
	os.Exit(testenv.Main(m, testenv.Options{
		Name:         "cluster",
		ControlPlane: cpproc.Options{Cluster: true, Nodes: 3},
	}, setup))
}

func setup(env *testenv.Env) error {
	kubeClient, metadataClient, restConfig = env.Kube, env.Metadata, env.Config

	disc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		return err
	}
	mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	audit = newAuditor(metadataClient, mapper)

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testenv.NamespaceName("markers")}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(env.Ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("marker namespace: %w", err)
	}
	markerNamespace = ns.Name

	// The recorder and the watcher start before kgc, so that they see
	// everything kgc does.
	if rec, err = startRecorder(env.Ctx, metadataClient); err != nil {
		return fmt.Errorf("recorder: %w", err)
	}
	if watcher, err = safety.Start(env.Ctx, metadataClient, protectedResources); err != nil {
		return fmt.Errorf("safety watcher: %w", err)
	}

	// kgc's requests go through the auditor.
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(audit.wrap)
	collector, err = env.StartCollector(cfg, kgc.Options{
		Workers: 10,
		QPS:     -1, // unthrottled: the controllers are not throttled either
		Logger:  testenv.Logger("kgc"),
	}, time.Minute)
	return err
}

// markerFunc creates the safety watcher's barrier markers in
// markerNamespace, charged to test.
func markerFunc(test string) safety.MarkerFunc {
	return func(ctx context.Context, gvr schema.GroupVersionResource, token string) error {
		m := metav1.ObjectMeta{
			Name:   "marker-" + token,
			Labels: map[string]string{safety.LabelTest: test, safety.LabelMarker: token},
		}
		ns := markerNamespace
		var err error
		switch gvr {
		case podsGVR:
			_, err = kubeClient.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: m, Spec: podSpec()}, metav1.CreateOptions{})
		case replicaSetsGVR:
			rs := replicaSet(m, 0)
			_, err = kubeClient.AppsV1().ReplicaSets(ns).Create(ctx, rs, metav1.CreateOptions{})
		case pvcsGVR:
			_, err = kubeClient.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
				ObjectMeta: m, Spec: claimSpec(""),
			}, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("no marker for %s", gvr)
		}
		return err
	}
}
