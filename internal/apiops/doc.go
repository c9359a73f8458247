// Package apiops is the only code in kgc that writes to the objects it
// collects: their DELETEs and patches. (kgc's other writes are Events, sent
// by the recorder of package kgc, and the leader election Lease.) It also
// makes the collector's owner lookups, single GETs and LISTs; the monitors'
// LISTs and WATCHes live in package discovery. Every write is conditional:
// DELETEs carry UID and resourceVersion preconditions; patches are JSON
// patches that test metadata.uid and the very list they replace (see
// ReplaceOwnerReferences), so a decision made from a stale cache fails
// (IsStale) instead of doing the wrong thing. The inspection commands
// (package inspect) read through their own client, GETs included, and never
// write.
package apiops
