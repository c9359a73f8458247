// Package shadow compares kgc's decisions in shadow mode (kgc run
// --dry-run) with what the cluster's own garbage collector then does, as
// kgc's monitors observe it.
//
// In shadow mode the workers decide as usual and make no write; each write
// they would have made reaches the Tracker as a history.Record (Decided).
// The graph builder shows the Tracker every event before applying it
// (Diff turns the graph's old state and the event into a Change: the
// object newly deleting or gone, references removed, orphan or
// foregroundDeletion finalizers removed). The Tracker matches the two:
//
//   - a decision agrees when its effect shows within the window: "delete
//     X" when X gets a deletionTimestamp or disappears, "remove references
//     R from X" (or orphan X) when X's ownerReferences lose all of R,
//     "remove finalizer F from O" when O loses F or disappears;
//   - a decision whose effect did not show within the window is kgc_only;
//   - a change only a garbage collector would make (a deletion of an
//     object none of whose owners is solid in kgc's graph; the removal of
//     a reference to an owner that is gone, in foreground deletion or
//     orphaning; the removal of an orphan or foregroundDeletion finalizer
//     from a deleting object) without a matching decision within the
//     window is other_only. A matching decision made later within the
//     window (it was in flight) agrees.
//
// Concurrency: Decided is called by the workers, Observe by the graph
// builder goroutine, Expire by Run's ticker and the readers by the HTTP
// server; one mutex guards everything, and the Judge callback is called
// without it (it calls Decided).
package shadow
