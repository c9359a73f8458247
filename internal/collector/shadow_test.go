package collector

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/namespaces"
	"github.com/kgc-dev/kgc/internal/shadow"
)

func dryRun(c *Config) { c.DryRun = true }

// shadow returns the shadow comparison's counts and what still waits.
func (e *testEnv) shadow() shadow.Page { return e.c.Shadow().Snapshot(history.Filter{}) }

func (e *testEnv) noWrites(t *testing.T) {
	t.Helper()
	if _, deletes, patches := e.srv.KGCActions(); len(deletes)+len(patches) > 0 {
		t.Fatalf("shadow mode wrote: %d DELETEs, %d PATCHes", len(deletes), len(patches))
	}
}

// Another collector does an Orphan cascade while kgc watches in shadow
// mode: kgc decides each dependent's orphaning, then — once the other
// collector removed the references, which nothing of kgc's own would have
// re-queued the owner for — the owner's finalizer; each agrees when the
// cluster shows it.
func TestShadowOrphanCascadeByAnotherCollector(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "owner-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep1", "dep1-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep2", "dep2-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	e := startCollector(t, srv, dryRun)
	if e.c.Shadow() == nil {
		t.Fatal("no shadow comparison in dry-run mode")
	}

	if err := srv.Delete(fakeapi.Deployments, "a", "web", metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "two orphaning decisions", func() bool { return e.shadow().Pending == 2 })
	e.noWrites(t)

	// The other collector orphans the dependents.
	for _, name := range []string{"dep1", "dep2"} {
		d, err := srv.Get(fakeapi.ConfigMaps, "a", name)
		if err != nil {
			t.Fatal(err)
		}
		d.OwnerReferences = nil
		srv.Mu.Lock()
		err = srv.Store(fakeapi.ConfigMaps, d)
		srv.Mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor(t, "the orphanings to agree and the finalizer's removal to be decided", func() bool {
		p := e.shadow()
		return p.Counts.Agree == 2 && p.Pending == 1
	})
	// The other collector removes the orphan finalizer: the owner goes.
	srv.SetFinalizers(t, fakeapi.Deployments, "a", "web")
	e.waitFor(t, "every decision to agree", func() bool {
		p := e.shadow()
		return p.Counts == (shadow.Counts{Agree: 3}) && p.Pending == 0 && p.Unmatched == 0
	})
	e.noWrites(t)
	recs, _ := e.c.History().Query(history.Filter{})
	for _, r := range recs {
		if r.Outcome != history.OutcomeShadow {
			t.Errorf("history record %s %s with outcome %s", r.Operation, r.Object.Name, r.Outcome)
		}
	}
}

// A Background cascade by another collector: kgc's decision to delete the
// dependent agrees once the other collector deleted it.
func TestShadowBackgroundCascadeByAnotherCollector(t *testing.T) {
	srv := fakeapi.NewServer()
	srv.Create(t, fakeapi.Deployments, fakeapi.Object("a", "web", "owner-uid"))
	srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("a", "dep", "dep-uid", fakeapi.DeploymentRef("web", "owner-uid")))
	e := startCollector(t, srv, dryRun)
	if err := srv.Delete(fakeapi.Deployments, "a", "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "the deletion decided", func() bool { return e.shadow().Pending == 1 })
	if err := srv.Delete(fakeapi.ConfigMaps, "a", "dep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(t, "it to agree", func() bool {
		p := e.shadow()
		return p.Counts == (shadow.Counts{Agree: 1}) && p.Pending == 0 && p.Unmatched == 0
	})
	e.noWrites(t)
}

func TestDryRunExcludesNamespaceLifecycle(t *testing.T) {
	var api namespaces.API = struct{ namespaces.API }{}
	_, err := New(Config{Metadata: fakeapi.NewServer().Client, Discovery: &fakeapi.Discovery{}, Mapper: fakeapi.NewMapper(), DryRun: true, Namespaces: api})
	if err == nil {
		t.Fatal("DryRun with the namespace lifecycle accepted")
	}
}
