package controlplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodeLabel})
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
}

func describePods(pods []corev1.Pod) string {
	s := ""
	for _, p := range pods {
		s += fmt.Sprintf("%s(node=%q phase=%s) ", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
	return s
}
