package app

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/server"
	"github.com/kgc-dev/kgc/internal/shadow"
)

// kgcInShadowMode is a running kgc in shadow mode: an empty graph, a
// history of shadow decisions and the comparison.
type kgcInShadowMode struct {
	kgcWithHistory
	t *shadow.Tracker
}

func (k kgcInShadowMode) Shadow() *shadow.Tracker { return k.t }

// explain of an object kgc decided to delete in shadow mode, which the
// cluster's collector did not delete within the window: the answer says
// kgc did not delete it, and shows the disagreement with kgc's reason.
func TestExplainGoneShowsShadowDisagreement(t *testing.T) {
	ring := history.NewRing(10)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := history.Record{
		Time: at, Operation: history.OpDelete, Outcome: history.OutcomeShadow, Policy: "Background",
		Reason: "no owner keeps it: every owner is gone or in foreground deletion",
		Object: history.Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "web-cfg", UID: "cm-1"},
		Owners: []history.Owner{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-1", State: "dangling",
			Evidence: history.Evidence{Source: "watch-deletion", Reason: "not-found", ResourceVersion: "42"}}},
		Preconditions: history.Preconditions{UID: "cm-1", ResourceVersion: "8"},
	}
	ring.Add(&rec)
	clk := clocktesting.NewFakeClock(at)
	tr := shadow.New(shadow.Config{Window: time.Minute, Clock: clk})
	tr.Decided(rec)
	clk.Step(time.Minute)
	tr.Expire()
	srv := httptest.NewServer(server.BuildMux(kgcInShadowMode{kgcWithHistory{ring}, tr}, server.Options{}))
	t.Cleanup(srv.Close)

	var out, errOut bytes.Buffer
	if err := ExecuteInspect(context.Background(), InspectDeps{}, []string{"explain", "cm/web-cfg", "-n", "shop", "--kgc-url", srv.URL}, &out, &errOut); err != nil {
		t.Fatalf("explain: %v (%s)", err, errOut.String())
	}
	got := out.String()
	for _, want := range []string{
		"ConfigMap shop/web-cfg (uid cm-1): kgc, in shadow mode, decided to delete it at 2026-01-02T03:04:05Z (and did not) because no owner keeps it",
		"→ shadow",
		"Shadow mode disagreements with the cluster's garbage collector:\n  - kgc_only: delete, since 2026-01-02T03:04:05Z\n      kgc decided it because no owner keeps it",
		"the cluster: nothing of the kind happened within 1m0s",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("explain:\n%s\nwant it to contain\n%s", got, want)
		}
	}
	if strings.Contains(got, "deleted by kgc") {
		t.Errorf("explain says kgc deleted what it only decided in shadow mode:\n%s", got)
	}
}
