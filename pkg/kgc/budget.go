package kgc

import (
	"errors"
	"fmt"
	"math"

	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/budget"
)

// withBudget returns a copy of cfg with the client budget New documents
// for Options.QPS and Options.Burst. Every client kgc builds from it takes
// its rate limiter from QPS and Burst: client-go builds none for a
// negative QPS.
func withBudget(cfg *rest.Config, qps float32, burst int) (*rest.Config, error) {
	if math.IsNaN(float64(qps)) {
		return nil, errors.New("kgc: QPS must be a number, got NaN")
	}
	if qps >= 0 && burst < 0 {
		return nil, fmt.Errorf("kgc: Burst must not be negative unless QPS is (got QPS %v, Burst %d)", qps, burst)
	}
	cfg = rest.CopyConfig(cfg)
	switch {
	case qps != 0 || burst != 0:
		// A RateLimiter would win over QPS and Burst in client-go.
		cfg.QPS, cfg.Burst, cfg.RateLimiter = qps, burst, nil
	case cfg.QPS == 0 && cfg.Burst == 0 && cfg.RateLimiter == nil:
		cfg.QPS, cfg.Burst = 20, 30
	}
	return cfg, nil
}

// workerConfig returns the config of the workers' client — the owner
// lookups and the writes, the requests kube-controller-manager's collector
// makes with its metadata client — from cfg (withBudget's), with the
// budget kube-controller-manager gives that client: twice cfg's QPS, the
// same burst (client-go's default burst, 10, when cfg has none). Its rate
// limiter, returned too, serves awaited work first (package budget).
// kube-controller-manager's monitors list and watch with its shared
// informers' clients at QPS, and so do kgc's (cfg itself).
//
// A negative QPS is no limit, doubled or not. A zero QPS is client-go's
// default (5), and kube-controller-manager's doubling leaves it zero: the
// config is left alone. A RateLimiter cfg carries is shared as it is, its
// budget not kgc's to change.
func workerConfig(cfg *rest.Config) (*rest.Config, *budget.Limiter) {
	w := rest.CopyConfig(cfg)
	if cfg.RateLimiter != nil || cfg.QPS <= 0 {
		return w, nil
	}
	burst := cfg.Burst
	if burst == 0 {
		burst = rest.DefaultBurst
	}
	w.QPS = 2 * cfg.QPS
	l := budget.NewLimiter(w.QPS, burst, nil)
	w.RateLimiter = l
	return w, l
}
