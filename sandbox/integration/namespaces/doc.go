// Package namespaces tests kgc's namespace lifecycle
// (kgc.Options{NamespaceLifecycle: true}) against a real kube-apiserver
// without a controller manager, side by side with kube-controller-manager
// v1.36.3's namespace controller in a whole sandbox cluster
// (cpproc.Options.Cluster), and compares the two: every scenario runs
// on both, and the conditions (type, status, reason, message) and the
// objects' states at each checkpoint must be the same, but for the known
// differences docs/semantics.md documents (marked in the scenarios, and
// failing once they vanish).
//
// The scenarios: deleted namespaces with built-in and custom resources are
// emptied (Pods first) and go, their neighbours untouched; objects held by
// finalizers keep their namespace, with conditions saying why, until
// released; a broken API group (a CRD whose conversion webhook is down, an
// unavailable aggregated APIService) is reported in the conditions while
// the rest is deleted; and a namespace with thousands of objects goes.
package namespaces
