package graph

import (
	"testing"

	"github.com/kgc-dev/kgc/internal/rules"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestUUIDKeys(t *testing.T) {
	for _, uid := range []types.UID{
		"0b5e8c9a-3f1d-4e2b-9c7a-1d2e3f4a5b6c",
		"ffffffff-ffff-4fff-bfff-ffffffffffff",
		"00000000-0000-1000-8000-000000000000",
	} {
		k, ok := parseUUID(uid)
		if !ok {
			t.Errorf("%s not parsed", uid)
			continue
		}
		if k.hi == 0 {
			t.Errorf("%s parsed to a synthetic-looking key", uid)
		}
		if got := uuidString(k); got != uid {
			t.Errorf("%s spelled back as %s", uid, got)
		}
	}
	for _, uid := range []types.UID{
		"", "u1", "0B5E8C9A-3F1D-4E2B-9C7A-1D2E3F4A5B6C", // upper case would not spell back
		"00000000-0000-0000-0000-000000000000",  // version 0: the synthetic keys' space
		"0b5e8c9a-3f1d-4e2b-9c7a-1d2e3f4a5b6",   // short
		"0b5e8c9a-3f1d-4e2b-9c7a-1d2e3f4a5b6cd", // long
		"0b5e8c9a_3f1d-4e2b-9c7a-1d2e3f4a5b6c",
		"0b5e8c9a-3f1d-4e2b-9c7a-1d2e3f4a5b6g",
	} {
		if _, ok := parseUUID(uid); ok {
			t.Errorf("%q parsed as a UUID", uid)
		}
	}
}

// UIDs that are not UUIDs get synthetic keys for as long as their node
// exists, and spell back exactly.
func TestSyntheticKeys(t *testing.T) {
	g := New()
	obj := func(uid, owner types.UID) Event {
		o := rules.Object{Identity: rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: string(uid), UID: uid}, ResourceVersion: "1"}
		if owner != "" {
			o.OwnerReferences = append(o.OwnerReferences, ownerReference(owner))
		}
		return Event{Type: Upsert, Object: o}
	}
	g.Apply(obj("DEP", "Owner-1"))
	if len(g.odd) != 2 || len(g.oddUIDs) != 2 {
		t.Fatalf("synthetic keys %v", g.odd)
	}
	if it, ok := g.Item("Owner-1"); !ok || !it.Virtual || len(it.Dependents) != 1 || it.Dependents[0].UID != "DEP" {
		t.Fatalf("placeholder = %+v, %v", it, ok)
	}
	if err := g.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	g.Apply(Event{Type: Delete, Object: rules.Object{Identity: rules.Identity{UID: "DEP"}}})
	if len(g.odd) != 0 || len(g.oddUIDs) != 0 || len(g.nodes) != 0 {
		t.Fatalf("after the delete: %d nodes, synthetic keys %v", len(g.nodes), g.odd)
	}
	// Unknown UIDs are not assigned keys by reads or deletes.
	g.Item("nope")
	g.Apply(Event{Type: Delete, Object: rules.Object{Identity: rules.Identity{UID: "nope"}}})
	if len(g.odd) != 0 {
		t.Fatalf("a read or a delete assigned keys: %v", g.odd)
	}
}

func ownerReference(uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: string(uid), UID: uid}
}
