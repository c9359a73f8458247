package controlplane

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestCluster starts the whole cluster (Options.Cluster) and checks what
// makes it one: a Deployment gets a ReplicaSet (kube-controller-manager),
// its Pods are bound to simulated nodes (kube-scheduler) and Running
// (kwok), and a deleted Pod terminates gracefully: first a
// deletionTimestamp, then gone. No garbage collector runs here.
func TestCluster(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	cp, err := Start(ctx, Options{Logf: t.Logf, Cluster: true, Nodes: 2})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	t.Logf("cluster started in %v", time.Since(began))

	client := kubernetes.NewForConfigOrDie(cp.Config)
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: NodeLabel})
	if err != nil || len(nodes.Items) != 2 {
		t.Fatalf("simulated nodes: %d, %v; want 2", len(nodes.Items), err)
	}

	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		running := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		t.Fatalf("waiting for 3 running Pods: %v (have %s)", err, describePods(pods))
	}
	for _, p := range pods {
		owner := metav1.GetControllerOf(&p)
		if owner == nil || owner.Kind != "ReplicaSet" {
			t.Errorf("Pod %s: controller %v, want a ReplicaSet", p.Name, owner)
		}
	}

	// Graceful termination: a deleted Pod is marked, then removed by the
	// simulated kubelet about a second later, or after its
	// kgc.dev/termination-delay (ms); the ReplicaSet replaces them
	// meanwhile.
	slow := pods[0]
	patch := []byte(`{"metadata":{"annotations":{"kgc.dev/termination-delay":"8000"}}}`)
	if _, err := client.CoreV1().Pods("default").Patch(ctx, slow.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	for _, p := range pods {
		if err := client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := client.CoreV1().Pods("default").Get(ctx, slow.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("right after DELETE, Pod %s: %v (err %v); want it terminating", slow.Name, got.DeletionTimestamp, err)
	}
	gone := func(name string) wait.ConditionWithContextFunc {
		return func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}
	}
	// About a second, not a random time up to the grace period (30 s).
	for _, p := range pods[1:] {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, gone(p.Name)); err != nil {
			t.Fatalf("Pod %s was not removed within 10 s of its deletion: %v", p.Name, err)
		}
	}
	t.Logf("Pods without a termination delay removed %v after their deletion", time.Since(deleted).Round(time.Millisecond))
	if ok, _ := gone(slow.Name)(ctx); ok {
		t.Fatalf("Pod %s, with a termination delay of 8 s, was removed within %v", slow.Name, time.Since(deleted))
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, gone(slow.Name)); err != nil {
		t.Fatalf("Pod %s was not removed after its termination delay: %v", slow.Name, err)
	}
	if d := time.Since(deleted); d < 8*time.Second {
		t.Errorf("Pod %s, with a termination delay of 8 s, was removed after %v", slow.Name, d)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// TestClusterNoGoroutineLeak requires that starting and stopping the
// whole cluster leaves no goroutine behind. kube-controller-manager,
// kube-scheduler and kwok start a few process-wide singletons on first
// use (metrics and logging helpers, caches), which a second cycle reuses:
// the first cycle warms them up, the second must leak nothing — but for
// what kwok v0.8.0 never stops: its delaying queues' workers (three per
// start, idle, waking every 10 s) and its event broadcaster (two
// goroutines per start, blocked on channels). Those are allowed exactly
// that many times, so that a broadcaster leaked by anything else still
// fails the test.
func TestClusterNoGoroutineLeak(t *testing.T) {
	ctx := t.Context()
	_ = healthz.LogHealthz.Check(nil)
	cycle := func() {
		cp, err := Start(ctx, Options{Cluster: true, Nodes: 1})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if _, err := kubernetes.NewForConfigOrDie(cp.Config).CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing nodes: %v", err)
		}
		if err := cp.Stop(); err != nil {
			t.Fatalf("Stop: %v", err)
		}
	}
	cycle()
	if err := findRetry(30*time.Second, goleak.IgnoreCurrent()); err != nil {
		t.Logf("goroutines the first cycle left (process-wide singletons): %v", err)
	}
	kwokLeaks := map[string]int{
		"sigs.k8s.io/kwok/pkg/utils/queue.(*weightDelayingQueue[...]).loopWorker":       3,
		"k8s.io/apimachinery/pkg/watch.(*Broadcaster).loop":                             1,
		"k8s.io/client-go/tools/record.(*eventBroadcasterImpl).StartEventWatcher.func1": 1,
	}
	countBefore := topFunctions(kwokLeaks)
	before := runtime.NumGoroutine()
	ignore := []goleak.Option{goleak.IgnoreCurrent()}
	for f := range kwokLeaks {
		ignore = append(ignore, goleak.IgnoreTopFunction(f))
	}
	cycle()
	if err := findRetry(30*time.Second, ignore...); err != nil {
		t.Errorf("goroutines leaked by a second start/stop cycle of the cluster: %v", err)
	}
	countAfter := topFunctions(kwokLeaks)
	for f, allowed := range kwokLeaks {
		if n := countAfter[f] - countBefore[f]; n > allowed {
			t.Errorf("%d more goroutines running %s after a cycle; kwok accounts for %d", n, f, allowed)
		}
	}
	t.Logf("goroutines: %d before the second cycle, %d after", before, runtime.NumGoroutine())
}

func describePods(pods []corev1.Pod) string {
	s := ""
	for _, p := range pods {
		s += fmt.Sprintf("%s(node=%q phase=%s) ", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
	return s
}

// topFunctions counts the running goroutines whose innermost frame is
// one of fns.
func topFunctions(fns map[string]int) map[string]int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	counts := map[string]int{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.SplitN(g, "\n", 3)
		if len(lines) < 2 {
			continue
		}
		top := lines[1]
		if i := strings.LastIndex(top, "("); i > 0 {
			top = top[:i]
		}
		if _, ok := fns[top]; ok {
			counts[top]++
		}
	}
	return counts
}
