// Package kcmflags checks kgc's list of kube-controller-manager flags
// (app.KCMFlags, docs/kcm-flags.md) against kube-controller-manager
// v1.36.3's own flag set, built from k8s.io/kubernetes: every flag of the
// groups that concern the garbage collector is listed with what `kgc run`
// does with it, every listed flag exists, and each parses like
// kube-controller-manager's. It starts no control plane.
package kcmflags
