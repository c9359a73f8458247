package controlplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

	// Graceful termination: the Pod is marked, then removed by the
	// simulated kubelet; the ReplicaSet replaces it meanwhile.
	victim := pods[0]
	if err := client.CoreV1().Pods("default").Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil {
		t.Fatalf("right after DELETE, Pod %s: %v (err %v); want it terminating", victim.Name, got.DeletionTimestamp, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, victim.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Fatalf("Pod %s was not removed after its termination: %v", victim.Name, err)
	}
}

func describePods(pods []corev1.Pod) string {
	s := ""
	for _, p := range pods {
		s += fmt.Sprintf("%s(node=%q phase=%s) ", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
	return s
}
