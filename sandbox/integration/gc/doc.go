// Package gc holds kgc's garbage-collection integration tests.
//
// The tests run against a real kube-apiserver with embedded etcd (package
// controlplane) and one in-process kgc collector shared by the whole package
// (see TestMain). Nothing else reconciles anything: no controller manager runs,
// Pods are never scheduled, so every deletion a test observes that the test did
// not issue itself was made by kgc (or, for CRD instances, by the apiserver's
// CRD finalizer).
//
// Conventions:
//   - each test works in its own namespace (newTestCase) and may run in
//     parallel with the others;
//   - every wait is bounded (waitTimeout) and polls with
//     wait.PollUntilContextTimeout; nothing sleeps to assert;
//   - "kgc must NOT delete X" is asserted with a sentinel (assertKeptAfterGC):
//     an extra garbage object is created and its owner deleted after the action
//     under test; once kgc has collected the sentinel it has had its chance to
//     act on X, and X is checked then;
//   - objects that must never be deleted carry the protected label; a
//     package-wide watcher (sandbox/internal/safety) records any deletion of them and
//     fails the owning test.
package gc
