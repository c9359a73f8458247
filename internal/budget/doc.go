// Package budget is where the collector's requests wait for their turn:
// the client-side rate limiter of the workers' API client (Limiter) and
// the write slots (Slots), both of which serve awaited work first.
//
// Awaited work is work that an owner's finalizer waits for: removing an
// orphaning owner's references from its dependents and then its orphan
// finalizer, deleting the dependents that block an owner in Foreground
// deletion and then its foregroundDeletion finalizer. `kubectl delete`
// (with --cascade=orphan or foreground) waits until that owner is gone.
// Deleting garbage whose owner is already gone (Background) is work
// nobody waits on. When both compete for the same budget, the awaited
// work goes first, in arrival order within each kind, so that an owner
// someone waits for is gone as soon as the budget allows, however much
// other garbage there is; the other work waits, and runs as soon as no
// awaited work is ready. Order is all this changes: every request is
// made, and what each one rests on is unchanged.
//
// The mark travels with the request's context (WithAwaited), which
// client-go hands to the rate limiter (rest.Config.RateLimiter).
package budget
