// Package safety watches what happens to the integration tests' objects
// for a whole test package run, so that tests can judge deletions they
// could not see with a point-in-time check: an object deleted after the
// test looked, or deleted and recreated.
//
// Two layers:
//
//   - Stream runs metadata informers over a set of resources, filtered by
//     a label, hands every event to a callback, and offers a barrier
//     (Sync): marker objects, created now, must come back through every
//     watch, after which the callback has seen every earlier change.
//   - Watcher is the safety watcher of the gc and faults tests: it records
//     each deletion — or start of deletion — of an object labelled
//     LabelProtected, charged to the test named by its LabelTest label, and
//     Check reports them once the barrier has passed.
//
// The model tests (integration/model) keep their own judge of kgc's
// deletions, an independent oracle of the documented semantics, and use
// only the Stream.
//
// The informers run over the caller's client; give them a connection
// without fault injection, or a fault could hide a deletion from the
// judge. Across an apiserver restart they relist, and a deletion missed in
// the gap still arrives, as a deletion whose final state is unknown.
package safety
