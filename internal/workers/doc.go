// Package workers is kgc's attempt-to-delete and attempt-to-orphan
// workers: for each queued UID they copy the item from the graph, gather
// the facts about its owners (resolve.go: the graph where it can vouch for
// an owner, a quorum GET or a shared LIST where it cannot), decide with
// package rules, and hand the writes that carry the decision out to a
// bounded pool of write slots (package apiops makes the calls). Planning
// never writes to the cluster's objects; its one write is kgc's own: the
// orphan journal's entry, made durable before an orphan finalizer removal
// is handed to a write slot (planOrphanItem).
//
// plan.go decides (planDeleteItem, planOrphanItem) and returns writes;
// workers.go runs the queues and hands the writes to the write slots;
// execute.go makes the calls. What every write rests on, and why each
// fact is fresh enough, is written next to the code that makes it
// (execute.go) and in docs/correctness.md:
// preconditions guard the object written; facts about other objects are
// monotonic (a UID observed deleted, a deletionTimestamp), confirmed by a
// quorum read under a deletion lock (locks.go), or read from a graph in
// which every resource that could hold a counter-example has been listed
// (negative.go).
//
// hold.go may withhold a deletion decided on a dangling owner: the
// deletion circuit breaker (package breaker) and the restore-signature
// hold. It only ever withholds a write; it never adds one.
// In shadow mode (Config.DryRun; shadow.go) every write site records what
// it would have written instead of calling the API server, and nothing
// that stands for kgc's own writes is remembered; docs/shadow.md.
package workers
