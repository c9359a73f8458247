// Package controlplane runs a real Kubernetes control plane inside the
// current process: an embedded etcd (go.etcd.io/etcd/server/v3/embed) and a
// kube-apiserver built from k8s.io/kubernetes, wired together the way a
// production cluster wires them; with Options.Cluster also
// kube-controller-manager (every controller but its garbage collector),
// kube-scheduler and simulated nodes (kwok), so that Deployments, Jobs and
// the like work as in production.
//
// It exists so that kgc can be developed, tested and demonstrated against the
// genuine API server — its finalizer handling, preconditions, discovery,
// CRDs and aggregation — without a cluster, a container runtime or any
// downloaded binary.
//
// Typical use in a test:
//
//	cp, err := controlplane.Start(ctx, controlplane.Options{})
//	if err != nil { ... }
//	t.Cleanup(func() { _ = cp.Stop() })
//	client := kubernetes.NewForConfigOrDie(cp.Config)
//
// What runs:
//
//   - etcd listens on 127.0.0.1 on a port the kernel picks (no port races),
//     with fsync disabled: the data is disposable and a sandbox benefits more
//     from write speed than from surviving power loss.
//   - kube-apiserver serves HTTPS on 127.0.0.1 on a kernel-picked port, with
//     every built-in API group, apiextensions (CRDs) and the aggregator.
//     Authorization is RBAC (so RBAC manifests can be exercised through
//     impersonation); the admin identity is a static token (file
//     pki/tokens.csv, group system:masters), and clients verify the serving
//     certificate (for 127.0.0.1) against a CA in pki/. Both live in the
//     directory rather than in the apiserver's memory, so that
//     StopAPIServer / StartAPIServer (RestartAPIServer) can restart
//     kube-apiserver alone on the same address and etcd while existing
//     clients and kubeconfigs keep working. The ServiceAccount admission
//     plugin is disabled because no controller manager exists to create
//     service accounts. A front-proxy CA and client certificate are generated
//     so that aggregated API servers can authenticate the aggregator.
//   - Without Options.Cluster nothing reconciles workloads. With it,
//     kube-controller-manager runs every controller but its garbage
//     collector, kube-scheduler binds Pods to the simulated nodes, and kwok
//     plays their kubelets (Pods become Running and terminate about a
//     second after deletion). No garbage collector runs either way: that
//     is kgc's job.
//
// Everything lives under one directory (Options.Dir): etcd data, certificates
// and the admin kubeconfig. A directory the package created itself is removed
// by Stop; a directory supplied by the caller is kept, so its etcd data
// survives restarts.
//
// The kube-apiserver and etcd log a great deal, including errors that are
// expected in a sandbox (namespaces missing during bootstrap, listeners
// closed at shutdown). Unless Options.Verbose is set, Start silences klog
// short of fatal errors and limits etcd to errors, muted during Stop; real
// failures surface as errors from Start, Stop and API calls instead. klog
// is process-global, so this affects the whole process.
package controlplane
