package breaker

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Path is where a running kgc serves its Report (JSON); `kgc breaker
// status --ask-kgc`, `kgc relink --all-held` and `kgc explain --ask-kgc`
// read it.
const Path = "/debug/controllers/garbage-collector-controller/holds"

// Restored is one object held for the restore signature: its owner
// reference names a UID kgc never observed, while another object (FoundUID)
// has the reference's kind, namespace and name.
type Restored struct {
	// Object: "kind namespace/name" as kgc names objects; UID, APIVersion,
	// Kind, Namespace and Name address it.
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
	// Owner is the reference whose UID is gone.
	Owner    metav1.OwnerReference `json:"owner"`
	FoundUID types.UID             `json:"foundUID"`
	// Evidence says how kgc knows, e.g. "a quorum GET found another object
	// (uid …)".
	Evidence string    `json:"evidence"`
	Since    time.Time `json:"since"`
}

// Report is what a running kgc holds, and why.
type Report struct {
	// Breaker is the breaker's state (nil: the breaker is off).
	Breaker *Status `json:"breaker,omitempty"`
	// Lease is where trips are recorded and resumes read
	// ("namespace/name"; empty: in memory only).
	Lease string `json:"lease,omitempty"`
	// HoldRestored reports whether the restore-signature hold is on;
	// Restored lists the objects it holds.
	HoldRestored bool       `json:"holdRestored"`
	Restored     []Restored `json:"restored,omitempty"`
}
