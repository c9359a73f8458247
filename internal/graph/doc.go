// Package graph holds kgc's ownership graph: one node per object UID, edges
// from each dependent to the owners its metadata.ownerReferences name.
//
// Concurrency contract: a Graph has exactly one writer, the graph builder
// goroutine, which calls Apply for every monitor event in order. Any number
// of readers use it concurrently; every reader copies what it returns, and
// no caller ever holds a *node. Apply does no I/O: instead of touching
// queues it returns the Effects the event has (items to re-check), so the
// rules are unit-testable.
//
// The readers, by who calls them:
//
//   - Workers decide from Item (a rules.Item: the object and what each
//     dependent's decision needs), Object, and Owner, the hot path: it is
//     called for every ownerReference of every decision and returns the
//     slice-free OwnerView. BlockingDependents and WaitsFor answer a
//     Foreground owner's questions without copying its dependents.
//   - Display (the server's DOT, JSON and web views) reads Node values
//     through Nodes (a whole-graph or filtered scan), NodesByUID and
//     Components. They hold the read lock for at most ViewBatch nodes at a
//     time, so a view of a large graph never stalls the writer for long,
//     and is not one instant's state.
//   - Len, Counts and Pending serve metrics and the periodic re-check;
//     CheckInvariants serves tests.
//
// Placeholder ("virtual") nodes stand for owners that are referenced but not
// observed (yet, or any more). A virtual node exists exactly as long as at
// least one observed node references its UID. Deciding anything from a
// virtual node is the workers' job, and they verify such owners against
// the API first.
package graph
