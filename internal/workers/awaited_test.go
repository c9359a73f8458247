package workers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
)

// TestAwaitedWritesGoFirst: with one write slot and garbage of an owner
// already gone to delete, the writes an owner's finalizer waits for — an
// orphaning owner's patches and then its finalizer removal; the deletions
// of the dependents blocking an owner in Foreground deletion — take the
// slot before the garbage's deletions, though the garbage was queued
// first and has two workers to the awaited work's one.
func TestAwaitedWritesGoFirst(t *testing.T) {
	const garbage, awaited = 12, 5
	for _, tc := range []struct {
		name       string
		finalizer  string
		block      bool
		waiters    int    // workers waiting for the slot once all is decided
		lastAwaite string // the last awaited write
	}{
		{name: "orphan", finalizer: metav1.FinalizerOrphanDependents, waiters: 3, lastAwaite: "patch owner"},
		{name: "foreground", finalizer: metav1.FinalizerDeleteDependents, block: true, waiters: 2, lastAwaite: fmt.Sprintf("delete dep-%d", awaited-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeapi.NewServer()
			w := New(Config{Metadata: srv.Client, Mapper: fakeapi.NewMapper(), Workers: 2, MaxWritesInFlight: 1}, graph.New())
			_, ctx := ktesting.NewTestContext(t)
			s := &stepper{t: t, srv: srv, c: w, ctx: ctx}

			// Garbage: dependents of an owner observed deleted.
			gone := srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "gone", "gone-uid"))
			s.observe(fakeapi.ConfigMaps, gone)
			for i := range garbage {
				s.observe(fakeapi.ConfigMaps, srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("garbage-%d", i), types.UID(fmt.Sprintf("g%d", i)), fakeapi.ConfigMapRef("gone", "gone-uid"))))
			}
			if err := srv.Delete(fakeapi.ConfigMaps, "a", "gone", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			s.observe(fakeapi.ConfigMaps, gone)
			// An owner being deleted, someone waiting for it, and its
			// dependents.
			now := metav1.Now()
			owner := fakeapi.Object("a", "owner", "owner-uid")
			owner.Finalizers, owner.DeletionTimestamp = []string{tc.finalizer}, &now
			s.observe(fakeapi.ConfigMaps, srv.Create(t, fakeapi.ConfigMaps, owner))
			for i := range awaited {
				ref := fakeapi.ConfigMapRef("owner", "owner-uid")
				ref.BlockOwnerDeletion = &tc.block
				s.observe(fakeapi.ConfigMaps, srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", fmt.Sprintf("dep-%d", i), types.UID(fmt.Sprintf("d%d", i)), ref)))
			}

			// Every write waits at the gate until the test lets it go.
			arrived, release := make(chan string), make(chan struct{})
			gate := func(a clienttesting.Action) (bool, runtime.Object, error) {
				var name string
				switch a := a.(type) {
				case clienttesting.DeleteActionImpl:
					name = "delete " + a.GetName()
				case clienttesting.PatchActionImpl:
					name = "patch " + a.GetName()
				}
				arrived <- name
				<-release
				return false, nil, nil
			}
			srv.Client.PrependReactor("delete", "*", gate)
			srv.Client.PrependReactor("patch", "*", gate)

			runCtx, stop := context.WithCancel(ctx)
			w.Start(runCtx, ctx)
			defer func() {
				stop()
				for { // let the writes still at the gate go
					select {
					case <-arrived:
						release <- struct{}{}
						continue
					case <-time.After(100 * time.Millisecond):
					}
					break
				}
				w.Stop()
			}()

			var order []string
			order = append(order, <-arrived)
			// Everything is decided and waits for the slot.
			if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return w.slots.Waiting() == tc.waiters, nil
			}); err != nil {
				t.Fatalf("%d writes wait for the slot, want %d", w.slots.Waiting(), tc.waiters)
			}
			want := garbage + awaited
			if tc.finalizer == metav1.FinalizerOrphanDependents {
				want++ // the finalizer removal
			}
			patches := func() int {
				n := 0
				for _, name := range order {
					if strings.HasPrefix(name, "patch dep-") {
						n++
					}
				}
				return n
			}
			for len(order) < want {
				if tc.finalizer == metav1.FinalizerOrphanDependents && patches() == awaited && !slices.Contains(order, "patch owner") &&
					strings.HasPrefix(order[len(order)-1], "delete garbage-") {
					// The owner is decided again after its patches, on a
					// requeue timer: before the garbage deletion holding the
					// slot lets it go, wait until the owner's finalizer
					// removal waits for the slot too, so that what takes
					// the slot next is the priority's choice, not the
					// timer's.
					if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
						return w.slots.Waiting() == tc.waiters, nil
					}); err != nil {
						t.Errorf("the owner's finalizer removal never waited for the slot: %d waiting", w.slots.Waiting())
					}
				}
				release <- struct{}{}
				select {
				case name := <-arrived:
					order = append(order, name)
				case <-time.After(10 * time.Second):
					t.Fatalf("writes so far %v; want %d", order, want)
				}
			}
			release <- struct{}{}
			t.Logf("writes in order: %s", strings.Join(order, ", "))

			last := slices.Index(order, tc.lastAwaite)
			if last < 0 {
				t.Fatalf("no %q among the writes", tc.lastAwaite)
			}
			// The garbage deletions before it: the one that held the slot
			// first, and, for the orphaning owner, those that took the slot
			// while the owner was decided again after its patches.
			before := 0
			for _, name := range order[:last] {
				if strings.HasPrefix(name, "delete garbage-") {
					before++
				}
			}
			if before > 3 {
				t.Errorf("%d garbage deletions went before %q; want at most 3", before, tc.lastAwaite)
			}
		})
	}
}
