// Package namespaces is kgc's namespace lifecycle (kgc run
// --namespace-lifecycle, kgc.Options.NamespaceLifecycle): what
// kube-controller-manager's namespace controller does, for API servers
// that run without a controller manager. When a Namespace is deleting and
// still carries the "kubernetes" finalizer in spec.finalizers, it deletes
// every namespaced object in it, Pods first, waits for the objects' own
// finalizers (it never removes them), reports progress in the Namespace's
// status conditions, and removes the "kubernetes" finalizer through the
// finalize subresource once a quorum read of every namespaced resource
// finds nothing left; the apiserver then deletes the Namespace.
//
// Feeding: the graph builder's monitors already watch Namespaces and every
// deletable resource, so the Controller lists and watches nothing of its
// own. It is a builder Sink (Observed): a Namespace observed deleting is
// queued at once, and a deletion observed inside a namespace being
// emptied queues that namespace again (batched), so that a namespace whose
// last finalizer is released goes without waiting for a timer. A backstop
// timer covers what no monitor watches (events, resources without watch).
//
// Concurrency: Observed runs on the graph builder's goroutine and only
// queues; Run's workers (Config.Workers) each take one namespace at a time
// from a rate-limited work queue (a namespace is never processed by two
// workers at once) and do all the API calls, through an API (package
// apiops). The decisions — which resources to empty, what the conditions
// say, whether the finalizer may go — are pure functions of what those
// calls returned (conditions.go, content.go), unit-tested with fakes.
//
// Correctness: see the comment on Controller.sync, and docs/correctness.md.
package namespaces
