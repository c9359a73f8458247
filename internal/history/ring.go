package history

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// Ring keeps the last Size records. A nil *Ring (size 0) keeps nothing.
// It is safe for concurrent use.
type Ring struct {
	mu   sync.Mutex
	buf  []Record
	next uint64 // records added so far; the next one's Seq is next+1
}

// NewRing returns a ring of size records, or nil for size <= 0 (history
// off).
func NewRing(size int) *Ring {
	if size <= 0 {
		return nil
	}
	return &Ring{buf: make([]Record, size)}
}

// Size is the ring's capacity.
func (r *Ring) Size() int {
	if r == nil {
		return 0
	}
	return len(r.buf)
}

// Add stores rec, numbering it, and returns its Seq (0 when r is nil). It
// keeps rec's slices: the caller must not change them afterwards.
func (r *Ring) Add(rec *Record) uint64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	r.next++
	rec.Seq = r.next
	r.buf[(r.next-1)%uint64(len(r.buf))] = *rec
	r.mu.Unlock()
	return rec.Seq
}

// Filter selects records; empty fields match anything.
type Filter struct {
	// UID matches the object written to or one of the owners the write
	// rests on.
	UID       types.UID
	Namespace string
	Name      string
}

func (f *Filter) match(rec *Record) bool {
	if f.Namespace != "" && rec.Object.Namespace != f.Namespace {
		return false
	}
	if f.Name != "" && rec.Object.Name != f.Name {
		return false
	}
	if f.UID == "" || rec.Object.UID == f.UID {
		return true
	}
	for i := range rec.Owners {
		if rec.Owners[i].UID == f.UID {
			return true
		}
	}
	return false
}

// Query returns the records f selects, oldest first, and how many records
// the ring has overwritten. The records share their slices with the ring,
// which never changes them.
func (r *Ring) Query(f Filter) (out []Record, dropped uint64) {
	if r == nil {
		return nil, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := uint64(len(r.buf))
	first := uint64(0)
	if r.next > n {
		first = r.next - n
		dropped = first
	}
	for s := first; s < r.next; s++ {
		if rec := &r.buf[s%n]; f.match(rec) {
			out = append(out, *rec)
		}
	}
	return out, dropped
}

// Finish completes rec, the record of one write that returned err, with
// its outcome and time, logs it in one line (message) at the default
// verbosity, and keeps it in r (nil keeps none). The caller decides the
// outcome: what counts as a conflict differs between writers.
func (r *Ring) Finish(ctx context.Context, message string, rec *Record, outcome string, at time.Time, err error) {
	rec.Outcome, rec.Time = outcome, at
	if err != nil {
		rec.Error = err.Error()
	}
	if logger := klog.FromContext(ctx); logger.Enabled() {
		// The same fields as the record; owners and preconditions are
		// rendered only when the line is written.
		kv := make([]any, 0, 18)
		kv = append(kv, "operation", rec.Operation, "object", rec.Object, "reason", rec.Reason)
		if len(rec.Owners) > 0 {
			kv = append(kv, "owners", Owners(rec.Owners))
		}
		if rec.Policy != "" {
			kv = append(kv, "policy", rec.Policy)
		}
		if rec.Finalizer != "" {
			kv = append(kv, "finalizer", rec.Finalizer)
		}
		kv = append(kv, "preconditions", rec.Preconditions, "outcome", rec.Outcome)
		if err != nil {
			kv = append(kv, "err", rec.Error)
		}
		logger.Info(message, kv...)
	}
	r.Add(rec)
}
