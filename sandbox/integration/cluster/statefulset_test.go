package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A StatefulSet's PersistentVolumeClaims under its retention policy: with
// whenDeleted: Delete the StatefulSet controller makes the StatefulSet an
// owner of each claim, and kgc collects the claims with the StatefulSet
// (kube-controller-manager's pvc-protection controller lets each go once
// no Pod uses it); with Retain the claims survive, unowned.
//
// Each claim is bound to a PersistentVolume made for it, so that the Pods
// are scheduled and run on the simulated nodes, as they would on a real
// cluster.
func TestStatefulSetPVCRetention(t *testing.T) {
	t.Parallel()
	for _, policy := range []appsv1.PersistentVolumeClaimRetentionPolicyType{appsv1.DeletePersistentVolumeClaimRetentionPolicyType, appsv1.RetainPersistentVolumeClaimRetentionPolicyType} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			tc := newTestCase(t)
			const name, replicas = "db", 2
			retain := policy == appsv1.RetainPersistentVolumeClaimRetentionPolicyType
			for i := range replicas {
				tc.persistentVolume(fmt.Sprintf("data-%s-%d", name, i))
			}
			labels := tc.podLabels(name, false)
			sts, err := kubeClient.AppsV1().StatefulSets(tc.ns).Create(tc.ctx, &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Spec: appsv1.StatefulSetSpec{
					Replicas:            ptr.To[int32](replicas),
					ServiceName:         name,
					PodManagementPolicy: appsv1.ParallelPodManagement,
					Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
					Template:            podTemplate(labels),
					VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
						ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: tc.podLabels(name, retain)},
						Spec:       claimSpec(""),
					}},
					PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
						WhenDeleted: policy,
						WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := objOf(statefulSetsGVR, sts)
			pods := podObjs(tc.waitPods("app="+name, replicas))

			// The controller created the claims (and, with Delete, made
			// the StatefulSet their owner); they are bound and in use.
			var claims []obj
			tc.poll("the StatefulSet's claims", waitTimeout, func(ctx context.Context) (bool, string, error) {
				l, err := kubeClient.CoreV1().PersistentVolumeClaims(tc.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
				if err != nil {
					return false, "", err
				}
				claims = nil
				desc := ""
				for _, c := range l.Items {
					owned := slices.ContainsFunc(c.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == s.uid })
					desc += fmt.Sprintf("%s (%s, owned by the StatefulSet %v, finalizers %v) ", c.Name, c.Status.Phase, owned, c.Finalizers)
					if c.Status.Phase != corev1.ClaimBound || owned == retain {
						return false, desc, nil
					}
					claims = append(claims, objOf(pvcsGVR, &c))
				}
				return len(claims) == replicas, desc, nil
			})

			tc.del(s, metav1.DeletePropagationBackground)
			tc.waitGone(append([]obj{s}, pods...)...)
			if retain {
				keep := []kept{}
				for _, c := range claims {
					keep = append(keep, aliveOwnedBy(c))
				}
				tc.assertKeptAfterGC(keep...)
				return
			}
			tc.waitGone(claims...)
			for _, o := range append(claims, pods...) {
				if !audit.deleted(tc.ns, o.uid) {
					t.Errorf("%s is gone, but kgc did not delete it", o)
				}
			}
		})
	}
}

// persistentVolume creates a 1Gi PersistentVolume bound in advance to the
// claim named claim in the test's namespace; it is deleted when the test
// ends.
func (tc *testCase) persistentVolume(claim string) {
	tc.t.Helper()
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: tc.ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + tc.ns + "/" + claim},
			},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: tc.ns, Name: claim},
		},
	}
	if _, err := kubeClient.CoreV1().PersistentVolumes().Create(tc.ctx, pv, metav1.CreateOptions{}); err != nil {
		tc.t.Fatalf("create persistent volume %s: %v", pv.Name, err)
	}
	tc.t.Cleanup(func() {
		err := kubeClient.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			tc.t.Logf("cleanup: delete persistent volume %s: %v", pv.Name, err)
		}
	})
}
