package kgc

import (
	"math"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
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
