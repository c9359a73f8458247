package discovery

import (
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
)

// A watch interrupted leaves its resource unverified: after an error,
// until the resumed watch delivers an event (the storage's history goes on
// from where kgc was); after a 410, until the relist's Listed marker is
// applied to the graph. Each interruption has a new number.
func TestUnverifiedAfterInterruption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status metav1.Status
		relist bool // the interruption makes the monitor list again
	}{
		{"a watch error", metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError}, false},
		{"a watch answered 410", metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
			var mu sync.Mutex
			var watchers []*watch.RaceFreeFakeWatcher
			client.PrependWatchReactor("configmaps", func(clienttesting.Action) (bool, watch.Interface, error) {
				w := watch.NewRaceFreeFake()
				mu.Lock()
				watchers = append(watchers, w)
				mu.Unlock()
				return true, w, nil
			})
			watcher := func(i int) *watch.RaceFreeFakeWatcher {
				waitUntil(t, "watch", func() bool { mu.Lock(); defer mu.Unlock(); return len(watchers) > i })
				mu.Lock()
				defer mu.Unlock()
				return watchers[i]
			}
			rec := &recorder{}
			m := NewMonitors(client, rec.observe)
			defer m.Stop()
			gk := configMaps.GroupKind()
			applied := func() int {
				rec.mu.Lock()
				markers := append([]graph.Event(nil), rec.listed...)
				rec.mu.Unlock()
				for _, ev := range markers {
					m.Applied(ev.Gen)
				}
				return len(markers)
			}
			m.Sync(ctx, want(configMaps), nil)
			first := watcher(0)
			if applied(); func() bool { _, u := m.Unverified(gk); return u }() {
				t.Fatal("unverified before any interruption")
			}
			first.Error(&tc.status)
			waitUntil(t, "the interruption", func() bool { _, u := m.Unverified(gk); return u })
			epoch, _ := m.Unverified(gk)
			second := watcher(1)
			if tc.relist {
				waitUntil(t, "the relist's marker", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.listed) == 2 })
				if _, u := m.Unverified(gk); !u {
					t.Fatal("verified before the relist's marker was applied")
				}
				applied()
			} else {
				if _, u := m.Unverified(gk); !u {
					t.Fatal("verified before the resumed watch delivered anything")
				}
				second.Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "x", ResourceVersion: "9"}})
			}
			waitUntil(t, "verified", func() bool { _, u := m.Unverified(gk); return !u })
			second.Error(&tc.status)
			waitUntil(t, "a second interruption", func() bool { e, u := m.Unverified(gk); return u && e == epoch+1 })
		})
	}
}
