// Package cluster tests kgc beside the real controllers: a whole cluster runs
// in the control plane's process (cpproc.Options.Cluster:
// kube-controller-manager with every controller but its garbage collector,
// kube-scheduler, and simulated nodes on which Pods run and terminate
// gracefully), and one in-process kgc collector does the garbage collection
// for the whole package.
//
// The controllers write the ownerReferences here — the Deployment
// controller's ReplicaSets, the ReplicaSet controller adopting and releasing
// Pods, the Job, CronJob, StatefulSet and DaemonSet controllers — and they
// delete things too (old ReplicaSets past the revision history, surplus
// Pods, old Jobs), so a deletion a test observes is not necessarily kgc's.
// Three judges tell kgc's apart:
//
//   - the auditor wraps kgc's own HTTP transport: before each DELETE kgc
//     sends, it reads the object and each of its owners from the apiserver,
//     and records the deletion as a violation when an owner exists, with the
//     referenced UID, and is not being deleted in the foreground (the
//     garbage collector's definition of a live owner), or when the object
//     has no owner at all. It also tells tests which objects kgc deleted;
//   - the recorder keeps every watch event of the tests' workloads, so that
//     tests can check the order of deletions (a foreground owner goes after
//     its dependents) by the resourceVersions of the deletion events, which
//     are etcd revisions and totally ordered;
//   - the safety watcher (sandbox/internal/safety) fails a test if an object
//     labelled protected is deleted while the test runs: orphaned objects
//     and Pods released by their controller must survive.
//
// Conventions follow the other integration packages: each test has its own
// namespace and may run in parallel; every wait polls and is bounded; "kgc
// did not delete X" is asserted after a sentinel shows kgc had its chance.
package cluster
