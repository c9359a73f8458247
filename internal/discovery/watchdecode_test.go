package discovery

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// envelope encodes a protobuf message as the apiserver encodes a watch
// event's object: the k8s prefix and a runtime.Unknown of the kind.
func envelope(t testing.TB, apiVersion, kind string, raw []byte, contentEncoding string) []byte {
	t.Helper()
	u := kruntime.Unknown{
		TypeMeta:        kruntime.TypeMeta{APIVersion: apiVersion, Kind: kind},
		Raw:             raw,
		ContentType:     contentTypeProtobuf,
		ContentEncoding: contentEncoding,
	}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(bytes.Clone(protobufPrefix), b...)
}

// pomObject is pom as a protobuf watch event's object.
func pomObject(t testing.TB, pom *metav1.PartialObjectMetadata) []byte {
	t.Helper()
	raw, err := pom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return envelope(t, "meta.k8s.io/v1", "PartialObjectMetadata", raw, "")
}

// statusObject is st as a protobuf watch event's object (an ERROR's).
func statusObject(t testing.TB, st *metav1.Status) []byte {
	t.Helper()
	raw, err := st.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return envelope(t, "v1", "Status", raw, "")
}

// bookmark is a BOOKMARK's object at rv, annotated as the end of the
// initial events if end.
func bookmark(rv string, end bool) *metav1.PartialObjectMetadata {
	b := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
	if end {
		b.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
	}
	return b
}

// expired is the Status of a watch whose resourceVersion was compacted.
func expired() *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired,
		Message: "too old resource version: 1 (2)",
	}
}

// frame is one protobuf watch frame: a 4-byte big-endian length and a
// metav1.WatchEvent, encoded by its generated encoder.
func frame(t testing.TB, typ watch.EventType, object []byte) []byte {
	t.Helper()
	we := metav1.WatchEvent{Type: string(typ), Object: kruntime.RawExtension{Raw: object}}
	b, err := we.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// jsonEvent is one JSON watch event ({"type","object"}, newline ended)
// with obj's JSON as its object (obj carries its kind and apiVersion).
func jsonEvent(t testing.TB, typ watch.EventType, obj any) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(metav1.WatchEvent{Type: string(typ), Object: kruntime.RawExtension{Raw: raw}})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// randomStream is a stream of random object events with bookmarks (with
// and without the end annotation) among them, ending with an ERROR 410,
// and what watchDecoder.next must return for each event but the last
// (want; the ERROR is checked apart). encode turns one event into bytes.
func randomStream(rng *rand.Rand, n int, encode func(typ watch.EventType, pom *metav1.PartialObjectMetadata) []byte) (body []byte, want []streamEvent) {
	types := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}
	for _, item := range randomPage(rng, n).Items {
		if rng.IntN(5) == 0 {
			end := rng.IntN(2) == 0
			rv := fmt.Sprint(rng.IntN(1 << 30))
			body = append(body, encode(watch.Bookmark, bookmark(rv, end))...)
			want = append(want, streamEvent{typ: watch.Bookmark, rv: rv, initialEnd: end})
		}
		typ := types[rng.IntN(len(types))]
		body = append(body, encode(typ, &item)...)
		want = append(want, streamEvent{typ: typ, obj: leanObject(&item, "v1", "ConfigMap"), rv: item.ResourceVersion})
	}
	return body, want
}

// checkStream decodes body with a watchDecoder and checks that it yields
// want, then an ERROR event that mustRelist, then io.EOF.
func checkStream(t *testing.T, body []byte, want []streamEvent) {
	t.Helper()
	d := newWatchDecoder(bytes.NewReader(body), "v1", "ConfigMap")
	var ev streamEvent
	for i, w := range want {
		if err := d.next(&ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !reflect.DeepEqual(ev, w) {
			t.Fatalf("event %d:\ngot  %+v\nwant %+v", i, ev, w)
		}
	}
	if err := d.next(&ev); err != nil || ev.typ != watch.Error || !mustRelist(ev.err) || !apierrors.IsResourceExpired(ev.err) {
		t.Fatalf("ERROR event: %v, %+v; want an Expired error that makes the monitor relist", err, ev)
	}
	if err := d.next(&ev); err != io.EOF {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}
}

// TestWatchDecoderProtobuf: on random events encoded by the generated
// encoders as kube-apiserver sends them, the decoder yields each object
// exactly as leanObject converts it, with the event's type and
// resourceVersion; bookmarks with their end annotation or without; an
// ERROR's Status as an API error; io.EOF at the end.
func TestWatchDecoderProtobuf(t *testing.T) {
	rng := rand.New(rand.NewPCG(pageSeed(t), 20))
	encode := func(typ watch.EventType, pom *metav1.PartialObjectMetadata) []byte {
		return frame(t, typ, pomObject(t, pom))
	}
	for round := range 50 {
		body, want := randomStream(rng, rng.IntN(40), encode)
		body = append(body, frame(t, watch.Error, statusObject(t, expired()))...)
		t.Run(fmt.Sprint(round), func(t *testing.T) { checkStream(t, body, want) })
	}
}

// TestWatchDecoderJSON: the same events as a JSON stream (an apiserver
// that does not speak protobuf, or a JSON-only aggregated API).
func TestWatchDecoderJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(pageSeed(t), 21))
	encode := func(typ watch.EventType, pom *metav1.PartialObjectMetadata) []byte {
		pom.Kind, pom.APIVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
		if ts := pom.DeletionTimestamp; ts != nil && ts.IsZero() {
			pom.DeletionTimestamp = nil // JSON has no empty timestamp: null
		}
		return jsonEvent(t, typ, pom)
	}
	for round := range 50 {
		body, want := randomStream(rng, rng.IntN(40), encode)
		body = append(body, jsonEvent(t, watch.Error, expired())...)
		if round%2 == 1 {
			body = append([]byte("\n "), body...) // whitespace first: still JSON
		}
		t.Run(fmt.Sprint(round), func(t *testing.T) { checkStream(t, body, want) })
	}
}

// TestWatchDecoderSlowPath: what the fast path does not read goes to the
// standard decoders, and the decoder returns what they return: an object
// in JSON inside a protobuf frame is decoded; a Status in an ADDED event
// is an error, not an empty object; an object with a content encoding is
// the standard decoder's to judge.
func TestWatchDecoderSlowPath(t *testing.T) {
	pom := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "x", UID: "x-uid", ResourceVersion: "5", Finalizers: []string{"f"}},
	}
	pomJSON, err := json.Marshal(pom)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := pom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		typ     watch.EventType
		object  []byte
		wantErr bool
	}{
		{"json object in a protobuf frame", watch.Added, pomJSON, false},
		{"status in an ADDED event", watch.Added, statusObject(t, expired()), true},
		{"a content encoding", watch.Added, envelope(t, "meta.k8s.io/v1", "PartialObjectMetadata", raw, "gzip"), false},
		{"another kind in the envelope", watch.Added, envelope(t, "meta.k8s.io/v1", "Table", raw, ""), true},
		{"an unknown event type", "CHANGED", pomObject(t, pom), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := frame(t, tc.typ, tc.object)
			var fast streamEvent
			if err := decodeEventFast(f[4:], "v1", "ConfigMap", &fast); !errors.Is(err, errNotFast) {
				t.Fatalf("fast path: %v, %+v; want errNotFast", err, fast)
			}
			var slow, got streamEvent
			errSlow := decodeEventSlow(string(tc.typ), tc.object, "v1", "ConfigMap", &slow)
			errGot := newWatchDecoder(bytes.NewReader(f), "v1", "ConfigMap").next(&got)
			if (errGot == nil) != (errSlow == nil) || (errGot != nil && errGot.Error() != errSlow.Error()) || !reflect.DeepEqual(got, slow) {
				t.Fatalf("decoder: %v, %+v; the standard decoders: %v, %+v", errGot, got, errSlow, slow)
			}
			if tc.wantErr != (errGot != nil) {
				t.Fatalf("error %v, want an error: %v", errGot, tc.wantErr)
			}
			if errGot != nil && errors.Is(errGot, io.EOF) {
				t.Fatalf("a bad event is io.EOF (a stream that ended): %v", errGot)
			}
			if errGot == nil && !reflect.DeepEqual(got, streamEvent{typ: tc.typ, obj: leanObject(pom, "v1", "ConfigMap"), rv: "5"}) {
				t.Fatalf("event %+v, want x at 5", got)
			}
		})
	}
}

// TestWatchDecoderTruncated: a stream cut anywhere yields the events
// before the cut, then io.EOF if the cut falls between events and an
// error that is not io.EOF otherwise (a broken stream is not one that
// ended).
func TestWatchDecoderTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(pageSeed(t), 22))
	for _, format := range []string{"protobuf", "json"} {
		var body []byte
		var want []streamEvent
		ends := map[int]int{0: 0} // cut offsets between events: events before
		for i, item := range randomPage(rng, 4).Items {
			if format == "protobuf" {
				body = append(body, frame(t, watch.Added, pomObject(t, &item))...)
			} else {
				item.Kind, item.APIVersion = "PartialObjectMetadata", "meta.k8s.io/v1"
				if ts := item.DeletionTimestamp; ts != nil && ts.IsZero() {
					item.DeletionTimestamp = nil
				}
				body = append(body, jsonEvent(t, watch.Added, &item)...)
				ends[len(body)-1] = i + 1 // before the newline
			}
			ends[len(body)] = i + 1
			want = append(want, streamEvent{typ: watch.Added, obj: leanObject(&item, "v1", "ConfigMap"), rv: item.ResourceVersion})
		}
		for cut := 0; cut <= len(body); cut++ {
			d := newWatchDecoder(bytes.NewReader(body[:cut]), "v1", "ConfigMap")
			var ev streamEvent
			var err error
			n := 0
			for ; ; n++ {
				if err = d.next(&ev); err != nil {
					break
				}
				if n >= len(want) || !reflect.DeepEqual(ev, want[n]) {
					t.Fatalf("%s cut at %d: event %d = %+v", format, cut, n, ev)
				}
			}
			if before, between := ends[cut]; between {
				if err != io.EOF || n != before {
					t.Fatalf("%s cut at %d (between events): %d events, then %v; want %d, then io.EOF", format, cut, n, err, before)
				}
			} else if errors.Is(err, io.EOF) {
				t.Fatalf("%s cut at %d (inside an event): %v, want an error that is not io.EOF", format, cut, err)
			}
		}
	}
}

// TestWatchDecoderOversizeFrame: a frame length beyond maxWatchFrame is
// an error, and nothing of that size is allocated.
func TestWatchDecoderOversizeFrame(t *testing.T) {
	for _, n := range []uint32{maxWatchFrame + 1, 0x7fffffff, 0xffffffff} {
		body := binary.BigEndian.AppendUint32(nil, n)
		body = append(body, make([]byte, 100)...)
		d := newWatchDecoder(bytes.NewReader(body), "v1", "ConfigMap")
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var ev streamEvent
		err := d.next(&ev)
		runtime.ReadMemStats(&after)
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("length %d: %v, want an error", n, err)
		}
		if cap(d.frame) != 0 || after.TotalAlloc-before.TotalAlloc > 1<<20 {
			t.Errorf("length %d: frame buffer of %d bytes, %d bytes allocated", n, cap(d.frame), after.TotalAlloc-before.TotalAlloc)
		}
	}
	// The largest frame allowed is read (and only then found short).
	d := newWatchDecoder(bytes.NewReader(binary.BigEndian.AppendUint32(nil, maxWatchFrame)), "v1", "ConfigMap")
	var ev streamEvent
	if err := d.next(&ev); err == nil || errors.Is(err, io.EOF) || cap(d.frame) != maxWatchFrame {
		t.Errorf("a frame of maxWatchFrame cut short: %v, buffer %d", err, cap(d.frame))
	}
}

// TestWatchDecoderAllocations: an ADDED event costs the decoder about what
// is kept, as a list page's object does (name, UID and resourceVersion; a
// dependent's reference slice, owner name and owner UID): the frame buffer
// is reused, labels, annotations and managedFields are skipped. Two more
// are the decoder's own (measured 7.11 per event, against 5.26 per object
// for decodePageFast): the event type converted from its bytes
// (watch.EventType(typ) in decodeEventFast) and the frame's 4-byte length
// buffer, which escapes through io.ReadFull.
func TestWatchDecoderAllocations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 23))
	l := randomPage(rng, 100)
	var body []byte
	for i := range l.Items {
		m := &l.Items[i].ObjectMeta
		m.OwnerReferences = m.OwnerReferences[:min(len(m.OwnerReferences), 1)]
		m.Finalizers, m.DeletionTimestamp, m.DeletionGracePeriodSeconds = nil, nil, nil
		m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}}
		body = append(body, frame(t, watch.Added, pomObject(t, &l.Items[i]))...)
	}
	r := bytes.NewReader(body)
	d := newWatchDecoder(r, "v1", "ConfigMap")
	var ev streamEvent
	decodeAll := func() {
		r.Reset(body)
		d.r.Reset(r)
		for range l.Items {
			if err := d.next(&ev); err != nil || ev.typ != watch.Added {
				t.Fatalf("%v, %+v", err, ev)
			}
		}
		if err := d.next(&ev); err != io.EOF {
			t.Fatalf("at the end: %v", err)
		}
	}
	decodeAll() // interns, sizes the frame buffer
	perEvent := testing.AllocsPerRun(20, decodeAll) / float64(len(l.Items))
	if perEvent > 5.5 {
		t.Errorf("%.2f allocations per ADDED event, want at most 5.5 (a page's object costs 5.3)", perEvent)
	}
	t.Logf("%.2f allocations per ADDED event", perEvent)
}
