// Package orphanlog is kgc's durable memory of the owners it orphaned: the
// UIDs of owners deleted with the Orphan policy whose orphan finalizer kgc
// removed, written down before each removal and read back when kgc starts.
//
// Why it exists. When kgc removes an owner's orphan finalizer it concludes
// "no dependent references this owner any more" from its graph. Two known
// limits make that conclusion early for some dependent D (docs/correctness.md,
// "Known limits"): D's resource had never been listed when --unlisted-hold
// ran out, or D's event was still on its resource's watch, behind the owner's.
// Either way D is seen after the owner is gone, with a reference to an owner
// that no longer exists. kgc must orphan D then (remove the reference), not
// delete it as dangling — and it can only tell the two apart if it remembers
// that the owner went with Orphan. A memory held in the process alone is lost
// on a restart, a rolling upgrade or a leader change, and the next kgc deleted
// D: data loss (S2). The journal closes that: an owner is recorded durably
// before its finalizer is removed, so every kgc that may see D knows.
//
// Facts. An entry is written before the finalizer removal it covers
// (Journal.Record blocks until its entry is durable), so no kgc can observe
// the owner gone with Orphan without the entry existing. Once a removal may
// have landed (it succeeded, or its answer was lost: Confirm), its entry
// stays for its TTL, whatever a later attempt for the same owner meets: a
// later attempt decided on a graph that has not seen the first removal is
// refused exactly because the first one landed. An entry is withdrawn
// (Withdraw) only when the attempt it was made for was refused, or its
// Record failed, and no removal may rest on it: the Record made it (the
// journal did not hold the owner before), no Confirm followed, and the
// Store did not hold it when read (another kgc's removal may rest on it).
// A crash between Record and the removal leaves an entry for an owner that
// may later go another way, and its dependents are then orphaned instead of
// deleted: the journal errs towards keeping objects.
//
// Bounds. An entry is kept for TTL after it was recorded (default 10 minutes:
// far longer than any watch delivery lag), and for as long as some resource
// that could hold dependents is unlisted or failing (Keep), since a dependent
// there has not been seen, and for TTL after that (and after the process
// started): the dependents of a resource just listed whole are decided a
// little after its list lands. At most MaxEntries entries are kept (the
// oldest go first, and the loss is logged).
//
// Writes. Records are group-committed: one writer goroutine writes every
// entry pending at the time it starts, so a mass Orphan deletion of N owners
// costs far fewer than N writes; each write is an Update conditional on the
// version last read (a conflict re-reads and merges: entries are only ever
// added by kgc processes, so the union is always right).
package orphanlog
