package rules

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestClassifyFact(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Found
		want Fact
	}{
		{"observed deleted", Found{Source: SourceWatchDeletion, ResourceVersion: "42"},
			Fact{Dangling, Evidence{Source: SourceWatchDeletion, Reason: ReasonNotFound, ResourceVersion: "42"}}},
		{"another uid", Found{Exists: true, UID: "other", Source: SourceGet, ResourceVersion: "9"},
			Fact{Dangling, Evidence{Source: SourceGet, Reason: ReasonOtherUID, ResourceVersion: "9", FoundUID: "other"}}},
		{"waiting", Found{Exists: true, UID: "o", Deleting: true, DeletingDependents: true, Source: SourceGraph, ResourceVersion: "7"},
			Fact{Waiting, Evidence{Source: SourceGraph, Reason: ReasonForeground, ResourceVersion: "7"}}},
		{"solid", Found{Exists: true, UID: "o", Source: SourceConfirm, ResourceVersion: "8"},
			Fact{Solid, Evidence{Source: SourceConfirm, Reason: ReasonExists, ResourceVersion: "8"}}},
	} {
		if got := ClassifyFact("o", tc.f, nil); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got := ClassifyFact("o", Found{Source: SourceList, ResourceVersion: "5"}, func(types.UID) bool { return true }); got.State != Orphaned || got.Evidence.Source != SourceList {
		t.Errorf("orphaned: %+v", got)
	}
}

func TestEvidenceString(t *testing.T) {
	for _, tc := range []struct {
		e    Evidence
		want string
	}{
		{Evidence{Source: SourceWatchDeletion, Reason: ReasonNotFound, ResourceVersion: "42"}, "observed deleted at resourceVersion 42 (watch)"},
		{Evidence{Source: SourceRelist, Reason: ReasonNotFound, ResourceVersion: "50"}, "absent from a complete LIST of its resource at resourceVersion 50 (relist)"},
		{Evidence{Source: SourceRelist, Reason: ReasonNotFound}, "gone with its resource (the resource's LIST answered 404)"},
		{Evidence{Source: SourceGet, Reason: ReasonNotFound}, "a quorum GET answered 404"},
		{Evidence{Source: SourceGet, Reason: ReasonOtherUID, FoundUID: "x"}, "a quorum GET found another object (uid x)"},
		{Evidence{Source: SourceList, Reason: ReasonNotFound, ResourceVersion: "7"}, "a quorum LIST at resourceVersion 7 found nothing at its coordinates"},
		{Evidence{Source: SourceConfirm, Reason: ReasonExists, ResourceVersion: "3"}, "a confirming quorum GET found it (exists) at resourceVersion 3"},
		{Evidence{Source: SourceGraph, Reason: ReasonForeground, ResourceVersion: "3"}, "observed at resourceVersion 3 (foreground)"},
	} {
		if got := tc.e.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
		// Names round-trip (the wire format carries them).
		if ParseSource(tc.e.Source.String()) != tc.e.Source {
			t.Errorf("source %v does not round-trip", tc.e.Source)
		}
		if r, ok := ParseReason(tc.e.Reason.String()); !ok || r != tc.e.Reason {
			t.Errorf("reason %v does not round-trip", tc.e.Reason)
		}
	}
}
