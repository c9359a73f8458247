// Package discovery holds kgc's resilience integration tests around
// resources that come, go and break: event-driven discovery of CRDs, monitor
// cleanup when a CRD is deleted, startup on a cluster with unfinished
// deletions (level-triggered collection), and collection of built-in kinds
// while a CRD's conversion webhook and an aggregated APIService are broken.
//
// Unlike package gc, each test starts its own collector (some tests need
// the cluster prepared while no kgc runs), so the tests run one at a time.
// Every collector runs under a pprof label, which lets a test count exactly
// the goroutines that collector started.
package discovery
