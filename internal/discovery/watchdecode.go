package discovery

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kgc-dev/kgc/internal/rules"
)

// A watch stream, decoded straight into what the graph keeps.
//
// A streaming list (a WATCH with sendInitialEvents, see watchList) brings
// every object of a resource as a watch event: at a million objects the
// metadata client's decoding of each event (labels, annotations and
// managedFields allocated, only for leanObject to drop them) would cost as
// much as it did for list pages before decodePage. watchDecoder reads the
// response body itself instead, as decodePage reads a page.
//
// The body is one of the apiserver's two watch encodings, recognised from
// its first byte:
//   - protobuf: frames, each a 4-byte big-endian length and a
//     metav1.WatchEvent (its type, and the object as a RawExtension: the
//     k8s prefix and a runtime.Unknown around a PartialObjectMetadata or
//     a Status);
//   - JSON: a sequence of {"type": ..., "object": ...} values.
//
// A length prefix starting with '{' would announce a frame of over 2 GB,
// so the two cannot be confused. The fast path decodes ADDED, MODIFIED and
// DELETED events of a PartialObjectMetadata (decodeObjectMeta: exactly what
// leanObject keeps); any other event (a BOOKMARK, whose annotations say
// whether it ends the initial events; an ERROR's Status) and anything the
// fast path cannot read is decoded by the standard decoders
// (decodeEventSlow), so an answer kgc has never seen is handled as the
// metadata client would, never guessed at.

// streamEvent is one decoded watch event.
type streamEvent struct {
	typ watch.EventType
	// obj: the object of an Added, Modified or Deleted event.
	obj rules.Object
	// rv: the resourceVersion the event carries (its object's, or the
	// bookmark's).
	rv string
	// initialEnd: a Bookmark annotated k8s.io/initial-events-end: the
	// initial events of a streaming list are complete, as of rv.
	initialEnd bool
	// err: an Error event's Status, as an API error.
	err error
}

// maxWatchFrame bounds one protobuf frame: an object's metadata is at
// most what etcd stores (1.5 MiB by default), so a larger length is a
// broken stream, not a reason to allocate.
const maxWatchFrame = 64 << 20

// watchDecoder reads the events of one watch response body.
type watchDecoder struct {
	r                *bufio.Reader
	apiVersion, kind string
	// format: 0 until the first byte is read, then formatProtobuf or
	// formatJSON.
	format int
	frame  []byte  // protobuf: the current frame, reused
	size   [4]byte // protobuf: the current frame's length
	json   *json.Decoder
}

const (
	formatProtobuf = 1 + iota
	formatJSON
)

// newWatchDecoder decodes body's events as objects of the monitor's
// resource (apiVersion, kind; as for leanObject).
func newWatchDecoder(body io.Reader, apiVersion, kind string) *watchDecoder {
	return &watchDecoder{r: bufio.NewReaderSize(body, 64<<10), apiVersion: apiVersion, kind: kind}
}

// next decodes the next event into ev (all of it overwritten). It returns
// io.EOF when the stream ended between events, and another error when it
// broke or holds what is not a watch event.
func (d *watchDecoder) next(ev *streamEvent) error {
	*ev = streamEvent{}
	if d.format == 0 {
		b, err := d.r.Peek(1)
		if err != nil {
			return err
		}
		if b[0] == '{' || b[0] == ' ' || b[0] == '\n' || b[0] == '\r' || b[0] == '\t' {
			d.format = formatJSON
			d.json = json.NewDecoder(d.r)
		} else {
			d.format = formatProtobuf
		}
	}
	if d.format == formatJSON {
		var je struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := d.json.Decode(&je); err != nil {
			if errors.Is(err, io.EOF) {
				return io.EOF
			}
			return fmt.Errorf("reading a watch event: %w", err)
		}
		return decodeEventSlow(je.Type, je.Object, d.apiVersion, d.kind, ev)
	}
	if _, err := io.ReadFull(d.r, d.size[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		return fmt.Errorf("reading a watch event: %w", err)
	}
	n := binary.BigEndian.Uint32(d.size[:])
	if n > maxWatchFrame {
		return fmt.Errorf("reading a watch event: a frame of %d bytes", n)
	}
	if cap(d.frame) < int(n) {
		d.frame = make([]byte, n)
	}
	d.frame = d.frame[:n]
	if _, err := io.ReadFull(d.r, d.frame); err != nil {
		return fmt.Errorf("reading a watch event: %w", io.ErrUnexpectedEOF)
	}
	if err := decodeEventFast(d.frame, d.apiVersion, d.kind, ev); err == nil {
		return nil
	}
	var we metav1.WatchEvent
	if err := we.Unmarshal(d.frame); err != nil {
		return fmt.Errorf("decoding a watch event: %w", err)
	}
	return decodeEventSlow(we.Type, we.Object.Raw, d.apiVersion, d.kind, ev)
}

// decodeEventFast reads a protobuf WatchEvent frame of an Added, Modified
// or Deleted PartialObjectMetadata; anything else is errNotFast.
func decodeEventFast(frame []byte, apiVersion, kind string, ev *streamEvent) error {
	var typ, object []byte
	var objectSet bool
	err := fields(frame, func(num int, wt int, v []byte, _ uint64) error {
		switch {
		case (num == 1 || num == 2) && wt != wireBytes:
			return errNotFast // the generated decoder rejects it
		case num == 1:
			typ = v
		case num == 2:
			object, objectSet = v, true
		}
		return nil
	})
	if err != nil || !objectSet {
		return errNotFast
	}
	switch string(typ) { // compared without allocating
	case string(watch.Added):
		ev.typ = watch.Added
	case string(watch.Modified):
		ev.typ = watch.Modified
	case string(watch.Deleted):
		ev.typ = watch.Deleted
	default:
		return errNotFast
	}
	var raw []byte
	if err := fields(object, func(num int, wt int, v []byte, _ uint64) error {
		switch {
		case num == 1 && wt != wireBytes:
			return errNotFast
		case num == 1:
			raw = v
		}
		return nil
	}); err != nil {
		return errNotFast
	}
	inner, err := unwrapUnknown(raw, "PartialObjectMetadata")
	if err != nil {
		return err
	}
	o, err := decodePartialObjectMetadata(inner, apiVersion, kind)
	if err != nil {
		return errNotFast
	}
	ev.obj, ev.rv = o, o.ResourceVersion
	return nil
}

// decodeEventSlow decodes an event's object with the metadata client's own
// decoder (protobuf or JSON, recognised from raw) and converts it as the
// monitor's watch does.
func decodeEventSlow(typ string, raw []byte, apiVersion, kind string, ev *streamEvent) error {
	*ev = streamEvent{typ: watch.EventType(typ)}
	switch ev.typ {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
	default:
		return fmt.Errorf("a watch event of unknown type %q", typ)
	}
	obj, _, err := metainternalversionscheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding a %s watch event: %w", typ, err)
	}
	if ev.typ == watch.Error {
		ev.err = apierrors.FromObject(obj)
		return nil
	}
	pom, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return fmt.Errorf("a %s watch event of a %T, not a PartialObjectMetadata", typ, obj)
	}
	ev.rv = pom.ResourceVersion
	if ev.typ == watch.Bookmark {
		ev.initialEnd = pom.Annotations[metav1.InitialEventsAnnotationKey] == "true"
		return nil
	}
	ev.obj = leanObject(pom, apiVersion, kind)
	return nil
}

// unwrapUnknown returns the raw message of a protobuf response body (the
// k8s prefix and a runtime.Unknown) whose kind is want; errNotFast for
// anything else.
func unwrapUnknown(body []byte, want string) ([]byte, error) {
	if !bytes.HasPrefix(body, protobufPrefix) {
		return nil, errNotFast
	}
	var raw []byte
	var rawSet bool
	var typeKind []byte
	err := fields(body[len(protobufPrefix):], func(num int, wt int, v []byte, _ uint64) error {
		switch {
		case num == 1 && wt == wireBytes: // typeMeta
			return fields(v, func(num int, wt int, v []byte, _ uint64) error {
				if num == 2 && wt == wireBytes {
					typeKind = v
				}
				return nil
			})
		case num == 2 && wt == wireBytes: // raw
			raw, rawSet = v, true
		case num == 3 && wt == wireBytes && len(v) > 0: // contentEncoding: none is ever set
			return errNotFast
		}
		return nil
	})
	if err != nil || !rawSet || string(typeKind) != want {
		return nil, errNotFast
	}
	return raw, nil
}
