// Package graphapi is the JSON form of kgc's ownership graph: what
// GET /debug/controllers/garbage-collector-controller/graph?format=json
// serves, what the /ui web view draws, and what `kgc explain|tree|preview
// --server URL` read from a running kgc. It is a wire format: add fields,
// never change or remove one.
package graphapi

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Node states, from the collector's point of view.
const (
	// StateLive: observed, not being deleted.
	StateLive = "live"
	// StateDeleting: deletionTimestamp set, no collector finalizer pending.
	StateDeleting = "deleting"
	// StateWaitingForDependents: in Foreground deletion (foregroundDeletion
	// finalizer): waits until no blocking dependent remains.
	StateWaitingForDependents = "waitingForDependents"
	// StateOrphaning: being deleted with the orphan finalizer: its
	// dependents' references to it are being removed.
	StateOrphaning = "orphaning"
	// StatePlaceholder: referenced by a dependent but never observed (a
	// "virtual" node); kgc verifies it against the API before deciding.
	StatePlaceholder = "placeholder"
	// StateAbsent: referenced by a dependent and known not to exist (the
	// owner was observed deleted, or a lookup found nothing): dangling.
	StateAbsent = "absent"
)

// DeletingForQuery is the graph endpoint's query parameter that selects
// the connected components of the objects whose deletion was asked for at
// least a duration ago (?deletingFor=5m): what `kgc stuck --server`, the
// web view's stuck filter and kgc's stuck metrics read.
const DeletingForQuery = "deletingFor"

// Graph is a set of nodes with their edges.
type Graph struct {
	// Nodes sorted by UID.
	Nodes []Node `json:"nodes"`
	// Total is the number of nodes in the whole graph, before filtering.
	Total int `json:"total"`
	// Synced reports whether kgc's monitors had synced when this was taken:
	// before that the graph may be missing objects.
	Synced bool `json:"synced"`
	// Unlisted are the monitored resources kgc has never listed completely
	// (a conversion webhook down, an unavailable APIService, a monitor still
	// starting): their objects are missing from the graph, and kgc holds
	// the orphan and foregroundDeletion finalizers of owners whose
	// dependents they could hold (up to --unlisted-hold).
	Unlisted []Resource `json:"unlisted,omitempty"`
}

// Resource is one monitored resource.
type Resource struct {
	// Resource is group/version/resource ("v1/configmaps" in the core group).
	Resource   string `json:"resource"`
	Namespaced bool   `json:"namespaced"`
	// Error is the last error of its list or watch, if any.
	Error string `json:"error,omitempty"`
}

// Node is one object, observed or referenced.
type Node struct {
	UID        types.UID `json:"uid"`
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	// State is one of the State* constants.
	State string `json:"state"`
	// Finalizers as observed (empty for placeholders).
	Finalizers []string `json:"finalizers,omitempty"`
	// OwnerReferences as observed (empty for placeholders).
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	// DeletionTimestamp as observed, for an object being deleted.
	DeletionTimestamp *metav1.Time `json:"deletionTimestamp,omitempty"`
	// Dependents are the UIDs of the observed objects that reference this one.
	Dependents []types.UID `json:"dependents,omitempty"`
}
