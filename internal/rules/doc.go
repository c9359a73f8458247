// Package rules is the one home of kgc's garbage-collection rules: no I/O,
// no goroutines. It holds
//
//   - the object type every reader shares (Object, Item, Identity,
//     Coordinates) and its predicates (DeletingDependents, Orphaning,
//     Blocks, Matches);
//   - the classification of one ownerReference from gathered facts
//     (OwnerMapping and Locate: which resource and namespace the owner
//     must be in; Classify: what was found there), with the Reason;
//   - every decision: DecideDependent, DecideForegroundOwner,
//     DecideOrphan, and cycle detection (CycleCheck).
//
// The collector's workers gather facts from the graph and the API server,
// the inspection commands (explain, preview, tree) from the API server or
// a running kgc; all of them call these functions, so a new rule written
// here applies to what kgc does and to what it says it would do alike.
// The semantics they implement are specified in docs/semantics.md.
package rules
