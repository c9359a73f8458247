package cpproc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func start(t *testing.T, opts Options) *ControlPlane {
	t.Helper()
	opts.Logf = t.Logf
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return cp
}

// TestOperations performs every operation on a control plane in its
// process, one of them canceled, and checks what a client sees of each.
func TestOperations(t *testing.T) {
	cp := start(t, Options{})
	ctx := t.Context()
	kube := kubernetes.NewForConfigOrDie(cp.Config)
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("through Config: %v", err)
	}
	kc, err := clientcmd.BuildConfigFromFlags("", cp.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(kc).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("through the kubeconfig: %v", err)
	}
	if !strings.HasPrefix(cp.EtcdURL, "http://127.0.0.1:") || cp.Dir == "" {
		t.Errorf("EtcdURL %q, Dir %q", cp.EtcdURL, cp.Dir)
	}

	rev, err := cp.CompactEtcd(ctx)
	if err != nil || rev <= 0 {
		t.Fatalf("CompactEtcd = %d, %v", rev, err)
	}
	// A canceled operation returns the context's error, and the control
	// plane takes the next request. (Not kube-apiserver's start: its
	// post-start hooks end the process when their context is canceled,
	// in-process as well.) The child may finish the operation before the
	// cancel reaches it, and then its outcome is returned: a write first,
	// so that compacting again succeeds rather than finding the revision
	// compacted already.
	if _, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bump-"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cp.CompactEtcd(canceled); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("CompactEtcd with a canceled context: %v, want %v (or success, when it completed before the cancel reached the child)", err, context.Canceled)
	}

	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("StopAPIServer: %v", err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
		t.Error("the apiserver answered after StopAPIServer")
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatalf("RestartAPIServer: %v", err)
	}
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("after the restarts: %v", err)
	}

	snapshot := filepath.Join(t.TempDir(), "snapshot")
	if err := cp.SnapshotEtcd(ctx, snapshot); err != nil {
		t.Fatalf("SnapshotEtcd: %v", err)
	}
	cm, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-snapshot"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.RestoreEtcd(ctx, snapshot, 100); err != nil {
		t.Fatalf("RestoreEtcd: %v", err)
	}
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a ConfigMap created after the snapshot, after the restore: %v, want not found", err)
	}

	families, err := cp.GatherMetrics(ctx)
	if err != nil {
		t.Fatalf("GatherMetrics: %v", err)
	}
	found := false
	for _, f := range families {
		found = found || f.GetName() == "apiserver_request_total"
	}
	if !found {
		t.Errorf("GatherMetrics: %d families, none apiserver_request_total", len(families))
	}

	dir := cp.Dir
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory the control plane created is still there after Stop: %v", err)
	}
	if err := cp.StartAPIServer(ctx); !errors.Is(err, errStopped) {
		t.Errorf("StartAPIServer after Stop: %v, want %v", err, errStopped)
	}
}

// TestParentGone closes the request pipe, as the parent's exit does: the
// child stops its control plane, removes the directory it created, and
// exits.
func TestParentGone(t *testing.T) {
	cp := start(t, Options{})
	dir := cp.Dir
	cp.requests.Close()
	select {
	case <-cp.exited:
	case <-time.After(time.Minute):
		t.Fatal("the child did not exit within a minute of its request pipe closing")
	}
	if cp.waitErr != nil {
		t.Errorf("the child exited with %v", cp.waitErr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory the control plane created is still there: %v", err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("Stop after the child exited by itself: %v", err)
	}
}

// TestChildDies kills the child: calls report its exit and its output.
func TestChildDies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-cp.exited
	if err := cp.StopAPIServer(); err == nil || !strings.Contains(err.Error(), "exited (signal: killed)") {
		t.Errorf("StopAPIServer after the child was killed: %v", err)
	}
	if err := cp.Stop(); err == nil || !strings.Contains(err.Error(), "signal: killed") {
		t.Errorf("Stop after the child was killed: %v", err)
	}
	// What the killed child left: it could not clean up.
	_ = os.RemoveAll(cp.Dir)
}

// TestStartFails passes an unknown feature gate: Start returns the child's
// error, and the child is gone.
func TestStartFails(t *testing.T) {
	_, err := Start(t.Context(), Options{Logf: t.Logf, FeatureGates: map[string]bool{"NoSuchFeatureGate": true}})
	if err == nil || !strings.Contains(err.Error(), "NoSuchFeatureGate") {
		t.Fatalf("Start with an unknown feature gate: %v", err)
	}
}

func TestTail(t *testing.T) {
	tl := &tail{max: 10}
	for _, s := range []string{"first line\n", "second\n", "third\n"} {
		if _, err := tl.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// The last 10 bytes are "nd\nthird\n": from the first whole line.
	if got := tl.String(); got != "third\n" {
		t.Errorf("tail %q, want %q", got, "third\n")
	}
	tl = &tail{max: 10}
	tl.Write([]byte("short\n"))
	if got := tl.String(); got != "short\n" {
		t.Errorf("tail %q, want %q", got, "short\n")
	}
}

func TestWithoutRace(t *testing.T) {
	for in, want := range map[string]string{
		"":                           "",
		"-race":                      "",
		"-buildvcs=false --race -v":  "-buildvcs=false -v",
		"-race=true -mod=mod":        "-mod=mod",
		"-race=false -trimpath":      "-race=false -trimpath",
		"-tags=integration -race=1 ": "-tags=integration",
	} {
		if got := withoutRace(in); got != want {
			t.Errorf("withoutRace(%q) = %q, want %q", in, got, want)
		}
	}
}
