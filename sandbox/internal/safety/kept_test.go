package safety

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestKeptChecks(t *testing.T) {
	now := metav1.Now()
	meta := func(deleting bool, owners ...types.UID) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{}
		if deleting {
			m.DeletionTimestamp = &now
		}
		for _, o := range owners {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{UID: o})
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		check Check
		m     *metav1.PartialObjectMetadata
		ok    bool
	}{
		{"alive", NotDeleting, meta(false), true},
		{"deleting", NotDeleting, meta(true), false},
		{"owners in another order", OwnedBy("a", "b"), meta(false, "b", "a"), true},
		{"no owners wanted, none", OwnedBy(), meta(false), true},
		{"an owner too many", OwnedBy("a"), meta(false, "a", "b"), false},
		{"an owner missing", OwnedBy("a", "b"), meta(false, "a"), false},
		{"owned but deleting", OwnedBy("a"), meta(true, "a"), false},
	} {
		if err := tc.check(tc.m); (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
