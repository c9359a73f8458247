package inspect

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/breaker"
)

// Hold says that a running kgc holds an object it decided to delete, and
// how to let it go (breaker.Report).
type Hold struct {
	// Reason: a breaker signal, or "restored-owner".
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Why in plain words, and what an operator does about it.
	Why    string `json:"why"`
	Action string `json:"action"`
}

// HoldOf returns the hold on the object with uid in r, if r holds it.
func HoldOf(r *breaker.Report, uid types.UID) *Hold {
	if r == nil {
		return nil
	}
	for _, h := range r.Restored {
		if h.UID != uid {
			continue
		}
		ns := ""
		if h.Namespace != "" {
			ns = " -n " + h.Namespace
		}
		return &Hold{
			Reason: "restored-owner", Since: h.Since,
			Why: fmt.Sprintf("held: its owner reference %s %s names uid %s, which kgc never observed, while %s %s exists with uid %s (%s): the restore signature, not deleted",
				h.Owner.Kind, h.Owner.Name, h.Owner.UID, h.Owner.Kind, h.Owner.Name, h.FoundUID, h.Evidence),
			Action: fmt.Sprintf("relink it to the existing owner with `kgc relink%s %s/%s`, or delete it yourself if it is a leftover", ns, strings.ToLower(h.Kind), h.Name),
		}
	}
	if r.Breaker == nil {
		return nil
	}
	for _, h := range r.Breaker.Held {
		if h.UID != uid {
			continue
		}
		hold := &Hold{Reason: string(h.Signal), Since: h.Since, Action: "resume with `kgc breaker resume`"}
		if ns, name, ok := strings.Cut(r.Lease, "/"); ok {
			hold.Action = fmt.Sprintf("resume with `kgc breaker resume --lease-namespace %s --lease-name %s`", ns, name)
		}
		hold.Why = "held: the deletion circuit breaker tripped"
		for _, t := range r.Breaker.Trips {
			if t.Signal == h.Signal && t.Resource == h.Resource {
				hold.Why = fmt.Sprintf("held: the deletion circuit breaker tripped at %s because %s", t.At.UTC().Format(time.RFC3339), t.Because())
			}
		}
		return hold
	}
	return nil
}
