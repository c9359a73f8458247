// Package model holds kgc's randomized, model-based safety test.
//
// TestModel builds random owner forests across four kinds (ConfigMaps,
// Secrets, a namespaced and a cluster-scoped custom resource), runs random
// operations against the real kube-apiserver while kgc collects (deletes with
// every propagation policy, ownerReference edits, custom finalizer removals,
// new dependents), and checks two things:
//
//   - safety, judged by an independent watcher that records every object's
//     history (informers of its own through sandbox/internal/safety's
//     Stream: no kgc code, no fault proxy, not the gc tests' judge) and compares
//     states by resourceVersion, a global order with one etcd behind the
//     apiserver (watches of different resources are not ordered relative
//     to each other, so nothing is judged by arrival). The rules are the
//     guarantees S1–S3 of docs/correctness.md, as the watcher can judge
//     them:
//     S1: no object is deleted by the collector while one of its owners
//     exists and has never been in Foreground deletion (an owner being
//     deleted with another finalizer, or orphaning, still holds);
//     S2: when an owner deleted with Orphan loses its orphan finalizer, no
//     object refers to it any more, and no object is deleted while it
//     still refers to such an owner (a dependent whose reference to it was
//     removed may go on account of another owner: S1 judges that);
//     S3: when an owner in Foreground deletion loses its
//     foregroundDeletion finalizer, no existing object refers to it with
//     blockOwnerDeletion=true (a dependent being deleted still blocks);
//   - the final state, once the cluster is quiet, equals what a small
//     reference simulator of the documented semantics (docs/semantics.md)
//     computes from the test's own record of what it did. Operations whose
//     outcome would depend on the collector's order are not made (a
//     dependent shared by an orphaning owner and a doomed one); two owners
//     orphaning the same dependents are.
//
// Each seed runs its own in-process collectors through a fault proxy
// (internal/faultproxy) and puts them through seeded chaos (chaos_test.go):
// kgc's watches of one or two resources delayed, collector restarts with
// operations going on while none runs, and a custom resource whose LIST and
// WATCH fail for kgc for a few seconds at one of its starts. Every
// collector keeps the orphan journal, on one Lease in the seed's namespace
// that outlives its restarts, as `kgc run` does by default (--orphan-journal,
// with its default TTL), so a restart remembers what operators' kgc does.
// The plan is logged per seed, and each restart with its time and the
// highest resourceVersion the watcher had seen; KGC_SEED replays the plan
// (the apiserver's timing is not replayed). A failure prints the violations
// and the watcher's history of each object involved and of its owners, each
// state with the time the watcher saw it.
//
// Known limits. Two of docs/correctness.md's "Known limits" can show under
// this chaos; a finding is counted as one (logged, with its evidence, and
// totalled per seed and in the summary) instead of failing the test only
// where the run's own record shows the limit's defining facts, and every
// other finding fails:
//
//   - watch-lag: an owner's orphan or foregroundDeletion finalizer went
//     while a dependent referred to it (S2's first half, S3), and when the
//     collector decided that removal its watch of the dependent's resource
//     was open and had delivered that resource's changes only up to a
//     revision older than the one that gave the dependent its reference —
//     a watch the delay chaos holds back, or any watch by its own latency
//     (a reference written a revision before the release). The record (delivery_test.go) sits
//     between each collector and the fault proxy and reads what reached
//     the collector: the resourceVersion of each monitor's list (the one
//     its next watch resumes from; the workers' owner-lookup LISTs and a
//     monitor's one-item probe never reach the graph, and counting them
//     once refused the excuse for true lags), each watch event's (a
//     streaming list's only from its closing bookmark on), and the
//     resourceVersion each of its writes produced, which identifies the
//     write that removed the finalizer. When it decided is bounded from
//     above: an orphan removal by the orphan journal write kgc makes
//     between the decision and the removal (the last one sent before the
//     removal), a foregroundDeletion removal by the V(2) line kgc logs
//     when it hands the removal to its write (read by a log sink), else
//     by the request's send; an event that arrived after that instant
//     could not have been in the decision. A resource the collector had
//     not listed yet, or a reference delivered before the decision, is no
//     excuse.
//   - restart-memory: a dependent deleted while it still referred to an
//     owner deleted with Orphan (S2's second half), where that owner's
//     release was excused as watch lag and a collector started more than
//     the journal's TTL after the release: the journal had forgotten it.
//     No seed runs for 10 minutes, so with the journal on every such
//     deletion fails.
//
// Environment: KGC_SEED fixes the first seed (default: time based; every
// seed is logged), KGC_MODEL_SEEDS the number of seeds (default 3),
// KGC_MODEL_OBJECTS the size of each initial forest (default 150),
// KGC_MODEL_OPS the number of operations per seed (default: as many as
// objects), KGC_MODEL_CHAOS the chaos kinds (default "restart,fail,pages";
// "delay,restart,fail,pages" adds delayed watches, under which the
// watch-lag limit shows and is classified as above; "none" for none) and KGC_MODEL_RESTARTS the most restarts per seed
// (default 2). `make soak` runs many more seeds with larger forests.
package model
