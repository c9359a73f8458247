package collector

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A foreground owner re-checks its blocking dependents on every change;
// each dependent is still deleted exactly once, without a GET, and the
// owner's finalizer is removed once.
func TestCollectorForegroundOneCallPerDependent(t *testing.T) {
	const n = 40
	srv := newFakeServer()
	owner := object("a", "web", "owner-uid")
	owner.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	owner.Finalizers = []string{metav1.FinalizerDeleteDependents, "example.com/keep"}
	srv.create(t, gvDeployments, owner)
	for i := range n {
		srv.create(t, gvConfigMaps, object("a", fmt.Sprintf("dep-%02d", i), types.UID(fmt.Sprintf("dep-%02d", i)), deploymentRef("web", "owner-uid")))
	}
	e := startCollector(t, srv)
	e.waitFor(t, "the owner's foregroundDeletion finalizer to go", func() bool {
		o, err := srv.get(gvDeployments, "a", "web")
		return err == nil && slices.Equal(o.Finalizers, []string{"example.com/keep"})
	})
	gets, deletes, patches := srv.kgcActions()
	if len(gets) != 0 {
		t.Errorf("%d GETs, want none: every owner is in the cache", len(gets))
	}
	perName := map[string]int{}
	for _, d := range deletes {
		perName[d.GetName()]++
	}
	for name, c := range perName {
		if c != 1 {
			t.Errorf("%s deleted %d times, want once", name, c)
		}
	}
	if len(perName) != n {
		t.Errorf("%d dependents deleted, want %d", len(perName), n)
	}
	if len(patches) != 1 {
		t.Errorf("%d patches, want 1 (the owner's finalizer): %v", len(patches), patchNames(patches))
	}
}
