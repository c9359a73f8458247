package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

func pageSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KGC_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set KGC_TEST_SEED to replay)", seed)
	return seed
}

// randomPage builds a page with what real objects carry (labels,
// annotations, managedFields, owner references with every *bool state,
// finalizers, deletion timestamps) and what they rarely do (empty
// strings, many references, a zero deletion timestamp).
func randomPage(rng *rand.Rand, n int) *metav1.PartialObjectMetadataList {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	optBool := func() *bool {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			b := true
			return &b
		}
		b := false
		return &b
	}
	l := &metav1.PartialObjectMetadataList{}
	l.ResourceVersion = strconv.Itoa(rng.IntN(1 << 30))
	if rng.IntN(2) == 0 {
		l.Continue = fmt.Sprintf("token-%d", rng.Int())
		rem := rng.Int64N(1 << 40)
		l.RemainingItemCount = &rem
	}
	for i := range n {
		m := metav1.ObjectMeta{
			Name:              fmt.Sprintf("obj-%d-%d", i, rng.IntN(1000)),
			Namespace:         pick("", "default", "kube-system", fmt.Sprintf("ns-%d", rng.IntN(5))),
			UID:               types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", rng.Uint32(), rng.Int64N(1<<48))),
			ResourceVersion:   strconv.Itoa(rng.IntN(1 << 30)),
			Generation:        rng.Int64N(10),
			GenerateName:      pick("", "gen-"),
			Labels:            map[string]string{"app": pick("a", "b"), "x": strconv.Itoa(i)},
			Annotations:       map[string]string{"note": pick("", "some text")},
			CreationTimestamp: metav1.Unix(rng.Int64N(1<<31), 0),
		}
		if rng.IntN(2) == 0 {
			m.ManagedFields = []metav1.ManagedFieldsEntry{{
				Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}}}`)},
			}}
		}
		for range rng.IntN(4) {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{
				APIVersion: pick("v1", "apps/v1", "example.com/v1beta1"), Kind: pick("ConfigMap", "ReplicaSet", "Widget"),
				Name: fmt.Sprintf("owner-%d", rng.IntN(100)), UID: types.UID(fmt.Sprintf("uid-%d", rng.IntN(100))),
				Controller: optBool(), BlockOwnerDeletion: optBool(),
			})
		}
		for range rng.IntN(3) {
			m.Finalizers = append(m.Finalizers, pick("orphan", "foregroundDeletion", "example.com/f"))
		}
		switch rng.IntN(4) {
		case 0:
			ts := metav1.Unix(rng.Int64N(1<<31), 0)
			m.DeletionTimestamp = &ts
			g := rng.Int64N(30)
			m.DeletionGracePeriodSeconds = &g
		case 1:
			m.DeletionTimestamp = &metav1.Time{} // encoded empty: still deleting
		}
		l.Items = append(l.Items, metav1.PartialObjectMetadata{ObjectMeta: m})
	}
	return l
}

// protobufBody encodes l as the apiserver answers a protobuf LIST: the k8s
// prefix and a runtime.Unknown around the list.
func protobufBody(t testing.TB, l *metav1.PartialObjectMetadataList) []byte {
	raw, err := l.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	u := runtime.Unknown{
		TypeMeta:    runtime.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
		Raw:         raw,
		ContentType: contentTypeProtobuf,
	}
	env, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(bytes.Clone(protobufPrefix), env...)
}

// TestDecodePageMatchesMetadataClient: on random pages the fast decoder
// returns exactly what the metadata client's decoding and leanObject
// return.
func TestDecodePageMatchesMetadataClient(t *testing.T) {
	rng := rand.New(rand.NewPCG(pageSeed(t), 1))
	for round := range 200 {
		l := randomPage(rng, rng.IntN(40))
		body := protobufBody(t, l)
		var fast, slow listPage
		if err := decodePageFast(body, "v1", "ConfigMap", &fast); err != nil {
			t.Fatalf("round %d: fast: %v", round, err)
		}
		if err := decodePageSlow(body, "v1", "ConfigMap", &slow); err != nil {
			t.Fatalf("round %d: slow: %v", round, err)
		}
		if len(fast.items) == 0 && len(slow.items) == 0 {
			fast.items, slow.items = nil, nil
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("round %d: fast decoding differs:\nfast %+v\nslow %+v", round, fast, slow)
		}
		// The same page decoded into a reused listPage.
		if err := decodePage(body, "v1", "ConfigMap", &fast); err != nil || len(fast.items) != len(l.Items) {
			t.Fatalf("round %d: reused page: %v, %d items", round, err, len(fast.items))
		}
	}
}

// TestDecodePageJSON: a JSON page (an API server that does not speak
// protobuf) is decoded by the standard decoder.
func TestDecodePageJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(pageSeed(t), 2))
	l := randomPage(rng, 10)
	for i := range l.Items {
		if ts := l.Items[i].DeletionTimestamp; ts != nil && ts.IsZero() {
			l.Items[i].DeletionTimestamp = nil // JSON has no empty timestamp: null
		}
	}
	l.Kind, l.APIVersion = "PartialObjectMetadataList", "meta.k8s.io/v1"
	body, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var got listPage
	if err := decodePage(body, "v1", "ConfigMap", &got); err != nil {
		t.Fatal(err)
	}
	var want listPage
	if err := decodePageSlow(protobufBody(t, l), "v1", "ConfigMap", &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("JSON page:\ngot  %+v\nwant %+v", got, want)
	}
}

// TestDecodePageMalformed: a truncated or damaged page is an error (the
// list is retried), never a page of guessed objects; bytes the fast
// decoder does not read but the standard one accepts are decoded by the
// standard one.
func TestDecodePageMalformed(t *testing.T) {
	rng := rand.New(rand.NewPCG(pageSeed(t), 3))
	body := protobufBody(t, randomPage(rng, 5))
	for cut := len(protobufPrefix); cut < len(body); cut += 7 {
		var fast, slow listPage
		errFast := decodePage(body[:cut], "v1", "ConfigMap", &fast)
		errSlow := decodePageSlow(body[:cut], "v1", "ConfigMap", &slow)
		if (errFast == nil) != (errSlow == nil) {
			t.Fatalf("cut at %d: decodePage error %v, standard decoder's %v", cut, errFast, errSlow)
		}
		if errFast == nil && !reflect.DeepEqual(fast, slow) {
			t.Fatalf("cut at %d: pages differ", cut)
		}
	}
	// Another kind in the envelope.
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "Status"}, Raw: []byte{}}
	env, _ := u.Marshal()
	var p listPage
	if err := decodePage(append(bytes.Clone(protobufPrefix), env...), "v1", "ConfigMap", &p); err == nil {
		t.Error("a Status in the envelope decoded as a page")
	}
	if err := decodePage([]byte("<html>"), "v1", "ConfigMap", &p); err == nil {
		t.Error("an HTML body decoded as a page")
	}
}

// TestDecodePageAllocations: the fast decoder allocates only what is kept
// (name, UID and resourceVersion; a dependent's reference slice, owner
// name and owner UID), nothing for labels, annotations or managedFields.
func TestDecodePageAllocations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 4))
	l := randomPage(rng, 100)
	for i := range l.Items {
		m := &l.Items[i].ObjectMeta
		m.OwnerReferences = m.OwnerReferences[:min(len(m.OwnerReferences), 1)]
		m.Finalizers, m.DeletionTimestamp, m.DeletionGracePeriodSeconds = nil, nil, nil
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}}
	}
	body := protobufBody(t, l)
	var page listPage
	if err := decodePageFast(body, "v1", "ConfigMap", &page); err != nil { // interns, sizes items
		t.Fatal(err)
	}
	perObject := testing.AllocsPerRun(20, func() {
		if err := decodePageFast(body, "v1", "ConfigMap", &page); err != nil {
			t.Fatal(err)
		}
	}) / float64(len(l.Items))
	// 3 per object, 3 per reference (at most one each here), plus the
	// page's resourceVersion and continue token.
	if perObject > 6.1 {
		t.Errorf("%.2f allocations per object, want at most 6", perObject)
	}
	t.Logf("%.2f allocations per object", perObject)
}

// TestRESTPageLister: the lister asks for the page as the metadata client
// does (path, Accept, limit and continue), returns the body, and a 404 is
// NotFound.
func TestRESTPageLister(t *testing.T) {
	body := protobufBody(t, randomPage(rand.New(rand.NewPCG(1, 5)), 3))
	var gotPath, gotAccept, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAccept, gotQuery = r.URL.Path, r.Header.Get("Accept"), r.URL.RawQuery
		if r.URL.Path == "/apis/example.com/v1/gone" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
			return
		}
		w.Header().Set("Content-Type", contentTypeProtobuf)
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	pl, err := NewRESTPageLister(&rest.Config{Host: srv.URL}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.WriteString("left over")
	ctx := context.Background()
	if err := pl.ListPage(ctx, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, metav1.ListOptions{Limit: 500, Continue: "abc"}, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), body) {
		t.Error("ListPage did not return the body")
	}
	if gotPath != "/api/v1/configmaps" || gotAccept != listAccept || gotQuery != "continue=abc&limit=500" {
		t.Errorf("request %s ? %s (Accept %q)", gotPath, gotQuery, gotAccept)
	}
	if err := pl.ListPage(ctx, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, metav1.ListOptions{Limit: 5}, &buf); err != nil || gotPath != "/apis/apps/v1/deployments" {
		t.Errorf("group resource: %v, path %s", err, gotPath)
	}
	err = pl.ListPage(ctx, schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gone"}, metav1.ListOptions{}, &buf)
	if !apierrors.IsNotFound(err) {
		t.Errorf("404: %v, want NotFound", err)
	}
}
