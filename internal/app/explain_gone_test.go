package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/server"
)

// kgcWithHistory is a running kgc's handler: an empty graph and a history.
type kgcWithHistory struct{ ring *history.Ring }

func (k kgcWithHistory) Ready() error           { return nil }
func (k kgcWithHistory) Graph() *graph.Graph    { return graph.New() }
func (k kgcWithHistory) History() *history.Ring { return k.ring }
func (k kgcWithHistory) serve(t *testing.T) string {
	srv := httptest.NewServer(server.BuildMux(k, server.Options{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func goneRecords() *history.Ring {
	ring := history.NewRing(10)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(outcome, rv string) *history.Record {
		return &history.Record{
			Time: at, Operation: history.OpDelete, Outcome: outcome, Policy: "Background",
			Reason: "no owner keeps it: every owner is gone or in foreground deletion",
			Object: history.Object{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "web-cfg", UID: "cm-1"},
			Owners: []history.Owner{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-1", State: "dangling",
				Evidence: history.Evidence{Source: "watch-deletion", Reason: "not-found", ResourceVersion: "42"}}},
			Preconditions: history.Preconditions{UID: "cm-1", ResourceVersion: rv},
		}
	}
	ring.Add(rec(history.OutcomeConflict, "7"))
	ring.Add(rec(history.OutcomeSuccess, "8"))
	// Another object of the same name in another namespace.
	other := rec(history.OutcomeSuccess, "9")
	other.Object.Namespace, other.Object.UID = "lab", "cm-2"
	ring.Add(other)
	return ring
}

func TestExplainGoneFromHistory(t *testing.T) {
	url := kgcWithHistory{goneRecords()}.serve(t)
	var out, errOut bytes.Buffer
	err := ExecuteInspect(context.Background(), InspectDeps{}, []string{"explain", "cm/web-cfg", "-n", "shop", "--kgc-url", url}, &out, &errOut)
	if err != nil {
		t.Fatalf("explain: %v (%s)", err, errOut.String())
	}
	want := "ConfigMap shop/web-cfg (uid cm-1) deleted by kgc at 2026-01-02T03:04:05Z because no owner keeps it: every owner is gone or in foreground deletion; " +
		"owner ReplicaSet web-abc (uid rs-1) was observed deleted at resourceVersion 42 (watch)"
	if got := out.String(); !strings.HasPrefix(got, want+"\n") || !strings.Contains(got, "→ conflict") || !strings.Contains(got, "resourceVersion=8") {
		t.Errorf("explain of a deleted object:\n%s\nwant it to start with\n%s\nand list both DELETEs", got, want)
	}

	out.Reset()
	err = ExecuteInspect(context.Background(), InspectDeps{}, []string{"explain", "configmap/web-cfg", "-n", "shop", "--kgc-url", url, "-o", "json"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	var g inspect.Gone
	if err := json.Unmarshal(out.Bytes(), &g); err != nil {
		t.Fatal(err)
	}
	if !g.DeletedByKGC || g.Deletion == nil || g.Deletion.Preconditions.ResourceVersion != "8" || len(g.Records) != 2 || g.Object.UID != "cm-1" {
		t.Errorf("json: %+v", g)
	}
}

func TestExplainGoneWithoutRecord(t *testing.T) {
	for name, ring := range map[string]*history.Ring{"no record": goneRecords(), "history off": nil} {
		url := kgcWithHistory{ring}.serve(t)
		var out, errOut bytes.Buffer
		err := ExecuteInspect(context.Background(), InspectDeps{}, []string{"explain", "cm/never", "-n", "shop", "--kgc-url", url}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%s: err %v, want not found", name, err)
			continue
		}
		want := "kgc has no record"
		if ring == nil {
			want = "kgc keeps no write history"
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %q, want it to say %q", name, err, want)
		}
	}
}
