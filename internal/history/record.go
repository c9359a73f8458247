package history

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/rules"
)

// Path is where a running kgc serves its write history.
const Path = "/debug/controllers/garbage-collector-controller/history"

// Operations: what a write did (the operation label of
// kgc_operations_total).
const (
	OpDelete           = "delete"
	OpRemoveReferences = "remove_owner_references"
	OpUnblock          = "unblock_owner_references"
	OpOrphan           = "orphan_dependent"
	OpRemoveFinalizer  = "remove_finalizer"
	// The namespace lifecycle's writes (Options.NamespaceLifecycle): a
	// DELETECOLLECTION of one resource in a deleting namespace (Object
	// names the resource's kind and the namespace, no object), and the
	// removal of a namespace's "kubernetes" finalizer. Its per-object
	// DELETEs (where DELETECOLLECTION is refused) are OpDelete.
	OpDeleteCollection  = "delete_collection"
	OpFinalizeNamespace = "finalize_namespace"
)

// Outcomes of a write (the outcome label of kgc_operations_total).
const (
	OutcomeSuccess  = "success"
	OutcomeConflict = "conflict"
	OutcomeNotFound = "not_found"
	OutcomeError    = "error"
	// OutcomeShadow: kgc runs in shadow mode (--dry-run) and made no
	// call; the record says what it would have written, and why.
	OutcomeShadow = "shadow"
)

// Object identifies the object written to.
type Object struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
}

// ObjectOf returns id as an Object.
func ObjectOf(id rules.Identity) Object {
	return Object{APIVersion: id.APIVersion, Kind: id.Kind, Namespace: id.Namespace, Name: id.Name, UID: id.UID}
}

func (o Object) String() string {
	s := o.Kind + " "
	if o.Namespace != "" {
		s += o.Namespace + "/"
	}
	return s + o.Name + " (uid " + string(o.UID) + ")"
}

// Evidence is how kgc knew an owner's state (rules.Evidence).
type Evidence struct {
	// Source: graph, watch-deletion, relist, get, list, confirm, mapping
	// (rules.Source).
	Source string `json:"source"`
	// Reason: what was found: exists, orphaning, deleting, foreground,
	// not-found, other-uid, … (rules.Reason).
	Reason string `json:"reason"`
	// ResourceVersion the fact was observed at, when its source has one.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// FoundUID: the UID of the object found at the reference's
	// coordinates instead (reason other-uid).
	FoundUID types.UID `json:"foundUID,omitempty"`
	// Summary says it in words. Filled when records are served
	// (Record.Summarized), not when they are made.
	Summary string `json:"summary,omitempty"`
}

// EvidenceOf converts e, without allocating: the Summary is left to
// Summarize.
func EvidenceOf(e rules.Evidence) Evidence {
	return Evidence{Source: e.Source.String(), Reason: e.Reason.String(), ResourceVersion: e.ResourceVersion, FoundUID: e.FoundUID}
}

// Summarize says e in words (its Summary, if set).
func (e Evidence) Summarize() string {
	if e.Summary != "" {
		return e.Summary
	}
	why, ok := rules.ParseReason(e.Reason)
	if !ok {
		return e.Reason
	}
	return rules.Evidence{Source: rules.ParseSource(e.Source), Reason: why, ResourceVersion: e.ResourceVersion, FoundUID: e.FoundUID}.String()
}

// Owner is one owner the write rests on: a reference of the object
// written to (delete, remove_owner_references, unblock_owner_references),
// or the owner being orphaned (orphan_dependent).
type Owner struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	// State: solid, waiting, dangling, orphaned (rules.OwnerState), or
	// orphaning for the owner of an orphan_dependent write.
	State string `json:"state"`
	// Removed: this write removes the reference (or, for
	// unblock_owner_references, clears its blockOwnerDeletion).
	Removed  bool     `json:"removed,omitempty"`
	Evidence Evidence `json:"evidence"`
}

func (o Owner) String() string {
	return fmt.Sprintf("%s %s (uid %s) %s: %s", o.Kind, o.Name, o.UID, o.State, o.Evidence.Summarize())
}

// Preconditions are what the write required of the object for the
// apiserver to apply it.
type Preconditions struct {
	UID             types.UID `json:"uid"`
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	// Tests lists what else must be unchanged: "ownerReferences" or
	// "finalizers" (the whole list, as read: a JSON patch test), or
	// "ownerReferences[i].uid" (orphaning a custom resource).
	Tests []string `json:"tests,omitempty"`
}

func (p Preconditions) String() string {
	s := "uid=" + string(p.UID)
	if p.ResourceVersion != "" {
		s += " resourceVersion=" + p.ResourceVersion
	}
	if len(p.Tests) > 0 {
		s += " tests=" + strings.Join(p.Tests, ",")
	}
	return s
}

// Record is one write kgc made.
type Record struct {
	// Seq numbers the records of one kgc process, from 1.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Operation is one of the Op* constants.
	Operation string `json:"operation"`
	Object    Object `json:"object"`
	// Reason says why, in a sentence.
	Reason string `json:"reason"`
	// Owners the decision rests on, with their evidence.
	Owners []Owner `json:"owners,omitempty"`
	// Policy: the propagation policy of a delete.
	Policy string `json:"policy,omitempty"`
	// Finalizer: the finalizer a remove_finalizer removes.
	Finalizer     string        `json:"finalizer,omitempty"`
	Preconditions Preconditions `json:"preconditions"`
	// Outcome is one of the Outcome* constants; Error the error's text.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Summarized returns a copy of r with every evidence's Summary filled
// (r's own slices are left alone: the ring shares them).
func (r Record) Summarized() Record {
	if len(r.Owners) == 0 {
		return r
	}
	owners := make([]Owner, len(r.Owners))
	copy(owners, r.Owners)
	for i := range owners {
		owners[i].Evidence.Summary = owners[i].Evidence.Summarize()
	}
	r.Owners = owners
	return r
}

// Owners renders owners for a log line, one string per owner, only when
// the line is written (fmt.Stringer, logr.Marshaler).
type Owners []Owner

func (o Owners) String() string { return fmt.Sprint(o.MarshalLog()) }

// MarshalLog implements logr.Marshaler.
func (o Owners) MarshalLog() any {
	out := make([]string, len(o))
	for i := range o {
		out[i] = o[i].String()
	}
	return out
}

// Because says why r's object was written to, for `kgc explain`: the
// reason, and each owner with its evidence.
func (r *Record) Because() string {
	var b strings.Builder
	b.WriteString(r.Reason)
	for i := range r.Owners {
		o := &r.Owners[i]
		if r.Operation != OpOrphan && o.State == rules.Solid.String() {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "owner %s %s (uid %s) was %s", o.Kind, o.Name, o.UID, ownerStateWords(o))
	}
	return b.String()
}

func ownerStateWords(o *Owner) string {
	switch o.State {
	case "dangling", "orphaned":
		return o.Evidence.Summarize()
	case "waiting":
		return "in foreground deletion: " + o.Evidence.Summarize()
	}
	return o.State + ": " + o.Evidence.Summarize()
}

// Page is what Path serves.
type Page struct {
	// Records, oldest first.
	Records []Record `json:"records"`
	// Size is the ring's capacity (--write-history-size); 0: the history
	// is off.
	Size int `json:"size"`
	// Dropped counts the records the ring has overwritten so far.
	Dropped uint64 `json:"dropped"`
}
