// Package inspect holds the integration tests of `kgc explain`, `kgc
// preview delete` and `kgc tree` against a real kube-apiserver with embedded
// etcd (package controlplane). The commands run in-process through their
// cobra wiring. kgc itself is started (pkg/kgc) only by the tests that need
// it, so the tests of this package run one after another.
package inspect
