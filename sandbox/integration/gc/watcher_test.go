package gc

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// watchedKinds are the kinds the safety watcher guards.
var watchedKinds = []kindInfo{podKind, configMapKind, rcKind, clusterRoleKind}

// safetyWatcher watches every test object (label labelTest) for the whole
// package run and records each deletion — or start of deletion — of an object
// labelled protected, charged to the test named by its labelTest label. It
// catches what a point-in-time existence check cannot: a protected object
// that kgc deletes after the test looked at it.
type safetyWatcher struct {
	mu         sync.Mutex
	violations map[string][]string      // test → what happened
	closed     map[string]bool          // tests whose check has run
	markers    map[string]chan struct{} // marker token → closed once seen
}

func startSafetyWatcher(ctx context.Context, client metadata.Interface) (*safetyWatcher, error) {
	w := &safetyWatcher{
		violations: map[string][]string{},
		closed:     map[string]bool{},
		markers:    map[string]chan struct{}{},
	}
	factory := metadatainformer.NewFilteredSharedInformerFactory(client, 0, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = labelTest })
	for _, k := range watchedKinds {
		inf := factory.ForResource(k.gvr).Informer()
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) { w.observe(k, o, "") },
			UpdateFunc: func(_, o any) {
				if m, ok := o.(*metav1.PartialObjectMetadata); ok && m.DeletionTimestamp != nil {
					w.observe(k, o, "started deletion (deletionTimestamp set)")
				}
			},
			DeleteFunc: func(o any) { w.observe(k, o, "deleted") },
		})
		if err != nil {
			return nil, err
		}
	}
	factory.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for gvr, ok := range factory.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %s did not sync", gvr)
		}
	}
	return w, nil
}

func (w *safetyWatcher) observe(k kindInfo, o any, what string) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if token := m.Labels[labelMarker]; token != "" {
		if ch, ok := w.markers[token]; ok && what == "" {
			close(ch)
			delete(w.markers, token)
		}
		return
	}
	test := m.Labels[labelTest]
	if what == "" || m.Labels[labelProtected] != "true" || w.closed[test] {
		return
	}
	o2 := obj{kindInfo: k, namespace: m.Namespace, name: m.Name, uid: m.UID}
	w.violations[test] = append(w.violations[test],
		fmt.Sprintf("protected %s %s at %s; metadata: %s", o2, what, time.Now().Format(time.RFC3339Nano), describe(m)))
}

// check waits until the watcher has caught up with the present (one marker
// object per watched kind, created now, must come back through the watch),
// then closes tc's account and returns what went wrong during the test.
func (w *safetyWatcher) check(ctx context.Context, tc *testCase) []string {
	var problems []string
	token := utilrand.String(10)
	var pending []chan struct{}
	for _, k := range watchedKinds {
		tok := k.gvr.Resource + "-" + token
		ch := make(chan struct{})
		w.mu.Lock()
		w.markers[tok] = ch
		w.mu.Unlock()
		if err := createMarker(ctx, tc, k, tok); err != nil {
			problems = append(problems, fmt.Sprintf("barrier: create %s marker: %v", k.kind, err))
			continue
		}
		pending = append(pending, ch)
	}
	timeout := time.After(30 * time.Second)
	for _, ch := range pending {
		select {
		case <-ch:
		case <-timeout:
			problems = append(problems, "barrier: the watcher did not see its markers within 30s; deletions may have been missed")
		case <-ctx.Done():
			problems = append(problems, "barrier: "+ctx.Err().Error())
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed[tc.ns] = true
	return append(problems, w.violations[tc.ns]...)
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
