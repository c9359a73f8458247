// Package bench holds macro benchmarks of kgc against the sandbox control
// plane. They start a control plane only when benchmarks are requested
// (go test -bench), so `go test ./...` stays fast.
package bench
