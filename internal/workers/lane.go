package workers

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/internal/rules"
)

// listFunc reads one page of a resource's metadata in a namespace ("" for
// all namespaces or a cluster-scoped resource): a consistent read when
// opts names no resourceVersion.
type listFunc func(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)

// listPageSize is the page size of the LISTs that answer owner lookups.
const listPageSize = 500

// laneKey is where a group of owner lookups is answered from.
type laneKey struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// lane serializes the lookups of owners of one resource in one namespace:
// one request at a time, and the lookups that arrive meanwhile are answered
// together in the next round, by one LIST when that is cheaper than a GET
// each. At startup many dependents reference owners that were never
// observed (owners deleted while no collector ran); with a GET each that is
// two calls per collected object, with a shared LIST it is little more than
// one.
//
// Why a LIST may answer a round: every lookup of a round registered before
// the round's LIST was sent, and the dependent that registered it had
// already been observed with a reference to the owner's UID. UIDs are
// assigned by the apiserver when an object is created, so an object with
// that UID was created before the reference was written (hence before the
// LIST was sent) or never will be. A LIST without a resourceVersion is a
// consistent read (with continue tokens, of one snapshot taken at its first
// page), so an owner missing from a complete LIST was deleted or never
// existed: dangling, exactly as a GET answering 404 would prove. A lookup
// that registers while a LIST is in flight is NOT answered by it (it may
// name an owner created after the LIST's snapshot); it waits for the next
// round. An incomplete LIST (page budget spent) proves nothing about the
// owners it did not return; those get a GET each.
type lane struct {
	busy   bool                          // a resolution serves this lane
	queued map[rules.Coordinates]*flight // the next round
	size   int                           // objects the last complete LIST returned; 0 unknown
}

// serveRound answers every lookup of round, from one LIST where that costs
// fewer calls than a GET per owner.
func (r *resolver) serveRound(ctx context.Context, gvr schema.GroupVersionResource, l *lane, round map[rules.Coordinates]*flight) {
	n := len(round)
	// A LIST may take up to n/2 pages: never more calls than half the GETs
	// it replaces.
	maxPages := n / 2
	if n == 1 || (l.size > 0 && (l.size+listPageSize-1)/listPageSize > maxPages) {
		r.getEach(ctx, gvr, round)
		return
	}
	var ns string
	byName := make(map[string][]rules.Coordinates, n)
	for c := range round {
		ns = c.Namespace
		byName[c.Name] = append(byName[c.Name], c)
	}
	opts := metav1.ListOptions{Limit: listPageSize}
	seen := 0
	rv := "" // the snapshot's resourceVersion (its first page's)
	for page := 0; ; page++ {
		if page == maxPages {
			// Budget spent: what was not found yet is not proven absent.
			r.getEach(ctx, gvr, round)
			return
		}
		r.metrics.Lookup(metrics.LookupList)
		list, err := r.list(ctx, gvr, ns, opts)
		if err != nil {
			if ctx.Err() != nil {
				for c, f := range round {
					r.answer(c, f, rules.Fact{State: rules.Unresolvable}, ctx.Err())
				}
				return
			}
			// Forbidden, an expired continue token, a server error:
			// the GETs may still work, and they report their own errors.
			r.getEach(ctx, gvr, round)
			return
		}
		if rv == "" {
			rv = list.ResourceVersion
		}
		seen += len(list.Items)
		for i := range list.Items {
			obj := &list.Items[i]
			for _, c := range byName[obj.Name] {
				f, ok := round[c]
				if !ok {
					continue
				}
				delete(round, c)
				r.answer(c, f, r.settle(c, obj, rules.SourceList, rv), nil)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	l.size = seen
	// The LIST was complete and did not return these owners.
	for c, f := range round {
		r.answer(c, f, r.settle(c, nil, rules.SourceList, rv), nil)
	}
}

// getEach answers every lookup of round with a GET of its own, in parallel
// (a round has at most one lookup per waiting worker).
func (r *resolver) getEach(ctx context.Context, gvr schema.GroupVersionResource, round map[rules.Coordinates]*flight) {
	var wg sync.WaitGroup
	for c, f := range round {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := r.getOwner(ctx, gvr, c)
			r.answer(c, f, s, err)
		}()
	}
	wg.Wait()
}
