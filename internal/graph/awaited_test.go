package graph

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/rules"
)

func TestAwaited(t *testing.T) {
	yes, no := true, false
	ref := func(owner types.UID, block *bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: string(owner), UID: owner, BlockOwnerDeletion: block}
	}
	obj := func(uid types.UID, finalizers []string, refs ...metav1.OwnerReference) Event {
		return Event{Type: Upsert, Object: rules.Object{
			Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: string(uid), UID: uid},
			ResourceVersion: "1", OwnerReferences: refs, Finalizers: finalizers, Deleting: finalizers != nil,
		}}
	}
	g := New()
	for _, ev := range []Event{
		obj("foreground", []string{metav1.FinalizerDeleteDependents}),
		obj("orphaning", []string{metav1.FinalizerOrphanDependents}),
		obj("live", nil),
		obj("blocks-foreground", nil, ref("foreground", &yes)),
		obj("points-at-foreground", nil, ref("foreground", &no)),
		obj("of-orphaning", nil, ref("orphaning", &yes)),
		obj("blocks-live", nil, ref("live", &yes)),
		obj("blocks-an-unobserved-owner", nil, ref("unobserved", &yes)),
		obj("second-ref-blocks-foreground", nil, ref("live", &no), ref("foreground", &yes)),
	} {
		g.Apply(ev)
	}
	for uid, want := range map[types.UID]bool{
		"foreground":                   true, // its finalizer removal
		"blocks-foreground":            true,
		"second-ref-blocks-foreground": true,
		"points-at-foreground":         false, // the owner does not wait for it
		"of-orphaning":                 false, // the attempt-to-orphan queue's work
		"orphaning":                    false,
		"live":                         false,
		"blocks-live":                  false,
		"blocks-an-unobserved-owner":   false,
		"unobserved":                   false,
		"missing":                      false,
	} {
		if got := g.Awaited(uid); got != want {
			t.Errorf("Awaited(%s) = %v, want %v", uid, got, want)
		}
	}
}
