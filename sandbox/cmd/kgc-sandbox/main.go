// Command kgc-sandbox runs etcd, kube-apiserver and kgc in one process: a
// local cluster with a garbage collector and nothing else, for trying kgc
// out. Run it from the repository root:
//
//	go run ./sandbox/cmd/kgc-sandbox            # until Ctrl-C
//	go run ./sandbox/cmd/kgc-sandbox --demo     # show a cascade, then exit
//
// See package github.com/kgc-dev/kgc/sandbox/internal/run for the details.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kgc-dev/kgc/sandbox/internal/run"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
