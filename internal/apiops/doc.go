// Package apiops is the only code in kgc that writes to (or reads single
// objects from) the API server. Every write is conditional: DELETEs carry UID
// and resourceVersion preconditions, patches carry metadata.uid and
// metadata.resourceVersion, so a decision made from a stale cache fails with
// a Conflict instead of doing the wrong thing.
package apiops
