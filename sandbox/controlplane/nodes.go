package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/clock"
	"sigs.k8s.io/kwok/kustomize/stage/node/fast"
	heartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/apis/internalversion"
	kwokclient "sigs.k8s.io/kwok/pkg/client/clientset/versioned"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/controllers"
	kwoklog "sigs.k8s.io/kwok/pkg/log"
)

const (
	// nodeLabel marks the sandbox's simulated nodes; kwok manages the nodes
	// that carry it and the Pods bound to them.
	nodeLabel = "kgc.dev/simulated-node"
	// nodeLeaseSeconds is the simulated kubelet's node lease duration, as a
	// kubelet's default (40 s): the node lifecycle controller sees the
	// nodes alive as long as kwok renews their leases.
	nodeLeaseSeconds = 40
	// podCIDR is where the simulated nodes take Pod IPs from. Nothing routes
	// to them.
	podCIDR = "10.244.0.0/16"
	// nodesReadyTimeout bounds the wait for the simulated nodes to become
	// Ready.
	nodesReadyTimeout = time.Minute
)

// podTerminate is the simulated kubelet's answer to a Pod deletion: the
// containers stop (SIGTERM, and a well-behaved process exits within a
// second or so), and then the kubelet deletes the Pod with a grace period
// of zero. Like a kubelet it ignores the Pod's finalizers: they keep the
// object, not the containers, and the apiserver removes the Pod once the
// last finalizer is gone. The annotation kgc.dev/termination-delay (in
// milliseconds) lets a test make a Pod slow to terminate; unlike a
// kubelet's, the delay is not cut short at the end of the grace period.
//
// The delay is exactly that: kwok's jitter (jitterDurationFrom) would add
// a random time up to its bound — bound by the deletionTimestamp, Pods
// took anything up to the grace period (30 s) to go. kwok parses a
// duration from a string with a unit, hence the "ms" appended to the
// annotation; a Pod without it gets the default second.
//
// kwok's own default ("fast") removes a Pod at once, which is not what a
// cluster does; its "general" stage waits a random time up to the grace
// period, which is slow (30 s for most Pods) for no gain in a sandbox.
const podTerminate = `
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-terminate
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
    - key: '.metadata.deletionGracePeriodSeconds'
      operator: 'NotIn'
      values:
      - '0'
  delay:
    durationMilliseconds: 1000
    durationFrom:
      expressionFrom: '(.metadata.annotations["kgc.dev/termination-delay"] // empty) + "ms"'
  next:
    delete: true
`

// simulatedNodes is kwok running as a library: it plays the kubelet of
// every node labelled nodeLabel (status, lease heartbeats, Pods becoming
// Running, Job Pods completing, Pods terminating).
type simulatedNodes struct {
	cancel context.CancelFunc
}

// startNodes registers count simulated nodes and starts kwok for them. It
// returns once every node is Ready.
func startNodes(ctx context.Context, cfg *rest.Config, count int, verbose bool) (*simulatedNodes, error) {
	stages, err := nodeStages()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	typed, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kwokTyped, err := kwokclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	ctrl, err := controllers.NewController(controllers.Config{
		Clock:                        clock.RealClock{},
		DynamicClient:                dyn,
		RESTClient:                   typed.CoreV1().RESTClient(),
		RESTMapper:                   mapper,
		TypedClient:                  typed,
		TypedKwokClient:              kwokTyped,
		ManageNodesWithLabelSelector: nodeLabel,
		CIDR:                         podCIDR,
		NodeIP:                       "10.0.0.1",
		LocalStages:                  stages,
		NodeLeaseDurationSeconds:     nodeLeaseSeconds,
		NodeLeaseParallelism:         4,
		NodePlayStageParallelism:     4,
		PodPlayStageParallelism:      16,
		PodsOnNodeSyncParallelism:    4,
		ID:                           "kgc-sandbox",
	})
	if err != nil {
		return nil, fmt.Errorf("creating kwok: %w", err)
	}

	logger := kwoklog.NewLogger(nil, kwoklog.LevelInfo)
	if verbose {
		logger = kwoklog.NewLogger(os.Stderr, kwoklog.LevelInfo)
	}
	// kwok runs until Stop, not until the start-up context ends.
	runCtx, cancel := context.WithCancel(kwoklog.NewContext(context.Background(), logger))
	n := &simulatedNodes{cancel: cancel}
	if err := ctrl.Start(runCtx); err != nil {
		cancel()
		return nil, fmt.Errorf("starting kwok: %w", err)
	}
	if err := registerNodes(ctx, typed, count); err != nil {
		cancel()
		return nil, err
	}
	if err := waitNodesReady(ctx, typed, count); err != nil {
		cancel()
		return nil, err
	}
	return n, nil
}

// stop ends kwok's goroutines. Its informers and workers all run under the
// one context; the nodes themselves stay registered (etcd keeps them).
func (n *simulatedNodes) stop() {
	n.cancel()
}

// nodeStages is the simulated kubelet's behaviour: nodes become Ready and
// heartbeat through their leases; Pods become Running, Job Pods complete,
// and deleted Pods terminate (podTerminate).
func nodeStages() (map[internalversion.StageResourceRef][]*internalversion.Stage, error) {
	parse := func(docs ...string) ([]*internalversion.Stage, error) {
		var out []*internalversion.Stage
		for _, doc := range docs {
			s, err := config.UnmarshalWithType[*internalversion.Stage](doc)
			if err != nil {
				return nil, fmt.Errorf("parsing a kwok stage: %w", err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	nodes, err := parse(fast.DefaultNodeInit, heartbeat.DefaultNodeHeartbeatWithLease)
	if err != nil {
		return nil, err
	}
	pods, err := parse(podfast.DefaultPodReady, podfast.DefaultPodComplete, podTerminate)
	if err != nil {
		return nil, err
	}
	return map[internalversion.StageResourceRef][]*internalversion.Stage{
		{APIGroup: "v1", Kind: "Node"}: nodes,
		{APIGroup: "v1", Kind: "Pod"}:  pods,
	}, nil
}

// registerNodes creates the nodes kgc-sandbox-node-0 … -(count-1), as a
// kubelet registers itself; nodes left from a previous run are kept.
func registerNodes(ctx context.Context, client kubernetes.Interface, count int) error {
	for i := range count {
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("kgc-sandbox-node-%d", i),
				Labels: map[string]string{
					nodeLabel:                "true",
					"kubernetes.io/os":       "linux",
					"kubernetes.io/arch":     "amd64",
					"kubernetes.io/hostname": fmt.Sprintf("kgc-sandbox-node-%d", i),
					"type":                   "kwok",
				},
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			},
			Status: corev1.NodeStatus{
				Allocatable: nodeCapacity(),
				Capacity:    nodeCapacity(),
			},
		}
		_, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("registering node %s: %w", node.Name, err)
		}
	}
	return nil
}

// nodeCapacity is generous: the sandbox's nodes should never be why a Pod
// is not scheduled.
func nodeCapacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("1000"),
	}
}

// waitNodesReady polls until count simulated nodes report Ready.
func waitNodesReady(ctx context.Context, client kubernetes.Interface, count int) error {
	ctx, cancel := context.WithTimeout(ctx, nodesReadyTimeout)
	defer cancel()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	ready := 0
	for {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeLabel})
		if err == nil {
			ready = 0
			for _, n := range list.Items {
				if nodeReady(&n) {
					ready++
				}
			}
			if ready >= count {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("waiting for %d simulated nodes to be Ready (%d are): %w", count, ready, ctx.Err()), err)
		case <-ticker.C:
		}
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
