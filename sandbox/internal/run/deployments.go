package run

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
)

const (
	demoReplicas = 3
	// rolloutTimeout bounds the wait for a demo Deployment's Pods to run:
	// the controllers, the scheduler and the simulated kubelet need a few
	// seconds between them.
	rolloutTimeout = 2 * time.Minute
)

// hasSimulatedNodes reports whether the cluster is a kgc-sandbox with its
// controllers and nodes running, where the Deployment demo works.
func hasSimulatedNodes(ctx context.Context, client kubernetes.Interface) (bool, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: controlplane.NodeLabel, Limit: 1})
	if err != nil {
		return false, fmt.Errorf("listing nodes: %w", err)
	}
	return len(nodes.Items) > 0, nil
}

// deploymentDemo shows the three policies on what a person deletes at
// work: a Deployment, its ReplicaSet and their Pods, created by
// kube-controller-manager's controllers, scheduled by kube-scheduler and
// run (and terminated) by the simulated nodes; kgc collects.
func deploymentDemo(ctx context.Context, client kubernetes.Interface, out io.Writer, httpURL string) error {
	for i, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		fmt.Fprintf(out, "\n== Demo %d: kubectl delete deployment --cascade=%s ==\n", i+1, strings.ToLower(string(policy)))
		if err := deploymentCascade(ctx, client, out, httpURL, policy); err != nil {
			return fmt.Errorf("%s cascade: %w", policy, err)
		}
	}
	return nil
}

// family is a demo Deployment and what it owns, by name.
type family struct {
	deployment *appsv1.Deployment
	replicaSet string
	pods       []string
}

func deploymentCascade(ctx context.Context, client kubernetes.Interface, out io.Writer, httpURL string, policy metav1.DeletionPropagation) error {
	f, err := createDeployment(ctx, client, out)
	if err != nil {
		return err
	}
	d := f.deployment
	if httpURL != "" && policy == metav1.DeletePropagationBackground {
		fmt.Fprintf(out, "graph of this family: %s%s?uid=%s\n", httpURL, graphPath, d.UID)
	}
	fmt.Fprintf(out, "deleting deployment %s with propagationPolicy=%s\n", d.Name, policy)
	began := time.Now()
	err = client.AppsV1().Deployments(demoNamespace).Delete(ctx, d.Name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &d.UID},
	})
	if err != nil {
		return fmt.Errorf("deleting deployment %s: %w", d.Name, err)
	}
	deploymentName := "deployment/" + d.Name
	rsName := "replicaset/" + f.replicaSet
	podNames := make([]string, len(f.pods))
	for i, p := range f.pods {
		podNames[i] = "pod/" + p
	}
	switch policy {
	case metav1.DeletePropagationForeground:
		if got, err := client.AppsV1().Deployments(demoNamespace).Get(ctx, d.Name, metav1.GetOptions{}); err == nil && got.UID == d.UID && got.DeletionTimestamp != nil {
			fmt.Fprintf(out, "  %s is waiting: deletionTimestamp=%s finalizers=%v\n", deploymentName, got.DeletionTimestamp.Format(time.RFC3339), got.Finalizers)
		}
		// The Pods go first (each terminating for about a second), then
		// the ReplicaSet, then the Deployment.
		return awaitGone(ctx, out, began, append(append(podNames, rsName), deploymentName), presence(client, f))
	case metav1.DeletePropagationOrphan:
		if err := awaitGone(ctx, out, began, []string{deploymentName}, presence(client, f)); err != nil {
			return err
		}
		rs, err := client.AppsV1().ReplicaSets(demoNamespace).Get(ctx, f.replicaSet, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the orphaned ReplicaSet %s: %w", f.replicaSet, err)
		}
		if len(rs.OwnerReferences) != 0 {
			return fmt.Errorf("the orphaned ReplicaSet %s still has owners %v", rs.Name, rs.OwnerReferences)
		}
		present, err := presence(client, f)(ctx)
		if err != nil {
			return err
		}
		for _, p := range podNames {
			if !present[p] {
				return fmt.Errorf("%s, orphaned, is gone", p)
			}
		}
		fmt.Fprintf(out, "  %s and its %d Pods stay, with no owner reference to the Deployment\n", rsName, len(podNames))
		fmt.Fprintf(out, "cleaning up: deleting %s (background)\n", rsName)
		if err := client.AppsV1().ReplicaSets(demoNamespace).Delete(ctx, f.replicaSet, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rs.UID}}); err != nil {
			return fmt.Errorf("deleting %s: %w", rsName, err)
		}
		return awaitGone(ctx, out, time.Now(), append([]string{rsName}, podNames...), presence(client, f))
	default:
		// The API server removes the Deployment at once; kgc then deletes
		// the ReplicaSet, and the Pods once it is gone.
		return awaitGone(ctx, out, began, append([]string{deploymentName, rsName}, podNames...), presence(client, f))
	}
}

// createDeployment creates a Deployment (with a generated name, so that
// leftovers of an interrupted run never collide) and waits until its
// ReplicaSet's Pods run.
func createDeployment(ctx context.Context, client kubernetes.Interface, out io.Writer) (*family, error) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-", Namespace: demoNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](demoReplicas),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	// The selector needs the generated name; a label made up here does
	// as well and is as unique.
	app := fmt.Sprintf("web-%d", time.Now().UnixNano())
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	d.Spec.Template.Labels = map[string]string{"app": app}
	d, err := client.AppsV1().Deployments(demoNamespace).Create(ctx, d, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating a deployment: %w", err)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, rolloutTimeout)
	defer cancel()
	for {
		f, err := running(ctx, client, d, app)
		if err != nil {
			return nil, err
		}
		if f != nil {
			fmt.Fprintf(out, "created deployment %s/%s; after %v:\n  deployment/%s → replicaset/%s → pods %s (Running)\n",
				demoNamespace, d.Name, time.Since(began).Round(time.Millisecond), d.Name, f.replicaSet, strings.Join(f.pods, ", "))
			return f, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("deployment %s: %d Pods not Running after %v (are kube-controller-manager and the simulated nodes running?): %w", d.Name, demoReplicas, rolloutTimeout, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// running returns d's family once its one ReplicaSet has demoReplicas
// Running Pods, and nil before.
func running(ctx context.Context, client kubernetes.Interface, d *appsv1.Deployment, app string) (*family, error) {
	sel := metav1.ListOptions{LabelSelector: "app=" + app}
	rss, err := client.AppsV1().ReplicaSets(demoNamespace).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing replicasets: %w", err)
	}
	if len(rss.Items) != 1 || !ownedBy(rss.Items[0].OwnerReferences, d.UID) {
		return nil, nil
	}
	pods, err := client.CoreV1().Pods(demoNamespace).List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	f := &family{deployment: d, replicaSet: rss.Items[0].Name}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && ownedBy(p.OwnerReferences, rss.Items[0].UID) {
			f.pods = append(f.pods, p.Name)
		}
	}
	if len(f.pods) != demoReplicas {
		return nil, nil
	}
	slices.Sort(f.pods)
	return f, nil
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	return slices.ContainsFunc(refs, func(r metav1.OwnerReference) bool { return r.UID == uid })
}

// presence returns a function listing which of f's objects still exist
// (being deleted included), as "kind/name".
func presence(client kubernetes.Interface, f *family) func(context.Context) (map[string]bool, error) {
	return func(ctx context.Context) (map[string]bool, error) {
		present := map[string]bool{}
		d, err := client.AppsV1().Deployments(demoNamespace).Get(ctx, f.deployment.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("getting the deployment: %w", err)
		case d.UID == f.deployment.UID:
			present["deployment/"+d.Name] = true
		}
		if _, err := client.AppsV1().ReplicaSets(demoNamespace).Get(ctx, f.replicaSet, metav1.GetOptions{}); err == nil {
			present["replicaset/"+f.replicaSet] = true
		} else if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("getting the replicaset: %w", err)
		}
		for _, p := range f.pods {
			if _, err := client.CoreV1().Pods(demoNamespace).Get(ctx, p, metav1.GetOptions{}); err == nil {
				present["pod/"+p] = true
			} else if !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("getting pod %s: %w", p, err)
			}
		}
		return present, nil
	}
}
