package controlplane

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func TestControlPlane(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	cp, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	t.Logf("started in %v", time.Since(began))

	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kgc-test"}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns.Name},
		Data:       map[string]string{"greeting": "hi"},
	}
	if _, err := client.CoreV1().ConfigMaps(ns.Name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap: %v", err)
	}

	// The kubeconfig on disk must work on its own, through clientcmd, as
	// kubectl would use it.
	fileCfg, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	fileClient, err := kubernetes.NewForConfig(fileCfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fileClient.CoreV1().ConfigMaps(ns.Name).Get(ctx, cm.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting configmap through kubeconfig: %v", err)
	}
	if got.Data["greeting"] != "hi" {
		t.Errorf("configmap data = %v, want greeting=hi", got.Data)
	}

	// CRDs and aggregation must be served: kgc has to discover them.
	for _, gv := range []string{"apiextensions.k8s.io/v1", "apiregistration.k8s.io/v1", "apps/v1", "batch/v1"} {
		if _, err := client.Discovery().ServerResourcesForGroupVersion(gv); err != nil {
			t.Errorf("discovery of %s: %v", gv, err)
		}
	}

	dir := cp.Dir
	began = time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %v", time.Since(began))
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary dir %s still exists after Stop (stat err %v)", dir, err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestKeptDir checks that a caller-supplied directory survives Stop and
// that a new control plane on it sees the old data.
func TestKeptDir(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "state")

	cp, err := Start(ctx, Options{Dir: dir, Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(cp.Config)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: metav1.NamespaceDefault}}
	if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap: %v", err)
	}
	// A second control plane on the same directory must fail at once
	// instead of waiting on etcd's database lock.
	if second, err := Start(ctx, Options{Dir: dir}); err == nil {
		_ = second.Stop()
		t.Errorf("second Start on a directory in use succeeded")
	} else {
		t.Logf("second Start on a directory in use: %v", err)
	}
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubeconfig")); err != nil {
		t.Fatalf("kept dir lost its kubeconfig: %v", err)
	}

	cp, err = Start(ctx, Options{Dir: dir, Logf: t.Logf})
	if err != nil {
		t.Fatalf("second Start on the same dir: %v", err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	}()
	client = kubernetes.NewForConfigOrDie(cp.Config)
	if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("configmap from the first run: %v", err)
	}
}

// TestNoGoroutineLeak requires that a start/stop cycle, client traffic
// included, leaves no goroutine behind. The only exception is the one
// process-wide singleton kube-apiserver starts on first use (healthz's log
// checker), started here before the snapshot as upstream's leak checks do.
func TestNoGoroutineLeak(t *testing.T) {
	ctx := t.Context()
	_ = healthz.LogHealthz.Check(nil)
	before := runtime.NumGoroutine()
	ignore := goleak.IgnoreCurrent()

	cp, err := Start(ctx, Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	running := runtime.NumGoroutine()
	if _, err := kubernetes.NewForConfigOrDie(cp.Config).CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing namespaces: %v", err)
	}
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}

	// Goroutines wind down for a moment after Stop returns (connections
	// closing, timers firing); goleak.Find retries, findRetry longer still.
	began := time.Now()
	if err := findRetry(30*time.Second, ignore); err != nil {
		t.Errorf("goroutines leaked by a start/stop cycle: %v", err)
	}
	t.Logf("goroutines: %d before Start, %d while running, back to %d %v after Stop",
		before, running, runtime.NumGoroutine(), time.Since(began).Round(time.Millisecond))
}

// TestStopWithOpenWatch requires Stop to return promptly while clients
// still hold watches open (a raw Watch and a running informer that the
// caller forgot to stop), and the cycle to leak nothing once those clients
// are stopped too.
func TestStopWithOpenWatch(t *testing.T) {
	ctx := t.Context()
	_ = healthz.LogHealthz.Check(nil)
	ignore := goleak.IgnoreCurrent()

	cp, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := make(chan error, 1)
	stopping := false
	t.Cleanup(func() {
		// Only when the test failed before or while stopping: wait for
		// Stop rather than leave a control plane running under other tests.
		if stopping {
			<-stopped
		} else {
			_ = cp.Stop()
		}
	})
	client := kubernetes.NewForConfigOrDie(cp.Config)

	w, err := client.CoreV1().ConfigMaps(metav1.NamespaceDefault).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watching configmaps: %v", err)
	}
	defer w.Stop()

	informerCtx, stopInformer := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	defer func() {
		stopInformer()
		factory.Shutdown()
	}()
	seen := make(chan struct{})
	informer := factory.Core().V1().ConfigMaps().Informer()
	if _, err := informer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			cm, ok := obj.(*corev1.ConfigMap)
			return ok && cm.Name == "watched"
		},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: func(any) { close(seen) }},
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(informerCtx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("informer for %v did not sync", typ)
		}
	}

	// An event through both proves that the watches are established on
	// the server, not merely requested.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: metav1.NamespaceDefault}}
	if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating configmap: %v", err)
	}
	timeout := time.After(30 * time.Second)
	for added := false; !added; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed before the event")
			}
			added = ev.Type == watch.Added && ev.Object.(*corev1.ConfigMap).Name == cm.Name
		case <-timeout:
			t.Fatal("no watch event for the new configmap")
		}
	}
	select {
	case <-seen:
	case <-timeout:
		t.Fatal("informer did not see the new configmap")
	}

	// Both watches are still open and the informer keeps running.
	const stopBound = 10 * time.Second
	began := time.Now()
	stopping = true
	go func() { stopped <- cp.Stop() }()
	select {
	case err := <-stopped:
		stopping = false
		if err != nil {
			t.Fatalf("Stop with open watches: %v", err)
		}
	case <-time.After(stopBound):
		t.Fatalf("Stop with open watches did not return within %v", stopBound)
	}
	t.Logf("stopped with open watches in %v", time.Since(began).Round(time.Millisecond))

	// The server ended the raw watch; the informer is retrying against a
	// closed port. Stopping them is the client's part; then nothing of the
	// control plane may remain.
	w.Stop()
	stopInformer()
	factory.Shutdown()
	began = time.Now()
	if err := findRetry(30*time.Second, ignore); err != nil {
		t.Errorf("goroutines leaked after Stop with open watches: %v", err)
	}
	t.Logf("goroutines back to baseline %v after the clients stopped", time.Since(began).Round(time.Millisecond))
}

// TestTrackingListener checks Stop's last resort on its own: closeConns
// closes the connections accepted so far and every one accepted later,
// without closing the listener.
func TestTrackingListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newTrackingListener(raw)
	defer l.Close()

	// accept returns both ends of a new connection.
	accept := func() (client, server net.Conn) {
		t.Helper()
		client, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		if server, err = l.Accept(); err != nil {
			t.Fatalf("Accept: %v", err)
		}
		return client, server
	}
	closedByServer := func(client net.Conn) bool {
		t.Helper()
		_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := client.Read(make([]byte, 1))
		return errors.Is(err, io.EOF)
	}

	open, _ := accept()
	// A connection closed before closeConns is forgotten.
	if _, server := accept(); server.Close() != nil {
		t.Fatal("closing an accepted connection failed")
	}
	if n := len(l.conns); n != 1 {
		t.Errorf("%d connections tracked, want 1", n)
	}

	l.closeConns()
	if !closedByServer(open) {
		t.Error("open connection not closed by closeConns")
	}
	if n := len(l.conns); n != 0 {
		t.Errorf("%d connections tracked after closeConns, want 0", n)
	}
	if late, _ := accept(); !closedByServer(late) {
		t.Error("connection accepted after closeConns not closed")
	}
}

func findRetry(timeout time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(timeout)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		// Cleanups attached with runtime.AddCleanup (client-go's transport
		// cache) only run after a collection.
		runtime.GC()
	}
}
