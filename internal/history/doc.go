// Package history is kgc's record of its own writes: for every DELETE and
// patch the collector sends, what it wrote, why (each owner reference's
// state and the evidence it rests on: an observed deletion at a
// resourceVersion, a quorum read's answer, a LIST that did not hold the
// owner), the policy, the preconditions sent and the outcome.
//
// Record is a wire format: the collector logs it, serves it as JSON at
// Path (package server), and `kgc explain --ask-kgc` reads it back for an
// object that no longer exists. Add fields, never change or remove one.
//
// Ring keeps the last records in memory, bounded, for any number of
// concurrent writers and readers; its Add is on the path of every write
// (one mutex hold and a copy, no allocation).
package history
