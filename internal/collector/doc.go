// Package collector is kgc's garbage collector as one value: it wires the
// graph builder (package builder) to the workers (package workers) and
// runs them in order — discovery, monitors syncing, then workers.
//
// The pipeline, and which way data flows:
//
//	discovery → monitors → builder ──Apply──▶ graph ◀──read── workers → apiops → API server
//	                          └─────Sink (effects: UIDs to check)─────▶┘
//
// The builder is the graph's single writer; workers only read the graph
// and learn the outcome of their own writes from it, like any other
// change. Every decision is made by package rules from facts the workers
// gather; the inspection commands (package inspect) gather the same facts
// elsewhere and call the same rules.
//
// In shadow mode (Config.DryRun; shadow.go) the workers write nothing and
// package shadow compares their decisions with the changes the builder
// shows it before applying each event.
package collector
