// Package discovery finds the resources kgc must watch and runs one
// metadata-only informer ("monitor") per resource.
//
// A monitor delivers every observation of its resource, in order, to one
// callback (the graph builder's queue); it never hands out object bodies and
// its store keeps only the metadata fields decisions need. Monitors are added
// and removed as resources appear and disappear; stopping one removes its
// event handler and ends its goroutines.
package discovery
