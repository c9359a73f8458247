package breaker

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/graphapi"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// etcd rolled back under a running kgc while it was deleting the
// dependent of an owner it saw deleted, and the dependent has not changed
// since the snapshot: its relisted state is the one kgc holds, so it
// shows no regression; only its owner, back under its UID, does. kgc's
// DELETE of the dependent, which failed until the rollback, is retried
// once the apiserver is back; the owner's resource is kept unreadable
// meanwhile, so that nothing has shown kgc the owner again. The deletion
// rests on an absence the rollback made false and must not be made: kgc
// reads the owner again first (its resource's watch was interrupted), and
// once the owner's resource is listed again, trips rollback on it. (Were
// the dependent deleted, the owner would have no dependent left in the
// graph, and its return would be no evidence of anything: the rollback
// would go unnoticed.)
func TestEtcdRollbackHoldsDeletionOfUnchangedDependent(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	cp, err := cpproc.Start(ctx, cpproc.Options{Dir: filepath.Join(dir, "cp"), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	kube := kubernetes.NewForConfigOrDie(cp.Config)
	const ns, dep = "default", "dependent-unchanged"
	var blockDelete atomic.Bool
	fp := faultproxy.New(faultproxy.Config{Codes: []int{http.StatusServiceUnavailable}, Stubborn: func(r *http.Request) int {
		if blockDelete.Load() && r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/configmaps/"+dep) {
			return 1 << 30
		}
		return 0
	}})
	cfg := rest.CopyConfig(cp.Config)
	cfg.WrapTransport = fp.Wrap
	gc := startKGCOn(t, cfg, kgc.Options{Breaker: breakerOptions(ns), HoldRestored: true})

	owner, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dep,
		OwnerReferences: []metav1.OwnerReference{testenv.OwnerRef("v1", "Secret", owner.Name, owner.UID, false)}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "kgc to observe the owner and its dependent", func() (bool, error) {
		return gc.nodeState(t, owner.UID) == graphapi.StateLive && gc.nodeState(t, cm.UID) == graphapi.StateLive, nil
	})
	snapshot := filepath.Join(dir, "snapshot")
	if err := cp.SnapshotEtcd(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	// The owner goes; kgc's DELETE of its dependent fails for now.
	blockDelete.Store(true)
	bg := metav1.DeletePropagationBackground
	if err := kube.CoreV1().Secrets(ns).Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "kgc to try to delete the dependent", func() (bool, error) {
		for _, w := range fp.Writes() {
			if w.Method == http.MethodDelete && strings.HasSuffix(w.Path, "/configmaps/"+dep) {
				return true, nil
			}
		}
		return false, nil
	})
	parallel(t, "writes after the snapshot", 200, func(i int) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("later-%d", i)}}, metav1.CreateOptions{})
		return err
	})

	// etcd's recommended restore: every watch must list again. The
	// owner's resource stays unreadable; the dependent's DELETE may go.
	heal := fp.FailReads(faultproxy.ResourcePath("", "v1", "secrets"), http.StatusServiceUnavailable)
	defer heal()
	if err := cp.RestoreEtcd(ctx, snapshot, 1000); err != nil {
		t.Fatal(err)
	}
	blockDelete.Store(false)
	if _, err := kube.CoreV1().Secrets(ns).Get(ctx, owner.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the owner after the rollback: %v", err)
	}
	dependentLeft := func() error {
		got, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, dep, metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp != nil {
			return fmt.Errorf("the dependent of an owner that exists after the rollback was deleted: %v", err)
		}
		return nil
	}
	// kgc reads the owner again (its resource's watch was interrupted,
	// and nothing verified it since) instead of deleting on the absence
	// it saw before the rollback; the read fails for now.
	restored := len(fp.Requests())
	waitFor(t, "kgc to read the owner again", func() (bool, error) {
		for _, r := range fp.Requests()[restored:] {
			if r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/secrets/"+owner.Name) {
				return true, dependentLeft()
			}
		}
		return false, dependentLeft()
	})
	// The owner's resource is readable again: kgc lists it, finds the
	// owner back under its UID (the rollback's evidence), and holds.
	heal()
	waitFor(t, "the rollback trip", func() (bool, error) {
		r := gc.holds(t)
		return len(r.Breaker.Trips) == 1 && r.Breaker.Trips[0].Signal == breaker.Rollback && gc.queueIdle(t), dependentLeft()
	})
	t.Logf("%s", gc.holds(t).Breaker.Trips[0].Because())
	mustCLI(t, "breaker", "resume", "--lease-namespace", ns, "--lease-name", "kgc", "--kubeconfig", cp.KubeconfigPath)
	waitFor(t, "the resume applied", func() (bool, error) {
		r := gc.holds(t)
		return len(r.Breaker.Trips) == 0 && gc.queueIdle(t), dependentLeft()
	})
	if err := dependentLeft(); err != nil {
		t.Fatal(err)
	}
}
