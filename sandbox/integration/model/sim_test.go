package model

import (
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/types"
)

// The reference model: a small simulator of the collection semantics of
// docs/semantics.md, written independently of kgc. It runs on the test's own
// record of what it did and computes the state the cluster must settle in.

const (
	finalizerOrphan     = "orphan"
	finalizerForeground = "foregroundDeletion"
)

// simRef is an ownerReference as the model sees it.
type simRef struct {
	uid   types.UID
	block bool
}

// simObj is one object of the model.
type simObj struct {
	uid        types.UID
	idx        int // creation order, for a deterministic iteration
	refs       []simRef
	finalizers []string
	deleting   bool
	gone       bool
}

// simulate applies the collector's rules to objs until nothing changes:
//   - an owner deleted with the orphan finalizer loses its dependents'
//     references to it, then the finalizer;
//   - an owner in foreground deletion loses its foregroundDeletion finalizer
//     once no dependent with blockOwnerDeletion refers to it;
//   - an object being deleted without finalizers is gone;
//   - an object that is not being deleted and has owner references: if one of
//     its owners is solid (exists and is not in foreground deletion) it keeps
//     those and drops the others; otherwise it is deleted — in the
//     foreground when it has dependents of its own. (Which policy the
//     collector picks does not change the final state, only the order.)
func simulate(objs map[types.UID]*simObj) {
	order := make([]*simObj, 0, len(objs))
	for _, o := range objs {
		order = append(order, o)
	}
	sort.Slice(order, func(i, j int) bool { return order[i].idx < order[j].idx })
	exists := func(uid types.UID) *simObj {
		if o := objs[uid]; o != nil && !o.gone {
			return o
		}
		return nil
	}
	referrers := func(owner types.UID, onlyBlocking bool) int {
		n := 0
		for _, d := range order {
			if d.gone || d.uid == owner {
				continue
			}
			for _, r := range d.refs {
				if r.uid == owner && (!onlyBlocking || r.block) {
					n++
				}
			}
		}
		return n
	}
	for changed := true; changed; {
		changed = false
		for _, x := range order {
			if x.gone || !x.deleting {
				continue
			}
			if slices.Contains(x.finalizers, finalizerOrphan) {
				for _, d := range order {
					if d.gone || d == x {
						continue
					}
					d.refs = slices.DeleteFunc(d.refs, func(r simRef) bool { return r.uid == x.uid })
				}
				x.finalizers = slices.DeleteFunc(x.finalizers, func(f string) bool { return f == finalizerOrphan })
				changed = true
			}
			if slices.Contains(x.finalizers, finalizerForeground) && referrers(x.uid, true) == 0 {
				x.finalizers = slices.DeleteFunc(x.finalizers, func(f string) bool { return f == finalizerForeground })
				changed = true
			}
			if len(x.finalizers) == 0 {
				x.gone = true
				changed = true
			}
		}
		for _, d := range order {
			if d.gone || d.deleting || len(d.refs) == 0 {
				continue
			}
			var solid []simRef
			for _, r := range d.refs {
				if o := exists(r.uid); o != nil && !(o.deleting && slices.Contains(o.finalizers, finalizerForeground)) {
					solid = append(solid, r)
				}
			}
			switch {
			case len(solid) == len(d.refs):
			case len(solid) > 0:
				d.refs = solid
				changed = true
			default:
				d.deleting = true
				if referrers(d.uid, false) > 0 {
					d.finalizers = append(d.finalizers, finalizerForeground)
				}
				changed = true
			}
		}
	}
}
