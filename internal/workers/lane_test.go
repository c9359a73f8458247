package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/rules"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// laneAPI is a namespace "a" of ConfigMaps that answers GETs and paginated
// LISTs (a LIST reads a snapshot when it is sent), and can hold either.
type laneAPI struct {
	mu      sync.Mutex
	objects map[string]*metav1.PartialObjectMetadata

	holdFirstGET chan struct{} // the first GET waits for it to close
	holdLIST     chan struct{} // every LIST, after its snapshot, waits for it
	listErr      error
	listSent     chan struct{} // receives once per LIST snapshot

	gets, lists atomic.Int32
}

func newLaneAPI() *laneAPI {
	return &laneAPI{objects: map[string]*metav1.PartialObjectMetadata{}, listSent: make(chan struct{}, 100)}
}

func (a *laneAPI) put(o *metav1.PartialObjectMetadata) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.objects[o.Name] = o
}

func (a *laneAPI) get(_ context.Context, gvr schema.GroupVersionResource, _, name string) (*metav1.PartialObjectMetadata, error) {
	if a.gets.Add(1) == 1 && a.holdFirstGET != nil {
		<-a.holdFirstGET
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if o := a.objects[name]; o != nil {
		return o.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
}

func (a *laneAPI) list(_ context.Context, _ schema.GroupVersionResource, _ string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	a.lists.Add(1)
	if a.listErr != nil {
		return nil, a.listErr
	}
	a.mu.Lock()
	names := make([]string, 0, len(a.objects))
	for n := range a.objects {
		names = append(names, n)
	}
	slices.Sort(names)
	snapshot := make([]metav1.PartialObjectMetadata, 0, len(names))
	for _, n := range names {
		snapshot = append(snapshot, *a.objects[n].DeepCopy())
	}
	a.mu.Unlock()
	a.listSent <- struct{}{}
	if a.holdLIST != nil {
		<-a.holdLIST
	}
	start := 0
	if opts.Continue != "" {
		start, _ = strconv.Atoi(opts.Continue)
	}
	end := min(start+int(opts.Limit), len(snapshot))
	out := &metav1.PartialObjectMetadataList{Items: snapshot[start:end]}
	if end < len(snapshot) {
		out.Continue = strconv.Itoa(end)
	}
	return out, nil
}

func newLaneFixture(api *laneAPI) *resolverFixture {
	f := newResolverFixture()
	f.r.get = api.get
	f.r.list = api.list
	return f
}

// resolveAsync resolves a reference to ConfigMap a/name (uid) from its own
// dependent, in the background.
func resolveAsync(f *resolverFixture, wg *sync.WaitGroup, name string, uid types.UID, state *rules.OwnerState, err *error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		dep := depA
		dep.UID = "dep-of-" + uid
		ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: uid}
		*state, *err = f.r.resolve(context.Background(), dep, &ref)
	}()
}

// waitQueued waits until n lookups wait for the next round of ConfigMaps in a.
func waitQueued(t *testing.T, f *resolverFixture, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.r.flightMu.Lock()
		got := 0
		if l := f.r.lanes[laneKey{gvr: fakeapi.ConfigMaps, namespace: "a"}]; l != nil {
			got = len(l.queued)
		}
		f.r.flightMu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lookups queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func foregroundDeleting(o *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	now := metav1.Now()
	o.DeletionTimestamp = &now
	o.Finalizers = []string{rules.FinalizerForeground}
	return o
}

// Lookups that queue behind a GET are answered by one LIST, each with the
// same classification a GET would give, and the absent ones are cached.
func TestLaneAnswersARoundWithOneLIST(t *testing.T) {
	api := newLaneAPI()
	api.holdFirstGET = make(chan struct{})
	api.put(pom("a", "solid", "solid"))
	api.put(foregroundDeleting(pom("a", "waiting", "waiting")))
	api.put(pom("a", "renamed", "someone-else")) // the name now holds another fakeapi.Object
	for i := range 50 {                          // bystanders the LIST returns too
		api.put(pom("a", fmt.Sprintf("other-%02d", i), types.UID(fmt.Sprintf("other-%02d", i))))
	}
	f := newLaneFixture(api)

	owners := []struct {
		name string
		uid  types.UID
		want rules.OwnerState
	}{
		{"first", "first", rules.Dangling}, // the GET everyone queues behind
		{"solid", "solid", rules.Solid},
		{"waiting", "waiting", rules.Waiting},
		{"renamed", "renamed", rules.Dangling},
	}
	for i := range 6 {
		n := fmt.Sprintf("gone-%d", i)
		owners = append(owners, struct {
			name string
			uid  types.UID
			want rules.OwnerState
		}{n, types.UID(n), rules.Dangling})
	}
	states := make([]rules.OwnerState, len(owners))
	errs := make([]error, len(owners))
	var wg sync.WaitGroup
	resolveAsync(f, &wg, owners[0].name, owners[0].uid, &states[0], &errs[0])
	for api.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < len(owners); i++ {
		resolveAsync(f, &wg, owners[i].name, owners[i].uid, &states[i], &errs[i])
	}
	waitQueued(t, f, len(owners)-1)
	close(api.holdFirstGET)
	wg.Wait()

	for i, o := range owners {
		if errs[i] != nil || states[i] != o.want {
			t.Errorf("owner %s: %s, %v; want %s", o.name, states[i], errs[i], o.want)
		}
		c := rules.Coordinates{Kind: "ConfigMap", Namespace: "a", Name: o.name, UID: o.uid}
		if got := f.r.absent.Has(c); got != (o.want == rules.Dangling) {
			t.Errorf("owner %s: absent cached = %t", o.name, got)
		}
	}
	if g, l := api.gets.Load(), api.lists.Load(); g != 1 || l != 1 {
		t.Errorf("%d GETs and %d LISTs for %d owners, want 1 and 1", g, l, len(owners))
	}
}

// A lookup that registers while a LIST is in flight is not answered by it:
// its owner may have been created after the LIST's snapshot. Answering it
// from that LIST would call a live owner dangling and delete its dependent.
func TestLaneNeverAnswersFromAnEarlierLIST(t *testing.T) {
	api := newLaneAPI()
	api.holdFirstGET = make(chan struct{})
	api.holdLIST = make(chan struct{})
	f := newLaneFixture(api)

	var wg sync.WaitGroup
	states := make([]rules.OwnerState, 4)
	errs := make([]error, 4)
	resolveAsync(f, &wg, "first", "first", &states[0], &errs[0])
	for api.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	resolveAsync(f, &wg, "gone-1", "gone-1", &states[1], &errs[1])
	resolveAsync(f, &wg, "gone-2", "gone-2", &states[2], &errs[2])
	waitQueued(t, f, 2)
	close(api.holdFirstGET)
	select {
	case <-api.listSent:
	case <-time.After(10 * time.Second):
		t.Fatal("no LIST for a round of two")
	}
	// The LIST has read its snapshot. Now an owner is created, a dependent
	// of it is observed, and its lookup registers.
	api.put(pom("a", "late", "late"))
	resolveAsync(f, &wg, "late", "late", &states[3], &errs[3])
	waitQueued(t, f, 1)
	close(api.holdLIST)
	wg.Wait()

	want := []rules.OwnerState{rules.Dangling, rules.Dangling, rules.Dangling, rules.Solid}
	for i := range want {
		if errs[i] != nil || states[i] != want[i] {
			t.Errorf("lookup %d: %s, %v; want %s", i, states[i], errs[i], want[i])
		}
	}
	if f.r.absent.Has(rules.Coordinates{Kind: "ConfigMap", Namespace: "a", Name: "late", UID: "late"}) {
		t.Error("the late owner is cached as absent")
	}
}

// A LIST that would cost more pages than half the GETs it replaces stops
// early; owners it did not return are looked up one by one, and the lane
// remembers nothing from an incomplete LIST.
func TestLaneFallsBackToGETsWhenTheLISTIsLong(t *testing.T) {
	api := newLaneAPI()
	api.holdFirstGET = make(chan struct{})
	for i := range 3 * listPageSize {
		api.put(pom("a", fmt.Sprintf("bulk-%05d", i), types.UID(fmt.Sprintf("bulk-%05d", i))))
	}
	api.put(pom("a", "aaa-live", "aaa-live")) // sorts first: found on page one
	f := newLaneFixture(api)

	names := []string{"first", "aaa-live", "zzz-live", "gone-1", "gone-2"}
	api.put(pom("a", "zzz-live", "zzz-live")) // sorts last: beyond the budget
	want := []rules.OwnerState{rules.Dangling, rules.Solid, rules.Solid, rules.Dangling, rules.Dangling}
	states := make([]rules.OwnerState, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	resolveAsync(f, &wg, names[0], types.UID(names[0]), &states[0], &errs[0])
	for api.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < len(names); i++ {
		resolveAsync(f, &wg, names[i], types.UID(names[i]), &states[i], &errs[i])
	}
	waitQueued(t, f, len(names)-1)
	close(api.holdFirstGET)
	wg.Wait()
	for i := range names {
		if errs[i] != nil || states[i] != want[i] {
			t.Errorf("%s: %s, %v; want %s", names[i], states[i], errs[i], want[i])
		}
	}
	// A round of 4 may spend 2 pages; 3 owners were not on them.
	if g, l := api.gets.Load(), api.lists.Load(); l != 2 || g != 1+3 {
		t.Errorf("%d GETs and %d LIST pages, want 4 and 2", g, l)
	}
	if l := f.r.lanes[laneKey{gvr: fakeapi.ConfigMaps, namespace: "a"}]; l.size != 0 {
		t.Errorf("lane size %d after an incomplete LIST", l.size)
	}
}

// A LIST that fails (e.g. forbidden) costs the round nothing but the
// attempt: every owner gets its GET.
func TestLaneFallsBackToGETsWhenTheLISTFails(t *testing.T) {
	api := newLaneAPI()
	api.holdFirstGET = make(chan struct{})
	api.listErr = apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no list"))
	api.put(pom("a", "live", "live"))
	f := newLaneFixture(api)
	names := []string{"first", "live", "gone"}
	want := []rules.OwnerState{rules.Dangling, rules.Solid, rules.Dangling}
	states := make([]rules.OwnerState, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	resolveAsync(f, &wg, names[0], types.UID(names[0]), &states[0], &errs[0])
	for api.gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	resolveAsync(f, &wg, names[1], types.UID(names[1]), &states[1], &errs[1])
	resolveAsync(f, &wg, names[2], types.UID(names[2]), &states[2], &errs[2])
	waitQueued(t, f, 2)
	close(api.holdFirstGET)
	wg.Wait()
	for i := range names {
		if errs[i] != nil || states[i] != want[i] {
			t.Errorf("%s: %s, %v; want %s", names[i], states[i], errs[i], want[i])
		}
	}
	if g, l := api.gets.Load(), api.lists.Load(); g != 3 || l != 1 {
		t.Errorf("%d GETs and %d LISTs, want 3 and 1", g, l)
	}
}
