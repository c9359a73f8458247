// Package namespaces tests kgc's namespace lifecycle
// (kgc.Options{NamespaceLifecycle: true}) against a real kube-apiserver
// without a controller manager: deleted namespaces with built-in and
// custom resources are emptied (Pods first) and go; objects held by
// finalizers keep their namespace, with conditions saying why, until
// released; a broken API group (a CRD whose conversion webhook is down,
// an unavailable aggregated APIService) is reported in the conditions
// while the rest is deleted; and a namespace with thousands of objects is
// timed.
//
// Not here yet: the same scenarios under kube-controller-manager's
// namespace controller, for comparison (that needs a sandbox that runs it).
package namespaces
