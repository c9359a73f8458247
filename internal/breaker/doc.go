// Package breaker is kgc's circuit breaker for mass deletions: it watches
// the deletions kgc is about to make because their owners are gone, and
// stops them when they look like a restore, a rollback or a broken API
// rather than people deleting things.
//
// It is pure bookkeeping (no I/O, a clock passed in): the workers ask it,
// for each deletion resting on a dangling owner, whether the deletion may
// go (Admit); package workers holds the ones it refuses and queues them
// again once an operator resumes (Resume). Where the trips are recorded
// and how an operator resumes them (annotations on kgc's Lease) is
// lease.go; what is shown where (metrics, /readyz, explain) is the
// callers'.
//
// Two signals, each counted over a sliding window:
//
//   - Unobserved: the distinct owners kgc never observed alive that
//     deletions rest on (each once per window, however many dependents) —
//     the dangling fact comes from a quorum GET or LIST answering
//     not-found or another UID, for a UID the graph never held. That is
//     what a restore looks like (objects recreated from a backup, naming
//     owners whose UIDs are from before it) and what an API that answers
//     404 wrongly looks like; an owner someone deleted while kgc watched
//     is observed (a watch DELETED event, or a relist that no longer holds
//     a UID the graph had).
//   - Dangling: the owners found dangling, as a fraction of the graph:
//     distinct owners that kgc did not delete itself, each with a
//     dependent about to be deleted. A user deleting a Job with 5,000 Pods
//     counts one owner; a cascade kgc runs (a Deployment's ReplicaSet,
//     then its Pods) counts once, at its root: the Pods rest on a
//     ReplicaSet kgc deleted, the consequence of a decision already
//     counted. What it catches is many unrelated owners vanishing at once
//     (an API answering 404 for a whole resource, a rollback), not one
//     big owner going.
//
// A signal trips when its count in the window would exceed its limit: the
// deletion that would cross it is held, and so is every later one on that
// basis until an operator resumes. Unobserved counts deletions (a restore
// recreates objects, each naming an owner from before it); Dangling counts
// owners (see above). A tripped Unobserved holds deletions
// resting on an owner never observed alive; a tripped Dangling holds every
// deletion resting on a dangling owner. Deletions the breaker is not asked
// about — of dependents of owners in foreground deletion, orphaning,
// finalizer removals, references removed next to a solid owner — never
// stop.
//
// All methods are safe for concurrent use.
package breaker
