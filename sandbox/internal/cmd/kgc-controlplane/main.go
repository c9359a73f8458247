// Command kgc-controlplane runs the sandbox's control plane for a parent
// process that started it with package cpproc, and does what the parent
// asks of it (see cpproc's documentation). It is built by cpproc, without
// the race detector, for the integration tests.
package main

import (
	"os"

	// kube-controller-manager's main loads these adapters: its client-go
	// REST client, leader election and work queues then export their
	// series on component-base's registry, as in a real
	// kube-controller-manager (the signals tests compare kgc's series
	// with them, through cpproc's GatherMetrics).
	_ "k8s.io/component-base/metrics/prometheus/clientgo"

	"github.com/kgc-dev/kgc/sandbox/internal/cpproc/cpserver"
)

func main() {
	os.Exit(cpserver.Main(os.Stderr))
}
