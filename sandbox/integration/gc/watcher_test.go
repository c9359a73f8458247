package gc

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// watchedKinds are the kinds the safety watcher guards.
var watchedKinds = []kindInfo{podKind, configMapKind, rcKind, clusterRoleKind}

func startSafetyWatcher(ctx context.Context, client metadata.Interface) (*safety.Watcher, error) {
	var resources []schema.GroupVersionResource
	for _, k := range watchedKinds {
		resources = append(resources, k.gvr)
	}
	return safety.Start(ctx, client, resources)
}

// checkSafety waits until the watcher has caught up with the present (one
// marker object per watched kind, created now, must come back through the
// watch), then closes tc's account and returns what went wrong during the
// test.
func checkSafety(ctx context.Context, tc *testCase) []string {
	return watcher.Check(ctx, tc.ns, 30*time.Second, func(ctx context.Context, gvr schema.GroupVersionResource, token string) error {
		for _, k := range watchedKinds {
			if k.gvr == gvr {
				return createMarker(ctx, tc, k, token)
			}
		}
		return fmt.Errorf("no marker for %s", gvr)
	})
}

// createMarker creates an unowned object of kind k, labelled with token; it is
// removed at the latest with its namespace, or right away when cluster-scoped.
func createMarker(ctx context.Context, tc *testCase, k kindInfo, token string) error {
	m := metav1.ObjectMeta{
		Name:   "marker-" + token,
		Labels: map[string]string{labelTest: tc.ns, labelMarker: token},
	}
	var err error
	switch k {
	case podKind:
		_, err = kubeClient.CoreV1().Pods(tc.ns).Create(ctx, &corev1.Pod{ObjectMeta: m, Spec: podSpec()}, metav1.CreateOptions{})
	case configMapKind:
		_, err = kubeClient.CoreV1().ConfigMaps(tc.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: m}, metav1.CreateOptions{})
	case rcKind:
		one := int32(1)
		_, err = kubeClient.CoreV1().ReplicationControllers(tc.ns).Create(ctx, &corev1.ReplicationController{
			ObjectMeta: m,
			Spec: corev1.ReplicationControllerSpec{
				Replicas: &one,
				Selector: map[string]string{"marker": token},
				Template: &corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"marker": token}},
					Spec:       podSpec(),
				},
			},
		}, metav1.CreateOptions{})
	case clusterRoleKind:
		m.Name = tc.ns + "-" + m.Name
		_, err = kubeClient.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: m}, metav1.CreateOptions{})
		if err == nil {
			tc.cleanup(func(ctx context.Context) {
				_ = kubeClient.RbacV1().ClusterRoles().Delete(ctx, m.Name, metav1.DeleteOptions{})
			})
		}
	default:
		err = fmt.Errorf("no marker for kind %s", k.kind)
	}
	return err
}
