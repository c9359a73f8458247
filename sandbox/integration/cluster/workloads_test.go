package cluster

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// deployment creates a Deployment of replicas Pods labelled app=name (and
// protected, when protect).
func (tc *testCase) deployment(name string, replicas int32, protect bool) obj {
	tc.t.Helper()
	d, err := kubeClient.AppsV1().Deployments(tc.ns).Create(tc.ctx, deploymentSpec(tc, name, replicas, protect), metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("create deployment %s: %v", name, err)
	}
	return objOf(deploymentsGVR, d)
}

func deploymentSpec(tc *testCase, name string, replicas int32, protect bool) *appsv1.Deployment {
	labels := tc.podLabels(name, protect)
	one := intstr.FromInt32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tc.ns, Labels: tc.podLabels(name, false)},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(labels),
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &one},
			},
			RevisionHistoryLimit: ptr.To[int32](2),
		},
	}
}

// updateDeployment applies mutate to the Deployment named name.
func (tc *testCase) updateDeployment(name string, mutate func(*appsv1.Deployment)) {
	tc.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := kubeClient.AppsV1().Deployments(tc.ns).Get(tc.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(d)
		_, err = kubeClient.AppsV1().Deployments(tc.ns).Update(tc.ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		tc.t.Fatalf("update deployment %s: %v", name, err)
	}
}

// rollout is a Deployment's settled state.
type rollout struct {
	deployment *appsv1.Deployment
	// rs is the one ReplicaSet with replicas; all is every ReplicaSet of
	// the Deployment.
	rs   obj
	all  []obj
	pods []obj
}

// waitRolledOut waits until the Deployment named name has rolled out
// completely: its status is current and shows replicas updated and
// available Pods; exactly one of its ReplicaSets has replicas; and the
// Pods labelled app=name are exactly that ReplicaSet's replicas, Running
// and not terminating (the old ones are gone). Every ReplicaSet labelled
// app=name must be the Deployment's.
func (tc *testCase) waitRolledOut(name string, replicas int32) rollout {
	tc.t.Helper()
	var r rollout
	tc.poll(fmt.Sprintf("deployment %s to roll out %d replicas", name, replicas), waitTimeout, func(ctx context.Context) (bool, string, error) {
		r = rollout{}
		d, err := kubeClient.AppsV1().Deployments(tc.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r.deployment = d
		s := d.Status
		desc := fmt.Sprintf("deployment generation %d observed %d replicas %d updated %d available %d; ",
			d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas)
		if s.ObservedGeneration < d.Generation || s.Replicas != replicas || s.UpdatedReplicas != replicas || s.AvailableReplicas != replicas {
			return false, desc, nil
		}
		rsList, err := kubeClient.AppsV1().ReplicaSets(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		var active []appsv1.ReplicaSet
		for _, rs := range rsList.Items {
			c := metav1.GetControllerOf(&rs)
			desc += fmt.Sprintf("rs %s (replicas %d ready %d controller %v deleting %v); ",
				rs.Name, ptr.Deref(rs.Spec.Replicas, 1), rs.Status.ReadyReplicas, c != nil && c.UID == d.UID, rs.DeletionTimestamp != nil)
			if c == nil || c.UID != d.UID || rs.DeletionTimestamp != nil {
				return false, desc, nil
			}
			r.all = append(r.all, objOf(replicaSetsGVR, &rs))
			if ptr.Deref(rs.Spec.Replicas, 1) > 0 {
				active = append(active, rs)
			}
		}
		if len(active) != 1 || active[0].Status.ReadyReplicas != replicas {
			return false, desc, nil
		}
		r.rs = objOf(replicaSetsGVR, &active[0])
		pods, err := kubeClient.CoreV1().Pods(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		desc += "pods " + describePods(pods.Items)
		if len(pods.Items) != int(replicas) {
			return false, desc, nil
		}
		for _, p := range pods.Items {
			c := metav1.GetControllerOf(&p)
			if !podRunning(&p) || c == nil || c.UID != r.rs.uid {
				return false, desc, nil
			}
			r.pods = append(r.pods, objOf(podsGVR, &p))
		}
		return true, desc, nil
	})
	return r
}

// waitPods waits until count Pods labelled selector are Running and
// returns them.
func (tc *testCase) waitPods(selector string, count int) []corev1.Pod {
	tc.t.Helper()
	var pods []corev1.Pod
	tc.poll(fmt.Sprintf("%d running pods %s", count, selector), waitTimeout, func(ctx context.Context) (bool, string, error) {
		l, err := kubeClient.CoreV1().Pods(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, "", err
		}
		pods = l.Items
		running := 0
		for _, p := range pods {
			if podRunning(&p) {
				running++
			}
		}
		return running == count && len(pods) == count, describePods(pods), nil
	})
	return pods
}

func podObjs(pods []corev1.Pod) []obj {
	var out []obj
	for i := range pods {
		out = append(out, objOf(podsGVR, &pods[i]))
	}
	return out
}

func names(objs []obj) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.name)
	}
	return strings.Join(s, ",")
}
