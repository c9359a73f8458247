package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/fakeapi"
)

func TestRelink(t *testing.T) {
	ctx := context.Background()
	newSrv := func(t *testing.T) (*fakeapi.Server, *relinker, relinkTarget) {
		srv := fakeapi.NewServer()
		srv.Create(t, fakeapi.Deployments, fakeapi.Object("shop", "web", "new"))
		srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("shop", "dep", "dep-uid", fakeapi.DeploymentRef("web", "old"), fakeapi.ConfigMapRef("keeper", "k")))
		srv.Create(t, fakeapi.ConfigMaps, fakeapi.Object("shop", "keeper", "k"))
		mapper := fakeapi.NewMapper()
		m, err := mapper.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
		if err != nil {
			t.Fatal(err)
		}
		return srv, &relinker{mapper: mapper, md: srv.Client, ops: &apiops.Ops{Client: srv.Client}}, relinkTarget{mapping: m, namespace: "shop", name: "dep"}
	}
	refs := func(t *testing.T, srv *fakeapi.Server) string {
		o, err := srv.Get(fakeapi.ConfigMaps, "shop", "dep")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range o.OwnerReferences {
			out = append(out, string(r.UID))
		}
		return strings.Join(out, ",")
	}

	t.Run("dry run, then for real: only the gone UID changes", func(t *testing.T) {
		srv, r, tg := newSrv(t)
		res, err := r.relink(ctx, tg, true)
		if err != nil || len(res.Changes) != 1 || res.Changes[0].Index != 0 || res.Changes[0].NewOwner != "new" || res.Written {
			t.Fatalf("dry run: %+v, %v", res, err)
		}
		if got := refs(t, srv); got != "old,k" {
			t.Fatalf("a dry run wrote: %s", got)
		}
		res, err = r.relink(ctx, tg, false)
		if err != nil || !res.Written {
			t.Fatalf("relink: %+v, %v", res, err)
		}
		if got := refs(t, srv); got != "new,k" {
			t.Fatalf("after relink: %s, want new,k", got)
		}
		var b strings.Builder
		res.write(&b)
		if want := "configmaps shop/dep (uid dep-uid): ownerReferences[0] Deployment web: uid old -> new (relinked)\n"; b.String() != want {
			t.Errorf("output %q, want %q", b.String(), want)
		}
		// Again: nothing left to relink.
		if _, err := r.relink(ctx, tg, false); !errors.Is(err, errNothingToRelink) {
			t.Fatalf("a second relink: %v", err)
		}
	})
	t.Run("the named owner does not exist", func(t *testing.T) {
		srv, r, tg := newSrv(t)
		if err := srv.Client.Tracker().Delete(fakeapi.Deployments, "shop", "web"); err != nil {
			t.Fatal(err)
		}
		tg.ownerUID = "old"
		if _, err := r.relink(ctx, tg, false); err == nil || !strings.Contains(err.Error(), "no Deployment shop/web exists") {
			t.Fatalf("relink to a missing owner: %v", err)
		}
		if got := refs(t, srv); got != "old,k" {
			t.Fatalf("wrote anyway: %s", got)
		}
	})
	t.Run("the owner changed since kgc held the object", func(t *testing.T) {
		_, r, tg := newSrv(t)
		tg.ownerUID, tg.foundUID = "old", "newer"
		if _, err := r.relink(ctx, tg, false); err == nil || !strings.Contains(err.Error(), "not newer as kgc found it") {
			t.Fatalf("relink to an owner kgc did not find: %v", err)
		}
	})
	t.Run("the owner is being deleted", func(t *testing.T) {
		srv, r, tg := newSrv(t)
		o, _ := srv.Get(fakeapi.Deployments, "shop", "web")
		now := metav1.NewTime(time.Now())
		o.DeletionTimestamp, o.Finalizers = &now, []string{"x"}
		if err := srv.Store(fakeapi.Deployments, o); err != nil {
			t.Fatal(err)
		}
		if _, err := r.relink(ctx, tg, false); err == nil || !strings.Contains(err.Error(), "is being deleted") {
			t.Fatalf("relink to a deleting owner: %v", err)
		}
	})
	t.Run("a solid reference named", func(t *testing.T) {
		_, r, tg := newSrv(t)
		tg.ownerUID = types.UID("k")
		if _, err := r.relink(ctx, tg, false); err == nil || !strings.Contains(err.Error(), "not dangling") {
			t.Fatalf("relink of a solid reference: %v", err)
		}
	})
}
