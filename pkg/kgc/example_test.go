package kgc_test

import (
	"context"
	"log"

	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// Start a garbage collector next to a test API server (envtest-style) and
// wait until it collects.
func ExampleNew() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cfg *rest.Config // e.g. from envtest.Environment.Start()

	c, err := kgc.New(cfg, kgc.Options{Workers: 2})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		if err := c.Run(ctx); err != nil {
			log.Print(err)
		}
	}()
	if err := c.WaitForSync(ctx); err != nil {
		log.Fatal(err)
	}
	// Deleting an owner now deletes its dependents.
}
