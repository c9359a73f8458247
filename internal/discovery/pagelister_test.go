package discovery

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/kgc-dev/kgc/internal/graph"
)

// pagedLister serves objs in protobuf pages of 7, as the apiserver pages a
// LIST (continue token: the next index); a resource it does not have
// answers 404.
type pagedLister struct {
	t     testing.TB
	gvr   schema.GroupVersionResource
	objs  []metav1.PartialObjectMetadata
	mu    sync.Mutex
	calls []metav1.ListOptions
}

func (p *pagedLister) ListPage(_ context.Context, gvr schema.GroupVersionResource, opts metav1.ListOptions, buf *bytes.Buffer) error {
	p.mu.Lock()
	p.calls = append(p.calls, opts)
	p.mu.Unlock()
	if gvr != p.gvr {
		return apierrors.NewNotFound(gvr.GroupResource(), "")
	}
	from := 0
	if opts.Continue != "" {
		from, _ = strconv.Atoi(opts.Continue)
	}
	to := min(from+7, len(p.objs))
	l := &metav1.PartialObjectMetadataList{Items: p.objs[from:to]}
	l.ResourceVersion = "100"
	if to < len(p.objs) {
		l.Continue = strconv.Itoa(to)
	}
	buf.Reset()
	buf.Write(protobufBody(p.t, l))
	return nil
}

// TestMonitorsListThroughPageLister: a monitor that lists through a
// PageLister delivers the same events as one listing through the metadata
// client, page after page, calls the gate before every page, and counts a
// 404 as a complete empty list.
func TestMonitorsListThroughPageLister(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	rng := rand.New(rand.NewPCG(pageSeed(t), 6))
	objs := randomPage(rng, 30).Items
	for i := range objs {
		objs[i].Name = fmt.Sprintf("obj-%02d", i) // the fake client lists in name order
		objs[i].Namespace = "a"
		objs[i].ResourceVersion = strconv.Itoa(i + 1)
	}

	run := func(pages PageLister, gate func(context.Context)) []graph.Event {
		client := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
		for i := range objs {
			if err := client.Tracker().Create(configMaps.GVR, &objs[i], "a"); err != nil {
				t.Fatal(err)
			}
		}
		rec := &recorder{}
		m := NewMonitors(client, rec.observe)
		if pages != nil {
			m.SetPageLister(pages)
		}
		if gate != nil {
			m.SetListGate(gate)
		}
		defer m.Stop()
		m.Sync(ctx, want(configMaps, widgets), nil)
		waitUntil(t, "monitors to sync", m.HasSynced)
		evs := rec.get()
		for i := range evs {
			evs[i].Gen = 0
		}
		return evs
	}
	var gated atomic.Int64
	lister := &pagedLister{t: t, gvr: configMaps.GVR, objs: objs}
	got := run(lister, func(context.Context) { gated.Add(1) })
	wantEvs := run(nil, nil)
	// widgets: the page lister answers 404 (a complete empty list: a
	// sweep), the fake metadata client an empty list.
	isWidget := func(ev graph.Event) bool { return ev.Object.Identity.Kind == "Widget" }
	if !slices.ContainsFunc(got, func(ev graph.Event) bool { return isWidget(ev) && ev.Type == graph.Relisted }) {
		t.Error("a 404 through the page lister did not sweep its resource")
	}
	got = slices.DeleteFunc(got, isWidget)
	wantEvs = slices.DeleteFunc(wantEvs, isWidget)
	if len(got) != len(objs) || !reflect.DeepEqual(got, wantEvs) {
		t.Fatalf("%d events through the page lister, %d through the metadata client; they differ", len(got), len(wantEvs))
	}
	lister.mu.Lock()
	calls := len(lister.calls)
	lister.mu.Unlock()
	// configmaps: 5 pages of 7 (30 objects); widgets: one 404.
	if calls != 6 || gated.Load() != 6 {
		t.Errorf("%d pages requested, gate called %d times; want 6 and 6", calls, gated.Load())
	}
}
