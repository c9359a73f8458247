// Package faults tests kgc under faults, against a real kube-apiserver and
// etcd (package controlplane), one control plane for the package:
//
//   - TestSIGKILLMidForegroundCascade: the kgc binary is killed with SIGKILL
//     in the middle of a 500-dependent Foreground cascade; the cascade stays
//     stuck while no kgc runs, and a restarted kgc finishes it.
//   - TestAPIServerRestartMidCascade: kube-apiserver alone is stopped and
//     restarted on the same address and etcd in the middle of a cascade;
//     kgc reconnects, resumes its watches and finishes.
//   - TestWatchExpiry: kgc's watches are cut while changes are made and
//     etcd is compacted; the resumed watches are answered 410 Gone ("too
//     old resource version"), kgc lists again and converges.
//   - TestInjectedWriteFaults: a seeded 30% of kgc's writes fail with 409 or
//     5xx; Background, Foreground and Orphan cascades still end right, with
//     a bounded number of attempts spread in time by backoff.
//   - TestFirstListFailedPartWay: kgc's first LIST of PodTemplates fails
//     after its first page (faultproxy.PageLists), whose owner is deleted
//     before a list completes; the complete list sweeps it and its
//     dependent is collected (a bug the simulator found).
//   - TestWatchNotFoundAfterCRDDeletion: a CRD is deleted while kgc's
//     watch of its resource is down and discovery fails; the resumed watch
//     answers 404, kgc lists again (404: empty) and a Foreground owner
//     waiting for one of its instances goes (a bug the simulator found).
//   - TestUnblockKeepsClientsOrphan: two objects in a blocking cycle, one
//     deleted with Orphan by a client while kgc's watch of it lags, the
//     other Foreground; kgc's cycle-breaking unblock must not be followed
//     by a DELETE that swaps the client's orphan finalizer for
//     foregroundDeletion (a bug the simulator found).
//
// Objects are ConfigMaps and Secrets in a namespace per test; the package's
// control plane runs without a watch cache for Secrets (see TestWatchExpiry
// for why). A safety watcher records every deletion of a protected
// object, and every test ends by checking that none happened.
//
// Seeds: KGC_SEED sets the fault injector's seed (it is always logged).
// KGC_IT_VERBOSE=1 prints the control plane's and kgc's logs.
package faults
