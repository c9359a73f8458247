package discovery

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
)

// Monitors list the latest state (resourceVersion "") rather than "any"
// ("0"), which a resource with a broken watch cache answers with 429s the
// client retries for a long time; and they never use streaming lists.
func TestMonitorsListLatest(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var mu sync.Mutex
	var rvs []string
	client.PrependReactor("list", "configmaps", func(a clienttesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		rvs = append(rvs, a.(clienttesting.ListActionImpl).ListOptions.ResourceVersion)
		return false, nil, nil
	})
	m := NewMonitors(client, func(graph.Event) {})
	defer m.Stop()
	m.Sync(ctx, want(configMaps), nil)
	waitUntil(t, "sync", m.HasSynced)
	mu.Lock()
	defer mu.Unlock()
	if len(rvs) == 0 || rvs[0] != "" {
		t.Errorf("LIST resourceVersions = %q, want the first to be \"\" (latest)", rvs)
	}
	if !(listWatch{}).IsWatchListSemanticsUnSupported() {
		t.Error("monitors would use streaming lists")
	}
}

// Settled turns true once every monitor synced or fails; a failing monitor
// that never synced is restarted by RestartFailing (a fresh list at once)
// and syncs once its resource heals; handlers stay one per monitor.
func TestMonitorsSettleAndRestartFailing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	var broken atomic.Bool
	broken.Store(true)
	var widgetLists atomic.Int32
	client.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, kruntime.Object, error) {
		widgetLists.Add(1)
		if broken.Load() {
			return true, nil, errors.New("conversion webhook for example.com/v1, Kind=Widget failed: service not found")
		}
		return false, nil, nil
	})
	m := NewMonitors(client, func(graph.Event) {})
	defer m.Stop()
	m.Sync(ctx, want(configMaps, widgets), nil)
	waitUntil(t, "monitors to settle", m.Settled)
	st := m.Status()
	if !st[configMaps.GVR].Synced || st[widgets.GVR].State() != StateFailing {
		t.Fatalf("status = %+v, want configmaps synced and widgets failing", st)
	}
	if m.HasSynced() {
		t.Error("HasSynced with a failing monitor")
	}

	// A restart of a synced monitor would drop its cache: only failing,
	// never-synced ones are restarted.
	all := func(schema.GroupVersionResource) bool { return true }
	broken.Store(false)
	lists := widgetLists.Load()
	if n := m.RestartFailing(ctx, all); n != 1 {
		t.Errorf("RestartFailing = %d, want 1 (widgets only)", n)
	}
	waitUntil(t, "widgets to sync after the restart", func() bool { return m.Status()[widgets.GVR].Synced })
	if widgetLists.Load() <= lists {
		t.Error("the restarted monitor did not list")
	}
	if n := m.RestartFailing(ctx, all); n != 0 {
		t.Errorf("RestartFailing with nothing failing = %d", n)
	}
	if m.Len() != 2 || m.Handlers() != 2 {
		t.Errorf("Len %d, Handlers %d; want 2 and 2", m.Len(), m.Handlers())
	}
	m.Stop()
	if m.Handlers() != 0 {
		t.Errorf("after Stop: %d handlers left", m.Handlers())
	}
}

// A monitor that synced and then fails (its watch and relists error) is
// failing until it makes progress again.
func TestStatusFailingAfterSync(t *testing.T) {
	st := Status{Synced: true, LastError: errors.New("boom")}
	if !st.Failing() || st.State() != StateFailing {
		t.Errorf("synced monitor with a current error: Failing %v, State %s", st.Failing(), st.State())
	}
	if s := (Status{Synced: true}); s.State() != StateSynced {
		t.Errorf("State = %s", s.State())
	}
	if s := (Status{}); s.State() != StateSyncing {
		t.Errorf("State = %s", s.State())
	}
}
