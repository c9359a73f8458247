package safety

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	metadatafake "k8s.io/client-go/metadata/fake"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// fakeEnv is a Watcher over a fake metadata client whose watch has started.
type fakeEnv struct {
	client *metadatafake.FakeMetadataClient
	w      *Watcher
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	client := metadatafake.NewSimpleMetadataClient(scheme)
	w, err := Start(t.Context(), client, []schema.GroupVersionResource{configMaps})
	if err != nil {
		t.Fatal(err)
	}
	// The fake's watch does not replay what happened after the list: wait
	// until it has started.
	err = wait.PollUntilContextTimeout(t.Context(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		for _, a := range client.Actions() {
			if a.GetVerb() == "watch" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("the informer never watched")
	}
	return &fakeEnv{client: client, w: w}
}

func (e *fakeEnv) create(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	if err := e.createErr(t.Context(), ns, name, labels); err != nil {
		t.Fatal(err)
	}
}

func (e *fakeEnv) createErr(ctx context.Context, ns, name string, labels map[string]string) error {
	_, err := e.client.Resource(configMaps).Namespace(ns).(metadatafake.MetadataClient).CreateFake(&metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("uid-" + name)},
	}, metav1.CreateOptions{})
	return err
}

func (e *fakeEnv) delete(t *testing.T, ns, name string) {
	t.Helper()
	if err := e.client.Resource(configMaps).Namespace(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// marker creates the barrier's marker in ns, for test ns.
func (e *fakeEnv) marker(ns string) MarkerFunc {
	return func(ctx context.Context, _ schema.GroupVersionResource, token string) error {
		return e.createErr(ctx, ns, "marker-"+token, map[string]string{LabelTest: ns, LabelMarker: token})
	}
}

func TestWatcherChargesProtectedDeletionsToTheirTest(t *testing.T) {
	e := newFakeEnv(t)
	e.create(t, "t1", "kept", map[string]string{LabelTest: "t1", LabelProtected: "true"})
	e.create(t, "t1", "guarded", map[string]string{LabelTest: "t1", LabelProtected: "true"})
	e.create(t, "t1", "garbage", map[string]string{LabelTest: "t1"})
	e.create(t, "t2", "other", map[string]string{LabelTest: "t2", LabelProtected: "true"})
	e.delete(t, "t1", "guarded")
	e.delete(t, "t1", "garbage")
	e.delete(t, "t2", "other")

	problems := e.w.Check(t.Context(), "t1", 5*time.Second, e.marker("t1"))
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "protected configmaps t1/guarded (uid uid-guarded) deleted at ") {
		t.Errorf("t1's problems = %q, want the deletion of guarded only", problems)
	}
	// t1's account is closed: its cleanup deletes what it protected.
	e.delete(t, "t1", "kept")
	if problems := e.w.Check(t.Context(), "t1", 5*time.Second, e.marker("t1")); len(problems) != 1 {
		t.Errorf("after the check, t1's problems = %q, want still the one", problems)
	}
	if problems := e.w.Check(t.Context(), "t2", 5*time.Second, e.marker("t2")); len(problems) != 1 || !strings.Contains(problems[0], "t2/other") {
		t.Errorf("t2's problems = %q", problems)
	}
}

func TestSyncReportsAFailedBarrier(t *testing.T) {
	e := newFakeEnv(t)
	boom := errors.New("boom")
	err := e.w.stream.Sync(t.Context(), time.Second, func(context.Context, schema.GroupVersionResource, string) error { return boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "creating the configmaps marker") {
		t.Errorf("Sync with a failing marker = %v", err)
	}
	// A marker that never comes back (it lacks the watched label).
	err = e.w.stream.Sync(t.Context(), 100*time.Millisecond, func(ctx context.Context, _ schema.GroupVersionResource, token string) error {
		return e.createErr(ctx, "t1", "lost-"+token, map[string]string{LabelMarker: "other"})
	})
	if err == nil || !strings.Contains(err.Error(), "did not return their markers within 100ms") {
		t.Errorf("Sync with a lost marker = %v", err)
	}
}

func TestDescribe(t *testing.T) {
	if got := Describe(nil); got != "<absent>" {
		t.Errorf("Describe(nil) = %q", got)
	}
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	got := Describe(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		DeletionTimestamp: &now, Finalizers: []string{"foregroundDeletion"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "u"}},
	}})
	want := `{"deletionTimestamp":"2026-01-02T03:04:05Z","finalizers":["foregroundDeletion"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o","uid":"u"}]}`
	if got != want {
		t.Errorf("Describe = %s, want %s", got, want)
	}
}
