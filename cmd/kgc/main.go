// Command kgc is a standalone Kubernetes garbage collector.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kgc-dev/kgc/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Installed as kubectl-kgc, the same binary is a kubectl plugin.
	code := app.Main(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
