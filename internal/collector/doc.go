// Package collector is kgc's garbage collector: the graph builder, the
// attempt-to-delete and attempt-to-orphan queues and workers, and the pure
// decisions they act on.
//
// Pipeline: monitors (package discovery) push every observation into an
// unbounded FIFO; one goroutine, the graph builder, applies them to the
// graph (package graph) in order and enqueues the UIDs the graph says need a
// check; workers read a copy of the item from the graph, resolve its owners
// (resolve.go), decide an Action (decide.go, pure) and execute it
// (execute.go, the only place that calls package apiops). A worker returns
// an error to ask for a rate-limited retry; one place applies that to the
// queue.
package collector
