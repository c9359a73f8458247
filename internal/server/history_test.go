package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
)

// historySource is a Source with a write history.
type historySource struct {
	fakeSource
	ring *history.Ring
}

func (s *historySource) History() *history.Ring { return s.ring }

func historyRecord(ns, name, uid, owner string) *history.Record {
	return &history.Record{
		Operation: history.OpDelete, Outcome: history.OutcomeSuccess, Policy: "Background", Reason: "no owner keeps it",
		Object: history.Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: typesUID(uid)},
		Owners: []history.Owner{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: typesUID(owner), State: "dangling",
			Evidence: history.Evidence{Source: "watch-deletion", Reason: "not-found", ResourceVersion: "42"}}},
		Preconditions: history.Preconditions{UID: typesUID(uid), ResourceVersion: "7"},
	}
}

func TestHistoryEndpoint(t *testing.T) {
	ring := history.NewRing(10)
	ring.Add(historyRecord("a", "x", "ux", "owner-1"))
	ring.Add(historyRecord("b", "x", "ux2", "owner-2"))
	ring.Add(historyRecord("a", "y", "uy", "owner-1"))
	h := BuildMux(&historySource{fakeSource: fakeSource{g: graph.New()}, ring: ring}, Options{})

	for _, tc := range []struct {
		query string
		code  int
		names []string // the records' object names, in order
		err   string
	}{
		{"", 200, []string{"x", "x", "y"}, ""},
		{"?namespace=a", 200, []string{"x", "y"}, ""},
		{"?namespace=a&name=x", 200, []string{"x"}, ""},
		{"?uid=owner-1", 200, []string{"x", "y"}, ""},
		{"?uid=ux2", 200, []string{"x"}, ""},
		{"?uid=nobody", 200, []string{}, ""},
		{"?limit=1", 200, []string{"y"}, ""},
		{"?limit=0", 400, nil, "limit"},
		{"?limit=x", 400, nil, "limit"},
		{"?name=x&name=y", 400, nil, "given 2 times"},
		{"?nmae=x", 400, nil, `unknown parameter "nmae"`},
	} {
		res, body := serve(t, h, http.MethodGet, HistoryPath+tc.query)
		if res.StatusCode != tc.code {
			t.Errorf("%s: status %d, want %d (%s)", tc.query, res.StatusCode, tc.code, body)
			continue
		}
		if tc.code != 200 {
			if !strings.Contains(body, tc.err) {
				t.Errorf("%s: error %q, want it to say %q", tc.query, body, tc.err)
			}
			continue
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", tc.query, ct)
		}
		var page history.Page
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		names := []string{}
		for _, r := range page.Records {
			names = append(names, r.Object.Name)
		}
		if strings.Join(names, ",") != strings.Join(tc.names, ",") || page.Size != 10 {
			t.Errorf("%s: records %v size %d, want %v size 10", tc.query, names, page.Size, tc.names)
		}
		for _, r := range page.Records {
			if r.Owners[0].Evidence.Summary != "observed deleted at resourceVersion 42 (watch)" {
				t.Errorf("%s: evidence summary %q", tc.query, r.Owners[0].Evidence.Summary)
			}
		}
	}
	// Serving filled the summaries of copies: the ring's records are
	// unchanged.
	if recs, _ := ring.Query(history.Filter{}); recs[0].Owners[0].Evidence.Summary != "" {
		t.Error("serving changed the ring's records")
	}
}

func TestHistoryEndpointOff(t *testing.T) {
	for name, src := range map[string]Source{
		"no history source": &fakeSource{g: graph.New()},
		"size 0":            &historySource{fakeSource: fakeSource{g: graph.New()}},
	} {
		res, body := serve(t, BuildMux(src, Options{}), http.MethodGet, HistoryPath)
		if res.StatusCode != http.StatusNotFound || !strings.Contains(body, "--write-history-size=0") {
			t.Errorf("%s: %d %q, want 404 saying the history is off", name, res.StatusCode, body)
		}
	}
}

func typesUID(s string) types.UID { return types.UID(s) }
