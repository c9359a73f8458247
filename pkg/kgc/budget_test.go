package kgc

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/kgc-dev/kgc/internal/budget"
)

// limiterOf returns the rate limiter client-go gives a REST client built
// from cfg, the way every client kgc builds gets its own.
func limiterOf(t *testing.T, cfg *rest.Config) flowcontrol.RateLimiter {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &schema.GroupVersion{Version: "v1"}
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.GetRateLimiter()
}

func TestWithBudget(t *testing.T) {
	custom := flowcontrol.NewTokenBucketRateLimiter(1, 1)
	for _, tc := range []struct {
		name         string
		cfg          rest.Config
		qps          float32
		burst        int
		wantQPS      float32
		wantBurst    int
		wantLimiter  bool
		wantOwnLimit bool // the caller's RateLimiter is kept
	}{
		{name: "defaults for a config without a budget", wantQPS: 20, wantBurst: 30, wantLimiter: true},
		{name: "the config's budget is kept", cfg: rest.Config{QPS: 7, Burst: 8}, wantQPS: 7, wantBurst: 8, wantLimiter: true},
		{name: "the config's RateLimiter is kept", cfg: rest.Config{RateLimiter: custom}, wantLimiter: true, wantOwnLimit: true},
		{name: "options override", cfg: rest.Config{QPS: 7, Burst: 8}, qps: 50, burst: 60, wantQPS: 50, wantBurst: 60, wantLimiter: true},
		{name: "options override the config's RateLimiter", cfg: rest.Config{RateLimiter: custom}, qps: 50, burst: 60, wantQPS: 50, wantBurst: 60, wantLimiter: true},
		{name: "negative QPS: no limiter", qps: -1, burst: 30, wantQPS: -1, wantBurst: 30},
		{name: "negative QPS: burst unused", qps: -1, burst: -5, wantQPS: -1, wantBurst: -5},
		{name: "negative QPS drops the config's RateLimiter", cfg: rest.Config{RateLimiter: custom}, qps: -1, wantQPS: -1},
		{name: "negative QPS in the config is kept", cfg: rest.Config{QPS: -1}, wantQPS: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.cfg
			got, err := withBudget(&in, tc.qps, tc.burst)
			if err != nil {
				t.Fatal(err)
			}
			if got.QPS != tc.wantQPS || got.Burst != tc.wantBurst {
				t.Errorf("QPS, Burst = %v, %d; want %v, %d", got.QPS, got.Burst, tc.wantQPS, tc.wantBurst)
			}
			if in.QPS != tc.cfg.QPS || in.Burst != tc.cfg.Burst || in.RateLimiter != tc.cfg.RateLimiter {
				t.Error("withBudget changed the caller's config")
			}
			l := limiterOf(t, got)
			if (l != nil) != tc.wantLimiter {
				t.Errorf("rate limiter = %v, want one: %v", l, tc.wantLimiter)
			}
			if (l == custom) != tc.wantOwnLimit {
				t.Errorf("the caller's RateLimiter kept: %v, want %v", l == custom, tc.wantOwnLimit)
			}
		})
	}
}

func TestWithBudgetRejects(t *testing.T) {
	for _, tc := range []struct {
		qps   float32
		burst int
	}{{0, -1}, {5, -1}, {float32(math.NaN()), 1}} {
		if _, err := withBudget(&rest.Config{}, tc.qps, tc.burst); err == nil {
			t.Errorf("withBudget(QPS %v, Burst %d) succeeded", tc.qps, tc.burst)
		}
	}
}

// TestWorkerBudgetIsKCMCollectors: the workers' client gets the budget
// kube-controller-manager gives its collector's metadata client from
// --kube-api-qps and --kube-api-burst — twice the QPS, the same burst —
// with a rate limiter that serves awaited work first; the other clients
// keep the budget as given.
func TestWorkerBudgetIsKCMCollectors(t *testing.T) {
	custom := flowcontrol.NewTokenBucketRateLimiter(1, 1)
	for _, tc := range []struct {
		name        string
		cfg         rest.Config
		qps         float32
		burst       int
		wantQPS     float32 // the workers' limiter's
		wantBurst   int
		wantOurs    bool // a budget.Limiter
		wantLimiter flowcontrol.RateLimiter
	}{
		{name: "kube-controller-manager's defaults", wantQPS: 40, wantBurst: 30, wantOurs: true},
		{name: "given", qps: 50, burst: 60, wantQPS: 100, wantBurst: 60, wantOurs: true},
		{name: "the config's budget", cfg: rest.Config{QPS: 7, Burst: 8}, wantQPS: 14, wantBurst: 8, wantOurs: true},
		{name: "no burst: client-go's", cfg: rest.Config{QPS: 7}, wantQPS: 14, wantBurst: rest.DefaultBurst, wantOurs: true},
		{name: "negative QPS: no limit", qps: -1, burst: 30},
		{name: "the config's RateLimiter is shared", cfg: rest.Config{RateLimiter: custom}, wantLimiter: custom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.cfg
			cfg, err := withBudget(&in, tc.qps, tc.burst)
			if err != nil {
				t.Fatal(err)
			}
			before := *cfg
			work, ours := workerConfig(cfg)
			if cfg.QPS != before.QPS || cfg.Burst != before.Burst || cfg.RateLimiter != before.RateLimiter {
				t.Error("workerConfig changed the other clients' config")
			}
			l := limiterOf(t, work)
			switch {
			case tc.wantOurs:
				bl, ok := l.(*budget.Limiter)
				if !ok || bl != ours {
					t.Fatalf("workers' rate limiter = %T, want the returned *budget.Limiter", l)
				}
				if bl.QPS() != tc.wantQPS {
					t.Errorf("workers' QPS = %v, want %v", bl.QPS(), tc.wantQPS)
				}
				for i := range tc.wantBurst {
					if !bl.TryAccept() {
						t.Fatalf("workers' burst = %d, want %d", i, tc.wantBurst)
					}
				}
				if bl.TryAccept() {
					t.Errorf("workers' burst above %d", tc.wantBurst)
				}
				if other := limiterOf(t, cfg); other == l || other.QPS() != tc.wantQPS/2 {
					t.Errorf("the other clients' limiter = %v at %v QPS, want their own at %v", other, other.QPS(), tc.wantQPS/2)
				}
			case tc.wantLimiter != nil:
				if l != tc.wantLimiter || ours != nil {
					t.Errorf("workers' rate limiter = %v, want the config's", l)
				}
			default:
				if l != nil || ours != nil || work.QPS >= 0 {
					t.Errorf("workers' rate limiter = %v (QPS %v), want none", l, work.QPS)
				}
			}
		})
	}
}
