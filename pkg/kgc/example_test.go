package kgc_test

import (
	"context"
	"log"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// Give a test API server (envtest-style: etcd + kube-apiserver, no
// controller manager) a garbage collector. From the moment Start returns,
// deleting an owner deletes its dependents.
func ExampleStart() {
	var cfg *rest.Config // e.g. from envtest.Environment.Start()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gc, err := kgc.Start(ctx, cfg, kgc.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer gc.Stop()
}

// Run the collector on a goroutine you manage, as the kgc command does.
func ExampleNew() {
	var cfg *rest.Config

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
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
}
