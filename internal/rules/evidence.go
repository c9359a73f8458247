package rules

import (
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Source is where kgc learned the fact a reference's state rests on.
type Source uint8

const (
	// SourceNone: no fact was gathered (a state settled without looking,
	// or a record made by hand).
	SourceNone Source = iota
	// SourceGraph: the graph holds the owner as observed by its monitor
	// (list or watch), at Evidence.ResourceVersion.
	SourceGraph
	// SourceWatchDeletion: the owner's monitor observed the deletion of
	// exactly that UID at exactly those coordinates (a watch DELETED
	// event), at Evidence.ResourceVersion.
	SourceWatchDeletion
	// SourceRelist: a complete LIST of the owner's resource, at
	// Evidence.ResourceVersion, did not contain the UID the graph had
	// observed there (deleted while the watch was down). An empty
	// ResourceVersion: the LIST answered 404, the resource is no longer
	// served (a deleted CRD's resource).
	SourceRelist
	// SourceGet: a quorum GET of the reference's coordinates.
	SourceGet
	// SourceList: a consistent LIST of the owner's resource and namespace
	// (answering many lookups at once), at Evidence.ResourceVersion.
	SourceList
	// SourceConfirm: a quorum GET of an owner kgc observed: one the graph
	// showed as solid, just before the write, or one whose absence it
	// held, read again while its watch is interrupted. (An absence of an
	// owner kgc never observed, read again, stays SourceGet.)
	SourceConfirm
	// SourceMapping: the REST mapping of the reference's kind and the
	// dependent's scope alone (Unresolvable, Invalid).
	SourceMapping
)

var sourceNames = [...]string{"", "graph", "watch-deletion", "relist", "get", "list", "confirm", "mapping"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// ParseSource is the Source whose String is s (SourceNone if none).
func ParseSource(s string) Source {
	for i, n := range sourceNames {
		if n == s {
			return Source(i)
		}
	}
	return SourceNone
}

// ParseReason is the Reason whose String is s, and whether there is one.
func ParseReason(s string) (Reason, bool) {
	for i, n := range reasonNames {
		if n == s {
			return Reason(i), true
		}
	}
	return 0, false
}

var reasonNames = [...]string{"exists", "orphaning", "deleting", "foreground", "not-found", "other-uid",
	"kind-not-served", "kind-unknown", "malformed-apiversion", "cluster-scoped-dependent"}

// String is the reason as a short token (for logs and JSON).
func (r Reason) String() string {
	if int(r) >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Evidence is how kgc knows a reference's state: what was found, where the
// fact was gathered and at which resourceVersion. The resolver builds it
// where it gathers the fact (the graph, a quorum read), the decision
// carries it to the write, and the write's record says it. It holds no
// slices: it is copied along every decision.
type Evidence struct {
	Source Source
	// Reason is what was found (Classify's reason).
	Reason Reason
	// ResourceVersion the fact was observed at: the owner's as observed
	// (SourceGraph), its deletion event's (SourceWatchDeletion), the
	// LIST's (SourceRelist, SourceList); "" where the source carries none
	// (a GET answering 404).
	ResourceVersion string
	// FoundUID is the UID of the object found at the reference's
	// coordinates instead (ReasonOtherUID).
	FoundUID types.UID
}

// String says the evidence in plain words, e.g. "observed deleted at
// resourceVersion 123 (watch)".
func (e Evidence) String() string {
	var b strings.Builder
	rv := func() {
		if e.ResourceVersion != "" {
			b.WriteString(" at resourceVersion ")
			b.WriteString(e.ResourceVersion)
		}
	}
	found := func() {
		switch e.Reason {
		case ReasonOtherUID:
			b.WriteString("found another object (uid ")
			b.WriteString(string(e.FoundUID))
			b.WriteString(") at its coordinates")
		case ReasonNotFound:
			b.WriteString("found nothing at its coordinates")
		default:
			b.WriteString("found it (")
			b.WriteString(e.Reason.String())
			b.WriteString(")")
		}
	}
	switch e.Source {
	case SourceWatchDeletion:
		b.WriteString("observed deleted")
		rv()
		b.WriteString(" (watch)")
	case SourceRelist:
		if e.ResourceVersion == "" {
			b.WriteString("gone with its resource (the resource's LIST answered 404)")
			break
		}
		b.WriteString("absent from a complete LIST of its resource")
		rv()
		b.WriteString(" (relist)")
	case SourceGet, SourceConfirm:
		if e.Source == SourceConfirm {
			b.WriteString("a confirming quorum GET ")
		} else {
			b.WriteString("a quorum GET ")
		}
		switch e.Reason {
		case ReasonNotFound:
			b.WriteString("answered 404")
		case ReasonOtherUID:
			b.WriteString("found another object (uid ")
			b.WriteString(string(e.FoundUID))
			b.WriteString(")")
		default:
			found()
			rv()
		}
	case SourceList:
		b.WriteString("a quorum LIST")
		rv()
		b.WriteString(" ")
		found()
	case SourceGraph:
		b.WriteString("observed")
		rv()
		if e.Reason != ReasonExists {
			b.WriteString(" (")
			b.WriteString(e.Reason.String())
			b.WriteString(")")
		}
	case SourceMapping:
		b.WriteString("from its kind's mapping (")
		b.WriteString(e.Reason.String())
		b.WriteString(")")
	default:
		b.WriteString(e.Reason.String())
	}
	return b.String()
}

// Fact is one reference's state with the evidence it rests on.
type Fact struct {
	State    OwnerState
	Evidence Evidence
}

// ClassifyFact is Classify with the evidence: f says where it was found
// (Found.Source, Found.ResourceVersion).
func ClassifyFact(owner types.UID, f Found, orphaned func(types.UID) bool) Fact {
	s, why := Classify(owner, f, orphaned)
	e := Evidence{Source: f.Source, Reason: why, ResourceVersion: f.ResourceVersion}
	if why == ReasonOtherUID {
		e.FoundUID = f.UID
	}
	return Fact{State: s, Evidence: e}
}

// States returns the states of facts, for DecideDependent.
func States(facts []Fact) []OwnerState {
	out := make([]OwnerState, len(facts))
	for i := range facts {
		out[i] = facts[i].State
	}
	return out
}
