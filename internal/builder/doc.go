// Package builder is kgc's graph builder: it discovers the deletable
// resources (periodically, and at once when a CustomResourceDefinition or
// APIService changes), runs one metadata monitor per resource (package
// discovery), and applies every observation, in order, to the ownership
// graph (package graph) on one goroutine — the graph's only writer.
//
// Each applied event's effects (the UIDs whose garbage-collection state
// may have changed, the owners observed absent) go to a Sink: the workers.
// The builder never decides and never writes to the API server.
package builder
