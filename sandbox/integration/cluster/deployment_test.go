package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// A Deployment of three Running Pods deleted with each propagation policy,
// as `kubectl delete deployment --cascade=…` does.
func TestDeploymentDeletion(t *testing.T) {
	t.Parallel()
	for _, p := range []metav1.DeletionPropagation{
		metav1.DeletePropagationBackground,
		metav1.DeletePropagationForeground,
		metav1.DeletePropagationOrphan,
	} {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			tc := newTestCase(t)
			orphan := p == metav1.DeletePropagationOrphan
			d := tc.deployment("web", 3, orphan)
			r := tc.waitRolledOut("web", 3)
			dependents := append([]obj{r.rs}, r.pods...)

			if p == metav1.DeletePropagationForeground {
				tc.waitObserved(d, r.rs)
				tc.waitObserved(r.rs, r.pods...)
			}
			tc.del(d, p)
			switch p {
			case metav1.DeletePropagationBackground:
				// The Deployment goes at once; kgc collects the rest.
				tc.waitGone(d)
				tc.waitGone(dependents...)
				for _, o := range dependents {
					if !audit.deleted(tc.ns, o.uid) {
						t.Errorf("%s is gone, but kgc did not delete it", o)
					}
				}

			case metav1.DeletePropagationForeground:
				// The Deployment stays, with foregroundDeletion, until its
				// ReplicaSet is gone, which stays until its Pods are.
				m, err := tc.get(tc.ctx, d)
				if err != nil || m == nil || m.DeletionTimestamp == nil || !slices.Contains(m.Finalizers, metav1.FinalizerDeleteDependents) {
					t.Fatalf("right after a foreground DELETE the Deployment is %v (err %v); want it there with %s", m, err, metav1.FinalizerDeleteDependents)
				}
				tc.waitGone(append(dependents, d)...)
				tc.assertDeletedBefore(d, dependents)
				tc.assertDeletedBefore(r.rs, r.pods)
				for _, o := range dependents {
					if !audit.deleted(tc.ns, o.uid) {
						t.Errorf("%s is gone, but kgc did not delete it", o)
					}
				}

			case metav1.DeletePropagationOrphan:
				// The ReplicaSet and its Pods survive; the ReplicaSet loses
				// its reference to the Deployment and keeps its Pods.
				tc.waitGone(d)
				keep := []kept{aliveOwnedBy(r.rs)}
				for _, p := range r.pods {
					keep = append(keep, aliveOwnedBy(p, r.rs.uid))
				}
				tc.assertKeptAfterGC(keep...)
				rs, err := kubeClient.AppsV1().ReplicaSets(tc.ns).Get(tc.ctx, r.rs.name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if rs.Status.ReadyReplicas != 3 {
					t.Errorf("the orphaned ReplicaSet has %d ready replicas, want 3", rs.Status.ReadyReplicas)
				}
			}
		})
	}
}

// A Deployment rolled out, scaled and rolled again while its ReplicaSets
// are deleted under it (in the background mid-rollout, with Orphan after
// one), while it is itself deleted with Orphan and created again, and while
// a Pod is released by relabelling it and another adopted. The
// ReplicaSets come and go (the Deployment controller keeps two old ones),
// Pods are adopted and released; kgc collects what lost its owner and
// nothing else. Finally the Deployment is deleted and everything but the
// released Pod goes.
func TestDeploymentRollout(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	const name = "web"
	d := tc.deployment(name, 3, false)
	rev := func(i int) func(*appsv1.Deployment) {
		return func(d *appsv1.Deployment) {
			if d.Spec.Template.Annotations == nil {
				d.Spec.Template.Annotations = map[string]string{}
			}
			d.Spec.Template.Annotations["rev"] = strconv.Itoa(i)
		}
	}
	began := time.Now()
	step := func(what string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), what) }
	r1 := tc.waitRolledOut(name, 3)
	step("rolled out")

	// 1. A rollout begins; its old ReplicaSet, still with Pods, is deleted
	// in the background: kgc collects its Pods while the new ReplicaSet
	// scales up.
	tc.updateDeployment(name, rev(2))
	tc.del(r1.rs, metav1.DeletePropagationBackground)
	r2 := tc.waitRolledOut(name, 3)
	step("rolled out again, the old ReplicaSet deleted")
	tc.waitGone(append([]obj{r1.rs}, r1.pods...)...)
	if r2.rs.uid == r1.rs.uid {
		t.Fatalf("the rollout did not make a new ReplicaSet")
	}

	// 2. Another rollout, scaled up. Then its ReplicaSet is deleted with
	// Orphan: kgc orphans the Pods and lets the ReplicaSet go; the
	// Deployment controller makes the ReplicaSet again (same name, new
	// UID) and the ReplicaSet controller adopts the orphaned Pods.
	tc.updateDeployment(name, func(d *appsv1.Deployment) { rev(3)(d); d.Spec.Replicas = ptr.To[int32](5) })
	r3 := tc.waitRolledOut(name, 5)
	step("rolled out and scaled to 5")
	tc.del(r3.rs, metav1.DeletePropagationOrphan)
	tc.waitGone(r3.rs)
	r3b := tc.waitRolledOut(name, 5)
	step("the ReplicaSet deleted with Orphan is back")
	if r3b.rs.name != r3.rs.name || r3b.rs.uid == r3.rs.uid {
		t.Fatalf("after an orphaning delete of %s, the Deployment has %s; want the same name, another UID", r3.rs, r3b.rs)
	}
	adopted := 0
	for _, p := range r3.pods {
		if slices.ContainsFunc(r3b.pods, func(o obj) bool { return o.uid == p.uid }) {
			adopted++
		}
		if audit.deleted(tc.ns, p.uid) {
			t.Errorf("kgc deleted %s, orphaned with its ReplicaSet", p)
		}
	}
	if adopted == 0 {
		t.Errorf("none of the Pods orphaned by %s (%s) was adopted by %s (%s)", r3.rs, names(r3.pods), r3b.rs, names(r3b.pods))
	}

	// 3. A Pod relabelled out of the selector: the ReplicaSet controller
	// releases it (removes its ownerReference) and replaces it. The
	// released Pod has no owner; kgc must leave it alone.
	released := r3b.pods[0]
	tc.patchLabels(released, map[string]any{"app": "released", labelProtected: "true"})
	tc.poll("the ReplicaSet to release "+released.name, waitTimeout, func(ctx context.Context) (bool, string, error) {
		m, err := tc.get(ctx, released)
		if err != nil || m == nil {
			return false, fmt.Sprint(m), err
		}
		return len(m.OwnerReferences) == 0, fmt.Sprint(m.OwnerReferences), nil
	})

	step("released a Pod")

	// 4. A bare Pod matching the ReplicaSet's selector is adopted (and the
	// ReplicaSet, then one over, deletes a Pod of its choice).
	hashPod, err := kubeClient.CoreV1().Pods(tc.ns).Get(tc.ctx, r3b.pods[1].name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bareLabels := tc.podLabels(name, false)
	bareLabels[appsv1.DefaultDeploymentUniqueLabelKey] = hashPod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	bare, err := kubeClient.CoreV1().Pods(tc.ns).Create(tc.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare", Labels: bareLabels},
		Spec:       podSpec(),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc.poll("the ReplicaSet to adopt the bare Pod", waitTimeout, func(context.Context) (bool, string, error) {
		for _, e := range rec.in(tc.ns) {
			if e.uid == bare.UID && slices.ContainsFunc(e.owners, func(o metav1.OwnerReference) bool { return o.UID == r3b.rs.uid }) {
				return true, "", nil
			}
		}
		return false, "no event shows the bare Pod owned by " + r3b.rs.String(), nil
	})

	step("adopted a bare Pod")

	// 5. The Deployment deleted with Orphan and created again: the new
	// Deployment adopts the orphaned ReplicaSets, and with them the Pods.
	tc.del(d, metav1.DeletePropagationOrphan)
	tc.waitGone(d)
	keep := []kept{}
	for _, rs := range r3b.all {
		keep = append(keep, aliveOwnedBy(rs))
	}
	tc.assertKeptAfterGC(keep...)
	spec := deploymentSpec(tc, name, 5, false)
	rev(3)(spec) // the template of the orphaned ReplicaSet
	dep, err := kubeClient.AppsV1().Deployments(tc.ns).Create(tc.ctx, spec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d = objOf(deploymentsGVR, dep)
	r5 := tc.waitRolledOut(name, 5)
	step("the Deployment made again adopted its ReplicaSets")
	if r5.rs.uid != r3b.rs.uid {
		t.Errorf("the new Deployment runs %s, want the adopted %s", r5.rs, r3b.rs)
	}

	// 6. One more rollout, scaled down: the old ReplicaSets past the
	// revision history limit (2) go.
	tc.updateDeployment(name, func(d *appsv1.Deployment) { rev(4)(d); d.Spec.Replicas = ptr.To[int32](2) })
	tc.waitRolledOut(name, 2)
	tc.poll("the revision history to be cut to 2 old ReplicaSets", waitTimeout, func(ctx context.Context) (bool, string, error) {
		items, err := tc.list(ctx, replicaSetsGVR, "app="+name)
		if err != nil {
			return false, "", err
		}
		return len(items) <= 3, fmt.Sprintf("%d ReplicaSets", len(items)), nil
	})
	for _, rs := range tc.objs(replicaSetsGVR, "app="+name) {
		m, err := tc.get(tc.ctx, rs)
		if err != nil || m == nil {
			continue
		}
		if c := metav1.GetControllerOfNoCopy(m); c == nil || c.UID != d.uid {
			t.Errorf("%s is not controlled by the Deployment: %v", rs, m.OwnerReferences)
		}
	}

	step("rolled out, scaled to 2, history cut")

	// 7. The Deployment deleted: everything labelled app=web goes; the
	// released Pod stays.
	all := append(tc.objs(replicaSetsGVR, "app="+name), tc.objs(podsGVR, "app="+name)...)
	tc.del(d, metav1.DeletePropagationBackground)
	tc.waitGone(append(all, d)...)
	tc.poll("nothing labelled app=web", waitTimeout, func(ctx context.Context) (bool, string, error) {
		rs, err := tc.list(ctx, replicaSetsGVR, "app="+name)
		if err != nil {
			return false, "", err
		}
		pods, err := tc.list(ctx, podsGVR, "app="+name)
		if err != nil {
			return false, "", err
		}
		return len(rs)+len(pods) == 0, fmt.Sprintf("%d ReplicaSets, %d Pods", len(rs), len(pods)), nil
	})
	step("deleted")
	tc.assertKeptAfterGC(aliveOwnedBy(released))
}

// patchLabels merges labels into o's (a nil value removes a label).
func (tc *testCase) patchLabels(o obj, labels map[string]any) {
	tc.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": o.uid, "labels": labels}})
	if err != nil {
		tc.t.Fatal(err)
	}
	if _, err := o.client().Patch(tc.ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		tc.t.Fatalf("relabel %s: %v", o, err)
	}
}
