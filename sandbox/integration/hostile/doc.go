// Package hostile runs kgc against the real kube-apiserver with hostile and
// odd ownerReferences: unknown kinds, unserved versions, a wrong name for a
// live UID, cross-namespace owners, cluster-scoped dependents of namespaced
// owners, duplicate references, 200 references on one object, one owner with
// 20,000 dependents and names of the maximal length. Each case asserts the
// outcome the semantics of docs/semantics.md require, the evidence kgc gives
// (an Event or a log line), that retries stay bounded (kgc's own metrics and
// a count of its requests over a window), and that kgc keeps running.
//
// KGC_HOSTILE_DEPENDENTS sets the size of the large Background cascade
// (default 20000), KGC_HOSTILE_FOREGROUND_DEPENDENTS the size of the large
// Foreground cascade (default 2000).
package hostile
