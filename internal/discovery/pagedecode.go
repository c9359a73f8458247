package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/rules"
)

// A list page, decoded straight into what the graph keeps.
//
// The metadata client decodes each LIST page into a
// PartialObjectMetadataList: every object's labels, annotations and
// managedFields (most of the bytes of an object's metadata: a
// managedFields entry per writer, each with its raw field set) are
// allocated, only for leanObject to drop them at once. At 100k objects
// that decoding was a third of kgc's start-up CPU and most of its
// allocations, and the Go GC's work on them another large share.
//
// decodePage reads the protobuf page itself instead, and keeps exactly
// what leanObject keeps: it allocates the strings that are kept (name,
// UID, resourceVersion, and each owner reference's name and UID), looks
// the repeating ones up in the interner without allocating (namespace,
// owner apiVersion and kind, finalizers), and skips everything else
// without looking at it. The page's body is read into a buffer the
// monitor reuses from page to page.
//
// The fast path is an optimization only: its output equals leanObject's
// on the page the metadata client would have decoded (TestDecodePage*
// compare them on random pages), and any page it cannot read (not
// protobuf, an unexpected envelope, a wire type it does not expect) is
// decoded by the standard decoders instead (decodePageSlow), so an answer
// kgc has never seen is handled as before, never guessed at.

// listPage is one decoded page.
type listPage struct {
	items             []rules.Object
	resourceVersion   string
	continueToken     string
	remainingItemsSet bool
	remainingItems    int64
}

// protobufPrefix starts every protobuf-encoded Kubernetes response.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

const contentTypeProtobuf = "application/vnd.kubernetes.protobuf"

// errNotFast: the fast decoder does not read this page; the slow one will.
var errNotFast = errors.New("page not readable by the fast decoder")

// decodePage decodes a LIST response body into page, reusing page.items.
// apiVersion and kind are the monitor's (as for leanObject).
func decodePage(body []byte, apiVersion, kind string, page *listPage) error {
	if bytes.HasPrefix(body, protobufPrefix) {
		if err := decodePageFast(body, apiVersion, kind, page); err == nil {
			return nil
		}
	}
	return decodePageSlow(body, apiVersion, kind, page)
}

// decodePageSlow decodes body with the metadata client's own decoder
// (protobuf or JSON, recognised from the body), and converts each item
// with leanObject: exactly what listing through the metadata client does.
func decodePageSlow(body []byte, apiVersion, kind string, page *listPage) error {
	obj, _, err := metainternalversionscheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		return fmt.Errorf("decoding a list page: %w", err)
	}
	l, ok := obj.(*metav1.PartialObjectMetadataList)
	if !ok {
		return fmt.Errorf("list page is a %T, not a PartialObjectMetadataList", obj)
	}
	page.reset()
	for i := range l.Items {
		page.items = append(page.items, leanObject(&l.Items[i], apiVersion, kind))
	}
	page.resourceVersion, page.continueToken = l.ResourceVersion, l.Continue
	if l.RemainingItemCount != nil {
		page.remainingItemsSet, page.remainingItems = true, *l.RemainingItemCount
	}
	return nil
}

func (p *listPage) reset() {
	clear(p.items) // drop the last page's strings
	p.items = p.items[:0]
	*p = listPage{items: p.items}
}

// decodePageFast reads a protobuf PartialObjectMetadataList in its
// envelope (a runtime.Unknown after the k8s prefix).
func decodePageFast(body []byte, apiVersion, kind string, page *listPage) error {
	raw, err := unwrapUnknown(body, "PartialObjectMetadataList")
	if err != nil {
		return err
	}
	page.reset()
	err = fields(raw, func(num int, wt int, v []byte, _ uint64) error {
		switch {
		case (num == 1 || num == 2) && wt != wireBytes:
			return errNotFast // the generated decoder rejects it
		case num == 1 && wt == wireBytes: // ListMeta
			return fields(v, func(num int, wt int, v []byte, x uint64) error {
				switch {
				case (num == 2 || num == 3) && wt != wireBytes, num == 4 && wt != wireVarint:
					return errNotFast // the generated decoder rejects it
				case num == 2 && wt == wireBytes:
					page.resourceVersion = string(v)
				case num == 3 && wt == wireBytes:
					page.continueToken = string(v)
				case num == 4 && wt == wireVarint:
					page.remainingItemsSet, page.remainingItems = true, int64(x)
				}
				return nil
			})
		case num == 2 && wt == wireBytes: // items
			o, err := decodePartialObjectMetadata(v, apiVersion, kind)
			if err != nil {
				return err
			}
			page.items = append(page.items, o)
		}
		return nil
	})
	if err != nil {
		page.reset()
		return err
	}
	return nil
}

// decodePartialObjectMetadata reads a PartialObjectMetadata of the
// monitor's resource (apiVersion, kind), as leanObject converts it.
func decodePartialObjectMetadata(b []byte, apiVersion, kind string) (rules.Object, error) {
	o := rules.Object{Identity: rules.Identity{APIVersion: apiVersion, Kind: kind}}
	err := fields(b, func(num int, wt int, v []byte, _ uint64) error {
		switch {
		case num == 1 && wt != wireBytes:
			return errNotFast // the generated decoder rejects it
		case num == 1: // metadata
			return decodeObjectMeta(v, &o)
		}
		return nil
	})
	return o, err
}

// decodeObjectMeta reads an ObjectMeta into o, as leanObject converts it.
// Fields that occur again overwrite (strings, the deletion timestamp) or
// append (owner references, finalizers), as the generated decoder does.
func decodeObjectMeta(b []byte, o *rules.Object) error {
	return fields(b, func(num int, wt int, v []byte, _ uint64) error {
		switch num {
		case 1, 3, 5, 6, 9, 13, 14:
			if wt != wireBytes {
				return errNotFast // the generated decoder rejects it
			}
		default:
			return nil
		}
		switch num {
		case 1:
			o.Identity.Name = string(v)
		case 3:
			o.Identity.Namespace = interned.getBytes(v)
		case 5:
			o.Identity.UID = types.UID(v)
		case 6:
			o.ResourceVersion = string(v)
		case 9: // deletionTimestamp: present means deleting, even if empty
			t, err := decodeTime(v)
			if err != nil {
				return err
			}
			o.Deleting = true
			o.DeletionTimestamp = &t
		case 13:
			var r metav1.OwnerReference
			if err := decodeOwnerRef(v, &r); err != nil {
				return err
			}
			o.OwnerReferences = append(o.OwnerReferences, r)
		case 14:
			o.Finalizers = append(o.Finalizers, interned.getBytes(v))
		}
		return nil
	})
}

// decodeTime reads a metav1.Time as its generated decoder does: seconds
// only, in the local zone; empty is the zero time.
func decodeTime(b []byte) (metav1.Time, error) {
	if len(b) == 0 {
		return metav1.Time{}, nil
	}
	var secs int64
	err := fields(b, func(num int, wt int, _ []byte, x uint64) error {
		switch {
		case (num == 1 || num == 2) && wt != wireVarint:
			return errNotFast // the generated decoder rejects it
		case num == 1:
			secs = int64(x)
		}
		return nil
	})
	if err != nil {
		return metav1.Time{}, err
	}
	return metav1.Time{Time: time.Unix(secs, 0).Local()}, nil
}

func decodeOwnerRef(b []byte, r *metav1.OwnerReference) error {
	return fields(b, func(num int, wt int, v []byte, x uint64) error {
		switch {
		case (num == 1 || num == 3 || num == 4 || num == 5) && wt != wireBytes,
			(num == 6 || num == 7) && wt != wireVarint:
			return errNotFast // the generated decoder rejects it
		case num == 5 && wt == wireBytes:
			r.APIVersion = interned.getBytes(v)
		case num == 1 && wt == wireBytes:
			r.Kind = interned.getBytes(v)
		case num == 3 && wt == wireBytes:
			r.Name = string(v)
		case num == 4 && wt == wireBytes:
			r.UID = types.UID(v)
		case num == 6 && wt == wireVarint:
			r.Controller = sharedBool(boolPtr(x != 0))
		case num == 7 && wt == wireVarint:
			r.BlockOwnerDeletion = sharedBool(boolPtr(x != 0))
		}
		return nil
	})
}

// boolPtr is only ever passed to sharedBool, which does not keep it (so
// it stays on the stack).
func boolPtr(b bool) *bool { return &b }

// Protobuf wire types.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var errWire = errors.New("malformed protobuf")

// fields calls f for each field of the protobuf message b: its number,
// wire type, and value (v for length-delimited fields, x for varints).
// Groups (wire types 3 and 4, which no Kubernetes message uses) are an
// error, as is anything truncated.
func fields(b []byte, f func(num int, wt int, v []byte, x uint64) error) error {
	for len(b) > 0 {
		tag, n := uvarint(b)
		if n <= 0 {
			return errWire
		}
		b = b[n:]
		num, wt := int(tag>>3), int(tag&7)
		if num <= 0 {
			return errWire
		}
		var v []byte
		var x uint64
		switch wt {
		case wireVarint:
			if x, n = uvarint(b); n <= 0 {
				return errWire
			}
			b = b[n:]
		case wireFixed64:
			if len(b) < 8 {
				return errWire
			}
			b = b[8:]
		case wireFixed32:
			if len(b) < 4 {
				return errWire
			}
			b = b[4:]
		case wireBytes:
			l, n := uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errWire
			}
			v, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return errWire
		}
		if err := f(num, wt, v, x); err != nil {
			return err
		}
	}
	return nil
}

// uvarint decodes a varint of at most 10 bytes; n <= 0 on error.
func uvarint(b []byte) (x uint64, n int) {
	var s uint
	for i, c := range b {
		if i == 10 {
			return 0, -1
		}
		if c < 0x80 {
			if i == 9 && c > 1 {
				return 0, -1
			}
			return x | uint64(c)<<s, i + 1
		}
		x |= uint64(c&0x7f) << s
		s += 7
	}
	return 0, 0
}
