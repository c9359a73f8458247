package graph

import (
	"slices"
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPending(t *testing.T) {
	g := New()
	ref := func(uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: string(uid), UID: uid}
	}
	cm := func(uid types.UID, refs ...metav1.OwnerReference) rules.Object {
		return rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: string(uid), UID: uid}, ResourceVersion: "1", OwnerReferences: refs}
	}
	apply := func(o rules.Object) { g.Apply(Event{Type: Upsert, Object: o}) }

	apply(cm("live"))
	apply(cm("solid-dep", ref("live")))
	apply(cm("dangling-dep", ref("ghost")))
	fg := cm("fg")
	fg.Deleting, fg.Finalizers = true, []string{rules.FinalizerForeground}
	apply(fg)
	apply(cm("fg-dep", ref("fg")))
	orphan := cm("orphan")
	orphan.Deleting, orphan.Finalizers = true, []string{rules.FinalizerOrphan}
	apply(orphan)
	apply(cm("orphan-dep", ref("orphan")))

	p := g.Pending()
	slices.Sort(p.AttemptToDelete)
	if want := []types.UID{"dangling-dep", "fg", "fg-dep"}; !slices.Equal(p.AttemptToDelete, want) {
		t.Errorf("AttemptToDelete = %v, want %v", p.AttemptToDelete, want)
	}
	if want := []types.UID{"orphan"}; !slices.Equal(p.AttemptToOrphan, want) {
		t.Errorf("AttemptToOrphan = %v, want %v", p.AttemptToOrphan, want)
	}
}
