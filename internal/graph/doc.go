// Package graph holds kgc's ownership graph: one node per object UID, edges
// from each dependent to the owners its metadata.ownerReferences name.
//
// Concurrency contract: a Graph has exactly one writer, the graph builder
// goroutine, which calls Apply for every monitor event in order. Any number
// of readers — the workers, the HTTP server's graph views, the metrics —
// read it concurrently through the query methods (Item, Owner, Object,
// Snapshot, Views, Counts, …), which take the read lock and copy what they
// return; no caller ever holds a *node.
// Apply does no I/O: instead of touching queues it returns the Effects the
// event has (items to re-check), so the rules are unit-testable.
//
// Placeholder ("virtual") nodes stand for owners that are referenced but not
// observed (yet, or any more). A virtual node exists exactly as long as at
// least one observed node references its UID. Deciding anything from a
// virtual node is the collector's job, and it verifies such owners against
// the API first.
package graph
