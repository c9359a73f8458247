// Package cpproc runs the sandbox's control plane (package controlplane:
// etcd, kube-apiserver and, with Options.Cluster, the rest of a cluster)
// in a child process, and gives the parent the same handle it would have
// in-process: an admin *rest.Config, a kubeconfig, and the operations the
// integration tests perform on the control plane (stopping and starting
// kube-apiserver, compacting, snapshotting and restoring etcd).
//
// It exists for the tests. They are built with -race, which is meant for
// kgc's code; kube-apiserver in the same binary would run several times
// slower under the race detector, compete with kgc for the CPU, and make
// every test binary link (and, on an empty build cache, compile)
// k8s.io/kubernetes with race instrumentation. The child is built once,
// without -race, from this module (see Start), and this package imports
// nothing of k8s.io/kubernetes, so neither do the test binaries.
//
// # The child
//
// The child is cmd kgc-controlplane (sandbox/internal/cmd/kgc-controlplane),
// or any command that calls cpserver.Main (kgc-bench serves as its own
// child). It talks to the parent over two pipes, not over stdin and
// stdout, so that whatever the control plane's libraries print cannot
// corrupt the protocol: it reads requests from file descriptor RequestFD
// and writes messages to MessageFD; its stdout and stderr are its log
// (Options.Output).
//
// # The protocol
//
// Each request is one line of JSON (Request) carrying an ID that grows by
// one per request. The first is OpStart, with the control plane's options;
// the last is OpStop. The parent sends one request at a time and waits for
// its reply; meanwhile it may send OpCancel with the request's ID, which
// cancels the context of the operation in progress (as a canceled ctx
// would in-process), and the reply then comes early. Each message is one
// line of JSON (Message): a progress line of the control plane (what
// controlplane.Options.Logf receives), or the reply to the request in
// progress. Progress lines of an operation come before its reply, so the
// parent's Logf is called before the method that caused them returns.
//
// # Lifetime
//
// The child must not outlive its parent: a test binary killed by `go
// test`'s timeout or a signal would otherwise leave etcd and
// kube-apiserver running, and their directory behind. The child stops its
// control plane (removing a directory it created) and exits when its
// request pipe reaches end of file, which happens when the parent exits
// however it exits, and on SIGTERM, which Linux sends it when the parent
// dies (Pdeathsig). It ignores SIGINT: Ctrl-C reaches the whole process
// group, and the parent stops its control plane when and in the order it
// chooses.
package cpproc
