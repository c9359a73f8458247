package graph_test

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// BenchmarkApply replays a monitor's events on one core: every object is
// added, updated twice (new resourceVersion, same owner) and deleted; one
// object in ten is an owner of the next nine, and owners arrive after some
// of their dependents (as when monitors sync in any order). It reports
// events/s (the target: >= 200k/s on one core, so that one goroutine
// applying every event is never what a large cluster waits for).
func BenchmarkApply(b *testing.B) {
	const objects = 10_000
	var stream []graph.Event
	mk := func(i int, version string) rules.Object {
		o := obj(fmt.Sprintf("o-%05d", i), rv(version))
		if i%10 != 0 {
			o.OwnerReferences = []metav1.OwnerReference{ref(fmt.Sprintf("o-%05d", i-i%10), block)}
		}
		return o
	}
	for i := objects - 1; i >= 0; i-- { // dependents before their owner
		stream = append(stream, upsert(mk(i, "1")))
	}
	for v := 2; v <= 3; v++ {
		for i := range objects {
			stream = append(stream, upsert(mk(i, strconv.Itoa(v))))
		}
	}
	for i := range objects {
		stream = append(stream, del(mk(i, "3")))
	}
	b.ReportAllocs()
	g := graph.New()
	events := 0
	cpu0 := cpuTime()
	for b.Loop() {
		for i := range stream {
			g.Apply(stream[i])
		}
		events += len(stream)
	}
	if c := g.Counts(); c.Observed+c.Virtual+c.Absent != 0 {
		b.Fatalf("graph not empty after the stream: %+v", c)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
	// CPU time is steadier than wall time on a shared machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(events), "cpu-ns/event")
}

// cpuTime returns the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
