// Package discovery finds the resources kgc must watch and runs one
// metadata-only list-and-watch loop ("monitor") per resource.
//
// A monitor delivers every observation of its resource, in order, to one
// callback (the graph builder's queue) and keeps nothing per object: it
// converts each object to the few metadata fields decisions need as it
// arrives, and the graph is the only copy. A relist ends with a Relisted
// event, on which the graph drops what the list no longer contains.
// Monitors are added and removed as resources appear and disappear;
// stopping one ends its goroutine.
package discovery
