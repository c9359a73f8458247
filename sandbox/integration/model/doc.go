// Package model holds kgc's randomized, model-based safety test.
//
// TestModel builds random owner forests across four kinds (ConfigMaps,
// Secrets, a namespaced and a cluster-scoped custom resource), runs random
// operations against the real kube-apiserver while kgc collects (deletes with
// every propagation policy, ownerReference edits, custom finalizer removals,
// new dependents), and checks two things:
//
//   - safety, judged by an independent watcher that records every object's
//     history: no object is deleted by the collector while one of its owners
//     is alive and not being deleted;
//   - the final state, once the cluster is quiet, equals what a small
//     reference simulator of the documented semantics (docs/design.md)
//     computes from the test's own record of what it did.
//
// Environment: KGC_SEED fixes the first seed (default: time based; every
// seed is logged), KGC_MODEL_SEEDS the number of seeds (default 3),
// KGC_MODEL_OBJECTS the size of each initial forest (default 150) and
// KGC_MODEL_OPS the number of operations per seed (default: as many as
// objects). `make soak` runs many more seeds with larger forests.
package model
