package inspect

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/internal/breaker"
)

func TestHoldOf(t *testing.T) {
	at := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	r := &breaker.Report{
		Lease: "kgc-system/kgc",
		Breaker: &breaker.Status{
			Trips: []breaker.Trip{{Signal: breaker.Unobserved, At: at, Count: 201, Limit: 200, Window: breaker.Duration(10 * time.Minute)}},
			Held:  []breaker.Hold{{UID: "held", Object: "v1 ConfigMap ns/cm", Signal: breaker.Unobserved, Since: at}},
		},
		HoldRestored: true,
		Restored: []breaker.Restored{{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-1", UID: "rs",
			Owner: metav1.OwnerReference{Kind: "Deployment", Name: "web", UID: "old"}, FoundUID: "new", Evidence: "a quorum GET found another object (uid new)", Since: at}},
	}
	h := HoldOf(r, "held")
	if h == nil || !strings.Contains(h.Why, "tripped at 2026-11-26T04:00:00Z because objects that appeared while kgc watched (created or restored) named 201 owners kgc never observed alive") ||
		h.Action != "resume with `kgc breaker resume --lease-namespace kgc-system --lease-name kgc`" {
		t.Fatalf("breaker hold: %+v", h)
	}
	h = HoldOf(r, "rs")
	if h == nil || h.Reason != "restored-owner" || !strings.Contains(h.Why, "names uid old, which kgc never observed, while Deployment web exists with uid new") ||
		h.Action != "relink it to the existing owner with `kgc relink -n shop replicaset/web-1`, or delete it yourself if it is a leftover" {
		t.Fatalf("restore hold: %+v", h)
	}
	if HoldOf(r, "other") != nil || HoldOf(nil, "held") != nil {
		t.Fatal("a hold on an object not held")
	}
	var b strings.Builder
	e := &Explanation{Object: &Object{}, Decision: Decision{Verdict: VerdictDelete}, Hold: HoldOf(r, "rs")}
	if err := WriteExplanation(&b, e); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Held:    since 2026-11-26T04:00:00Z, held: its owner reference") {
		t.Fatalf("rendered:\n%s", b.String())
	}
}
