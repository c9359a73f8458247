// Package discovery finds the resources kgc must watch and runs one
// metadata-only list-and-watch loop ("monitor") per resource.
//
// A monitor delivers every observation of its resource, in order, to one
// callback (the graph builder's queue) and keeps nothing per object: it
// converts each object to the few metadata fields decisions need as it
// arrives, and the graph is the only copy. With a PageLister (kgc always
// has one) list pages are read raw into a reused buffer and decoded
// straight into those fields (pagedecode.go): labels, annotations and
// managedFields are skipped, never allocated. Before each page a monitor
// waits for the graph builder's gate, so that a list is never more than
// about a page ahead of the graph. A relist ends with a Relisted
// event, on which the graph drops what the list no longer contains.
// Monitors are added and removed as resources appear and disappear;
// stopping one ends its goroutine.
//
// Resources that change or go, and why the graph keeps no ghost:
//   - The graph knows a resource by its group and kind, not its version,
//     and at most one monitor runs per group and kind. When a resource's
//     preferred version changes, the new version's monitor's first list
//     sweeps what the old one recorded and no longer exists.
//   - A LIST answering 404 is a complete, empty list (Status.Synced, and
//     NotServed): every object of the resource is removed from the graph as
//     deleted, and the monitor lists again with backoff instead of watching.
//     kube-apiserver answers so for a deleted CRD it still lists in
//     discovery; design S4 counts such a resource as listed.
//   - A resource that a CRD served and that vanishes from discovery has its
//     objects removed as deleted once a LIST of it answers 404
//     (Monitors.prove), so delete events its stopped monitor never
//     delivered are not lost. (A vanished aggregated API's objects stay:
//     its server may serve them again, under the same UIDs.)
//   - A resource whose group failed discovery keeps its monitor and is never
//     swept: a failing API is not a vanished one.
//
// Files, by role:
//   - resources.go: which resources are deletable and monitored.
//   - monitors.go: Monitors, the lifecycle of the monitors (Sync starts
//     and stops them as discovery changes; restarts; Stop).
//   - listwatch.go: one monitor's loop: list (by pages, lean.go and
//     pagedecode.go; or streaming, streamlist.go and watchdecode.go), then
//     watch and follow its events, and list again when the watch cannot
//     resume.
//   - prove.go: the provers that remove a vanished CRD's objects.
//   - status.go: what the monitors report: each one's Status, whether
//     every one settled, which resources are unlisted or listing, the
//     start-up progress.
//   - unverified.go: what the monitors know of each resource's history:
//     listed in this process (graph.Event.Fresh), watch interrupted and
//     not verified since (Unverified).
package discovery
