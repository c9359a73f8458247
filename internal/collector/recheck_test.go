package collector

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// missedPrefix names objects whose watch events the fake drops: kgc misses
// them, as it would while disconnected or when an event is lost.
const missedPrefix = "missed-"

// dropMissedEvents makes the fake's watches skip every event about an
// object named missed-*.
func dropMissedEvents(srv *fakeapi.Server) {
	srv.Client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		w, err := srv.Client.Tracker().Watch(a.GetResource(), a.GetNamespace(), a.(clienttesting.WatchActionImpl).ListOptions)
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			m, ok := ev.Object.(*metav1.PartialObjectMetadata)
			return ev, !ok || !strings.HasPrefix(m.Name, missedPrefix)
		}), nil
	})
}

func runCollector(t *testing.T, srv *fakeapi.Server, resync time.Duration) *testEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	e := &testEnv{srv: srv, disc: &fakeapi.Discovery{Lists: fakeapi.ResourceLists()}, mapper: fakeapi.NewMapper(), recorder: &fakeapi.Recorder{}, ctx: ctx}
	c, err := New(Config{
		Metadata: srv.Client, Discovery: e.disc, Mapper: e.mapper, Recorder: e.recorder, Workers: 2,
		Ignored: []schema.GroupResource{fakeapi.Events.GroupResource()}, ResyncPeriod: resync, SyncTimeout: testTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Errorf("Run did not return within %s of cancellation", testTimeout)
		}
	})
	e.waitFor(t, "collector to sync", c.Synced)
	return e
}

// The periodic re-check finishes work whose trigger kgc missed: the graph
// knows an owner is waiting for its dependents to be deleted or orphaned, or
// that a dependent's owner is gone, but no queue item was ever added for it
// (here: the objects are applied to the graph directly, their effects
// dropped, and the fake never sends their watch events). With the re-check
// period far away nothing happens; with it short, everything is finished.
func TestPeriodicRecheckFinishesMissedWork(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resync   time.Duration
		finished bool
	}{
		{"no re-check within the test", time.Hour, false},
		{"re-check every 100ms", 100 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeapi.NewServer()
			dropMissedEvents(srv)
			e := runCollector(t, srv, tc.resync)

			now := metav1.Now()
			fg := fakeapi.Object("a", missedPrefix+"fg", "fg-uid")
			fg.DeletionTimestamp, fg.Finalizers = &now, []string{metav1.FinalizerDeleteDependents}
			orphan := fakeapi.Object("a", missedPrefix+"orphan", "orphan-uid")
			orphan.DeletionTimestamp, orphan.Finalizers = &now, []string{metav1.FinalizerOrphanDependents}
			dangling := fakeapi.Object("a", missedPrefix+"dangling", "dangling-uid", fakeapi.DeploymentRef("ghost", "ghost-uid"))
			var objs []*metav1.PartialObjectMetadata
			for _, o := range []struct {
				gvr schema.GroupVersionResource
				obj *metav1.PartialObjectMetadata
			}{{fakeapi.Deployments, fg}, {fakeapi.Deployments, orphan}, {fakeapi.ConfigMaps, dangling}} {
				created := srv.Create(t, o.gvr, o.obj)
				objs = append(objs, created)
				kind, apiVersion := "ConfigMap", "v1"
				if o.gvr == fakeapi.Deployments {
					kind, apiVersion = "Deployment", "apps/v1"
				}
				// The graph learns of the object, but its effects are lost.
				// (The test writes to the graph beside the graph builder; the
				// graph's lock keeps that safe, and nothing else is pending.)
				_ = e.c.Graph().Apply(graph.Event{Type: graph.Upsert, Object: rules.Object{
					Identity:        rules.Identity{APIVersion: apiVersion, Kind: kind, Namespace: created.Namespace, Name: created.Name, UID: created.UID},
					ResourceVersion: created.ResourceVersion,
					OwnerReferences: created.OwnerReferences,
					Finalizers:      created.Finalizers,
					Deleting:        created.DeletionTimestamp != nil,
				}})
			}
			done := func() bool {
				return e.gone(fakeapi.Deployments, "a", fg.Name) && e.gone(fakeapi.Deployments, "a", orphan.Name) && e.gone(fakeapi.ConfigMaps, "a", dangling.Name)
			}
			if !tc.finished {
				e.consistently(t, "missed work staying unfinished without a re-check", 500*time.Millisecond, func() bool {
					return !e.gone(fakeapi.Deployments, "a", fg.Name) && !e.gone(fakeapi.Deployments, "a", orphan.Name) && !e.gone(fakeapi.ConfigMaps, "a", dangling.Name)
				})
				return
			}
			e.waitFor(t, "the re-check to finish the missed work", done)
			// The graph never hears that these objects went (their events are
			// dropped), so later re-checks may repeat a write and get
			// NotFound: count the objects written, not the writes.
			_, deletes, patches := srv.KGCActions()
			if len(deletes) == 0 {
				t.Fatal("no DELETE sent for the dangling dependent")
			}
			for _, d := range deletes {
				checkDelete(t, d, fakeapi.ConfigMaps, objs[2], metav1.DeletePropagationBackground)
			}
			names := patchNames(patches)
			slices.Sort(names)
			names = slices.Compact(names)
			if want := []string{fg.Name, orphan.Name}; !slices.Equal(names, want) {
				t.Errorf("PATCHes = %v, want the two finalizer removals %v", names, want)
			}
		})
	}
}
