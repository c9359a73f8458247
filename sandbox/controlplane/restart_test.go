package controlplane

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRestartAPIServer stops and restarts kube-apiserver alone: the data in
// etcd survives, the address stays, and clients built before the restart
// (from Config and from the kubeconfig file) keep working without being
// rebuilt, an informer included; RestartAPIServer does both steps at once.
// The whole control plane then stops as usual and leaks nothing.
func TestRestartAPIServer(t *testing.T) {
	ctx := t.Context()
	_ = healthz.LogHealthz.Check(nil)
	ignore := goleak.IgnoreCurrent()

	cp, err := Start(ctx, Options{Logf: t.Logf, WatchCacheSizes: []string{"secrets#0"}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	client := kubernetes.NewForConfigOrDie(cp.Config)
	fileCfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	fileClient := kubernetes.NewForConfigOrDie(fileCfg)
	host := cp.Config.Host

	informerCtx, stopInformer := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	defer func() {
		stopInformer()
		factory.Shutdown()
	}()
	lister := factory.Core().V1().ConfigMaps().Lister()
	factory.Start(informerCtx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}

	before := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: metav1.NamespaceDefault}}
	if _, err := client.CoreV1().ConfigMaps(before.Namespace).Create(ctx, before, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap: %v", err)
	}

	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("StopAPIServer: %v", err)
	}
	if err := cp.StopAPIServer(); err != nil {
		t.Errorf("second StopAPIServer: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = client.CoreV1().ConfigMaps(before.Namespace).Get(short, before.Name, metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("a request succeeded while the apiserver was stopped")
	}
	t.Logf("request while stopped: %v", err)

	began := time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	t.Logf("restarted in %v", time.Since(began).Round(time.Millisecond))
	if cp.Config.Host != host {
		t.Errorf("Host changed from %s to %s", host, cp.Config.Host)
	}

	// The old clients, unchanged, see the old data and write new data.
	for name, c := range map[string]kubernetes.Interface{"Config": client, "kubeconfig": fileClient} {
		if _, err := c.CoreV1().ConfigMaps(before.Namespace).Get(ctx, before.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("client from %s after the restart: %v", name, err)
		}
	}
	after := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: metav1.NamespaceDefault}}
	if _, err := fileClient.CoreV1().ConfigMaps(after.Namespace).Create(ctx, after, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap after the restart: %v", err)
	}
	// The informer's watch broke with the apiserver; it must resume.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, err := lister.ConfigMaps(after.Namespace).Get(after.Name)
		return err == nil, nil
	})
	if err != nil {
		t.Errorf("the informer did not see a configmap created after the restart: %v", err)
	}

	// Compaction: a revision is returned and etcd is still usable.
	rev, err := cp.CompactEtcd(ctx)
	if err != nil {
		t.Fatalf("CompactEtcd: %v", err)
	}
	if rev <= 0 {
		t.Errorf("CompactEtcd returned revision %d", rev)
	}
	if _, err := client.CoreV1().ConfigMaps(after.Namespace).Get(ctx, after.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("get after compaction: %v", err)
	}
	// Secrets have no watch cache: a watch from before the compaction goes
	// to etcd and is too old, whether the apiserver refuses it outright or
	// sends the 410 as the watch's first event.
	w, err := client.CoreV1().Secrets(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{ResourceVersion: "2"})
	if err == nil {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				err = apierrors.FromObject(ev.Object)
			} else {
				t.Errorf("watch from a compacted revision: first event %s, want an error", ev.Type)
			}
		case <-time.After(30 * time.Second):
			t.Error("watch from a compacted revision: no event within 30s")
		}
		w.Stop()
	}
	if err != nil && !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("watch from a compacted revision: %v, want 410 Gone", err)
	}
	t.Logf("watch from a compacted revision: %v", err)

	// RestartAPIServer, the two steps in one call: the data written
	// before it is there after it, for a client built before it.
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatalf("RestartAPIServer: %v", err)
	}
	if _, err := fileClient.CoreV1().ConfigMaps(after.Namespace).Get(ctx, after.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("get after RestartAPIServer: %v", err)
	}

	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := cp.StartAPIServer(ctx); err == nil {
		t.Error("StartAPIServer after Stop succeeded")
	}
	stopInformer()
	factory.Shutdown()
	if err := findRetry(30*time.Second, ignore); err != nil {
		t.Errorf("goroutines leaked by a start/restart/stop cycle: %v", err)
	}
}
