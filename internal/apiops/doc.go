// Package apiops is the only code in kgc's collector that writes to the API
// server, and the only code that reads single objects for it. Every write is
// conditional: DELETEs carry UID and resourceVersion preconditions; patches
// are JSON patches that test metadata.uid and the very list they replace
// (see ReplaceOwnerReferences), so a decision made from a stale cache fails
// (IsStale) instead of doing the wrong thing. The inspection commands
// (package inspect) read through their own clients: they never write.
package apiops
