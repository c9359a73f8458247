package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// A DaemonSet runs a Pod on each simulated node and records its templates
// in ControllerRevisions; after an update it has two. Deleted in the
// foreground, it stays until kgc has collected its Pods and its
// ControllerRevisions.
func TestDaemonSet(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	const name = "agent"
	labels := tc.podLabels(name, false)
	all := intstr.FromInt32(3)
	ds, err := kubeClient.AppsV1().DaemonSets(tc.ns).Create(tc.ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(labels),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &all},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := objOf(daemonSetsGVR, ds)
	tc.waitDaemonSet(name, 1)

	ds, err = kubeClient.AppsV1().DaemonSets(tc.ns).Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Spec.Template.Annotations = map[string]string{"rev": "2"}
	if _, err := kubeClient.AppsV1().DaemonSets(tc.ns).Update(tc.ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, revisions := tc.waitDaemonSet(name, 2)
	dependents := append(pods, revisions...)

	tc.waitObserved(d, dependents...)
	tc.del(d, metav1.DeletePropagationForeground)
	if !rec.sawDeletingWith(tc.ns, d.uid, metav1.FinalizerDeleteDependents) {
		tc.poll("the DaemonSet seen deleting in the foreground", waitTimeout, func(context.Context) (bool, string, error) {
			return rec.sawDeletingWith(tc.ns, d.uid, metav1.FinalizerDeleteDependents), "", nil
		})
	}
	tc.waitGone(append(dependents, d)...)
	tc.assertDeletedBefore(d, dependents)
	for _, o := range dependents {
		if !audit.deleted(tc.ns, o.uid) {
			t.Errorf("%s is gone, but kgc did not delete it", o)
		}
	}
}

// waitDaemonSet waits until the DaemonSet named name runs an updated,
// available Pod on each of the 3 nodes, and nothing else, and has
// revisions ControllerRevisions; it returns the Pods and the revisions.
func (tc *testCase) waitDaemonSet(name string, revisions int) (pods, crs []obj) {
	tc.t.Helper()
	tc.poll(fmt.Sprintf("daemonset %s to run on every node with %d revisions", name, revisions), waitTimeout, func(ctx context.Context) (bool, string, error) {
		ds, err := kubeClient.AppsV1().DaemonSets(tc.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		s := ds.Status
		desc := fmt.Sprintf("generation %d observed %d desired %d updated %d available %d; ",
			ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable)
		if s.ObservedGeneration < ds.Generation || s.DesiredNumberScheduled != 3 || s.UpdatedNumberScheduled != 3 || s.NumberAvailable != 3 {
			return false, desc, nil
		}
		l, err := kubeClient.CoreV1().Pods(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		desc += "pods " + describePods(l.Items)
		var nodes []string
		for _, p := range l.Items {
			c := metav1.GetControllerOf(&p)
			if !podRunning(&p) || c == nil || c.UID != ds.UID || slices.Contains(nodes, p.Spec.NodeName) {
				return false, desc, nil
			}
			nodes = append(nodes, p.Spec.NodeName)
		}
		if len(nodes) != 3 {
			return false, desc, nil
		}
		revs, err := kubeClient.AppsV1().ControllerRevisions(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		desc += fmt.Sprintf("; %d revisions", len(revs.Items))
		crs = nil
		for _, r := range revs.Items {
			if c := metav1.GetControllerOf(&r); c == nil || c.UID != ds.UID {
				return false, desc + " (one not controlled by the DaemonSet)", nil
			}
			crs = append(crs, objOf(controllerRevisionsGVR, &r))
		}
		pods = podObjs(l.Items)
		return len(crs) == revisions, desc, nil
	})
	return pods, crs
}
