package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/shadow"
)

type shadowSource struct {
	fakeSource
	t *shadow.Tracker
}

func (s *shadowSource) Shadow() *shadow.Tracker { return s.t }

func TestShadowEndpoint(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC))
	tr := shadow.New(shadow.Config{Window: time.Minute, Clock: clk})
	for _, r := range []*history.Record{historyRecord("a", "x", "ux", "owner-1"), historyRecord("a", "y", "uy", "owner-1")} {
		r.Outcome = history.OutcomeShadow
		tr.Decided(*r)
	}
	tr.Observe(shadow.Change{Object: history.Object{UID: "uy", Name: "y", Namespace: "a"}, Deleted: true})
	clk.Step(time.Minute)
	tr.Expire()
	h := BuildMux(&shadowSource{fakeSource: fakeSource{g: graph.New()}, t: tr}, Options{})

	res, body := serve(t, h, http.MethodGet, ShadowPath+"?name=x")
	if res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	var p shadow.Page
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatal(err)
	}
	if p.Counts != (shadow.Counts{Agree: 1, KGCOnly: 1}) || p.Window != "1m0s" || len(p.Disagreements) != 1 {
		t.Fatalf("page %+v", p)
	}
	d := p.Disagreements[0]
	if d.Outcome != "kgc_only" || d.Object.Name != "x" || d.Decision == nil || d.Decision.Owners[0].Evidence.Summary == "" {
		t.Fatalf("disagreement %+v (its decision's evidence must be summarized)", d)
	}
	if res, body := serve(t, h, http.MethodGet, ShadowPath+"?name=y"); res.StatusCode != 200 || !strings.Contains(body, `"disagreements":[]`) {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	if res, body := serve(t, h, http.MethodGet, ShadowPath+"?bogus=1"); res.StatusCode != 400 {
		t.Fatalf("%d %s", res.StatusCode, body)
	}

	// Not in shadow mode.
	for _, src := range []Source{&shadowSource{fakeSource: fakeSource{g: graph.New()}}, &fakeSource{g: graph.New()}} {
		res, body := serve(t, BuildMux(src, Options{}), http.MethodGet, ShadowPath)
		if res.StatusCode != 404 || !strings.Contains(body, "not in shadow mode") {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
	}
}
