package library

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

var (
	cfg    *rest.Config
	client kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.Options{Name: "library"}, func(env *testenv.Env) error {
		cfg, client = env.Config, env.Kube
		return nil
	}))
}

// TestStartCascadeStop is the README's library snippet: one call gives a
// test API server cascading deletion, and Stop leaves nothing running.
func TestStartCascadeStop(t *testing.T) {
	ctx := t.Context()
	baseline := settledGoroutines(t)

	gc, err := kgc.Start(ctx, cfg, kgc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The leak detector must see kgc while it runs, or it proves nothing.
	if running := len(kgcGoroutines()); running < 3 {
		t.Fatalf("leak detector sees %d kgc goroutines while kgc runs", running)
	}
	ns := newNamespace(t)
	cascade(t, gc, ns)
	gc.Stop()
	gc.Stop() // idempotent

	assertNoLeak(t, baseline)
}

// TestParallelInstances runs several collectors in one process, as parallel
// tests do, each against its own namespace of the same API server, and
// checks that stopping them all leaves nothing behind.
func TestParallelInstances(t *testing.T) {
	baseline := settledGoroutines(t)
	t.Run("group", func(t *testing.T) {
		for i := range 3 {
			t.Run(fmt.Sprintf("instance-%d", i), func(t *testing.T) {
				t.Parallel()
				gc, err := kgc.Start(t.Context(), cfg, kgc.Options{Workers: 2})
				if err != nil {
					t.Fatal(err)
				}
				defer gc.Stop()
				cascade(t, gc, newNamespace(t))
			})
		}
	})
	assertNoLeak(t, baseline)
}

// TestStopByContext stops a collector by cancelling the context Start got.
func TestStopByContext(t *testing.T) {
	baseline := settledGoroutines(t)
	ctx, cancel := context.WithCancel(t.Context())
	gc, err := kgc.Start(ctx, cfg, kgc.Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	gc.Stop() // returns once Run has finished
	if err := gc.WaitForSync(context.Background()); err == nil {
		// Synced stays true after a stop; what matters is that nothing runs.
		t.Log("WaitForSync after stop reports the earlier sync")
	}
	assertNoLeak(t, baseline)
}

// cascade creates an owner with dependents, deletes it in the background
// and waits until kgc has deleted the dependents.
func cascade(t *testing.T, gc *kgc.Collector, ns string) {
	t.Helper()
	ctx := t.Context()
	cms := client.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	var names []string
	for i := range 5 {
		dep := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%d", i), OwnerReferences: []metav1.OwnerReference{ref}}}
		if _, err := cms.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, dep.Name)
	}
	bg := metav1.DeletePropagationBackground
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			_, err := cms.Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				return false, nil
			}
			if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("dependents of %s/owner were not collected: %v", ns, err)
	}
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "library-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// leakSlack absorbs goroutines that come and go with the API server's own
// activity and with the test client's connection; a leaked collector leaves
// hundreds (every monitor runs several, plus the workers).
const leakSlack = 40

var goroutineMu sync.Mutex

// settledGoroutines returns the goroutine count once it stops moving.
func settledGoroutines(t *testing.T) int {
	t.Helper()
	goroutineMu.Lock()
	defer goroutineMu.Unlock()
	prev := -1
	for range 50 {
		n := runtime.NumGoroutine()
		if n == prev {
			return n
		}
		prev = n
		time.Sleep(100 * time.Millisecond)
	}
	return prev
}

// assertNoLeak checks that stopping kgc left nothing running: no goroutine
// with kgc's code on its stack (precise), and a goroutine count back near
// the baseline (catches goroutines kgc started inside libraries, e.g.
// client-go's watch streams or event broadcaster, within the API server's
// own noise).
func assertNoLeak(t *testing.T, baseline int) {
	t.Helper()
	var stacks []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		stacks = kgcGoroutines()
		return len(stacks) == 0, nil
	})
	if err != nil {
		t.Fatalf("%d goroutines still run kgc code after Stop:\n%s", len(stacks), strings.Join(stacks, "\n\n"))
	}
	var n int
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n = runtime.NumGoroutine()
		return n <= baseline+leakSlack, nil
	})
	if err != nil {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("goroutines: %d before, %d after stopping kgc (slack %d)\n%s", baseline, n, leakSlack, b.String())
	}
	t.Logf("goroutines: %d before, %d after stopping kgc; none runs kgc code", baseline, n)
}

// kgcGoroutines returns the stacks of goroutines running kgc's own code.
func kgcGoroutines() []string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	var out []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "github.com/kgc-dev/kgc/internal/") || strings.Contains(g, "github.com/kgc-dev/kgc/pkg/") {
			out = append(out, g)
		}
	}
	return out
}
