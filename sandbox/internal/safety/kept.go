package safety

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Kept is an object a test expects the collector to have left alone.
type Kept struct {
	// Object names it in failures.
	Object fmt.Stringer
	// Get reads its metadata now; nil metadata (and no error) when it is
	// gone or has another UID.
	Get func(ctx context.Context) (*metav1.PartialObjectMetadata, error)
	// Check tests its metadata; nil: existing is enough.
	Check Check
}

// Check tests a kept object's metadata.
type Check func(m *metav1.PartialObjectMetadata) error

// NotDeleting: the object is not being deleted.
func NotDeleting(m *metav1.PartialObjectMetadata) error {
	if m.DeletionTimestamp != nil {
		return errors.New("is being deleted")
	}
	return nil
}

// OwnedBy: the object is not being deleted and is owned by exactly owners
// (in any order).
func OwnedBy(owners ...types.UID) Check {
	want := slices.Sorted(slices.Values(owners))
	return func(m *metav1.PartialObjectMetadata) error {
		if err := NotDeleting(m); err != nil {
			return err
		}
		var got []types.UID
		for _, r := range m.OwnerReferences {
			got = append(got, r.UID)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("owners are %v, want %v", got, want)
		}
		return nil
	}
}

// AssertKeptAfter proves a negative: that the collector, having had its
// chance, did not delete objs. sentinel runs a cascade of the test's own —
// typically it deletes a fresh owner and waits until the collector has
// collected its dependent, failing the test if it does not — so that every
// change made before it has reached the collector; only then is each
// object read and checked.
func AssertKeptAfter(ctx context.Context, t testing.TB, sentinel func(), objs ...Kept) {
	t.Helper()
	sentinel()
	for _, k := range objs {
		m, err := k.Get(ctx)
		switch {
		case err != nil:
			t.Errorf("get %s: %v", k.Object, err)
		case m == nil:
			t.Errorf("%s was deleted; it must have been kept", k.Object)
		case k.Check != nil:
			if err := k.Check(m); err != nil {
				t.Errorf("%s %v; metadata: %s", k.Object, err, Describe(m))
			}
		}
	}
}

// KeptOf is the Kept of o, read with get.
func KeptOf[O fmt.Stringer](o O, get func(context.Context, O) (*metav1.PartialObjectMetadata, error), check Check) Kept {
	return Kept{Object: o, Check: check, Get: func(ctx context.Context) (*metav1.PartialObjectMetadata, error) { return get(ctx, o) }}
}
