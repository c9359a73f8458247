package collector

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/shadow"
	"github.com/kgc-dev/kgc/internal/workers"
)

// shadowMode wires shadow mode (Config.DryRun): the workers hand every
// write they decide to the tracker instead of the API server, and the
// graph builder shows the tracker every event before applying it.
type shadowMode struct {
	c       *Collector
	tracker *shadow.Tracker
	// ctx is Run's (for the workers' log lines from Judge); set before
	// the builder starts.
	ctx context.Context
	// requeue: orphaning owners whose dependents lost their reference in
	// the event being applied; queued once it is (after). Only the graph
	// builder's goroutine touches it.
	requeue []types.UID
}

// init creates the tracker and points the workers' config at it.
func (s *shadowMode) init(cfg shadow.Config, wcfg *workers.Config) {
	if cfg.Metrics == nil {
		cfg.Metrics = s.c.cfg.Metrics
	}
	if cfg.Clock == nil {
		cfg.Clock = s.c.cfg.Clock
	}
	cfg.Judge = s.judge
	s.tracker = shadow.New(cfg)
	wcfg.DryRun = true
	wcfg.Shadow = s.tracker.Decided
}

// judge asks the workers whether they decide now what the cluster's
// collector just did (shadow.Judge); only once they run: before, the
// graph is not complete enough to decide from.
func (s *shadowMode) judge(uid types.UID, op, detail string) {
	if s.c.synced.Load() {
		s.c.workers.Judge(s.ctx, uid, op, detail)
	}
}

// before runs on the graph builder's goroutine before ev is applied.
func (s *shadowMode) before(ev graph.Event) {
	ch, ok := shadow.Diff(s.c.builder.Graph(), ev)
	if !ok {
		return
	}
	for _, l := range ch.LostRefs {
		if l.State == shadow.OwnerOrphaning {
			s.requeue = append(s.requeue, l.Owner)
		}
	}
	s.tracker.Observe(ch)
}

// after runs on the graph builder's goroutine once ev is applied.
func (s *shadowMode) after(ev graph.Event, eff graph.Effects) {
	if ev.Type == graph.Relisted {
		for _, a := range eff.Absent {
			s.tracker.Gone(history.ObjectOf(a.Identity))
		}
	}
	for _, o := range s.requeue {
		s.c.workers.CheckOrphaning(o)
	}
	s.requeue = s.requeue[:0]
}

// Shadow returns shadow mode's comparison (nil unless Config.DryRun).
func (c *Collector) Shadow() *shadow.Tracker {
	if c.shadow == nil {
		return nil
	}
	return c.shadow.tracker
}
