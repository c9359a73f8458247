// Package breaker holds the integration tests of kgc's circuit breaker for
// mass deletions, its restore-signature hold and `kgc relink`, against a
// real kube-apiserver with embedded etcd (package controlplane). Each test
// starts its own collector (pkg/kgc) with the breaker on, so the tests of
// this package run one after another.
package breaker
