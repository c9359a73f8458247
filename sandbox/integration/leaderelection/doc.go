// Package leaderelection tests `kgc run --leader-elect` the way it runs in
// a cluster: two real kgc processes (the binary, built once by TestMain)
// against one real kube-apiserver (package controlplane), competing for a
// coordination.k8s.io Lease.
//
// What it proves: exactly one process holds the Lease and only that one
// collects; when the leader is killed mid-cascade (SIGKILL, no chance to
// release), the standby takes the Lease over once it expires and finishes
// the cascade; a graceful shutdown releases the Lease; a leader that loses
// its Lease stops and exits non-zero.
//
// Every wait polls with a bound. The processes' logs (-v=2) go to files,
// printed when a test fails; set KGC_IT_VERBOSE=1 to print them always.
package leaderelection
