// Package library tests kgc the way embedders and test authors use it: only
// through the public package github.com/kgc-dev/kgc/pkg/kgc, against a real
// kube-apiserver (the sandbox control plane plays envtest's part).
package library
