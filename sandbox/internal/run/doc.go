// Package run implements the kgc-sandbox command: a one-command local
// environment in which kgc collects garbage on a real, in-process
// kube-apiserver, plus a built-in cascade demo that needs no kubectl.
//
// Usage:
//
//	kgc-sandbox [flags]        run etcd + kube-apiserver + kgc until Ctrl-C
//	kgc-sandbox --demo         the same, run the cascade demo once, then exit
//	kgc-sandbox demo [flags]   run the cascade demo against a running sandbox
//
// State (etcd data, certificates, kubeconfig) lives in --dir, by default
// .kgc-sandbox under the working directory, so the kubeconfig path stays the
// same from run to run and objects survive a restart. --dir="" uses a
// temporary directory that is removed on exit.
package run
