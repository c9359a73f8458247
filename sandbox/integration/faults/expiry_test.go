package faults

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
)

// secretsPath is the path of kgc's cluster-wide list and watch of Secrets.
const secretsPath = "/api/v1/secrets"

// TestWatchExpiry makes kgc's watches expire: all of kgc's watch streams
// are cut and new ones held back (a network partition between kgc and the
// apiserver) while an owner is deleted, another cascade comes and goes
// unseen, and etcd is compacted at its current revision. When the watches
// are let through they ask to resume from a revision that no longer
// exists; the apiserver answers 410 Gone ("too old resource version"),
// kgc lists again and must collect what it missed, and nothing else.
//
// What produces the 410: a watch served by kube-apiserver's watch cache
// resumes from the cache's window of recent events, which compacting etcd
// does not touch (the cache keeps events for at least 75 s and grows its
// window to keep them); only a window exceeded by very many events, or a
// restarted apiserver whose new cache starts at a later revision, makes it
// answer "too old resource version" (TestAPIServerRestartMidCascade sees
// the latter: most of kgc's resumed watches are answered 410 after the
// restart, and kgc relists). So the package's control plane runs
// without a watch cache for Secrets (--watch-cache-sizes=secrets#0) and the
// test uses Secrets: their watches go to etcd, which after the compaction
// refuses the old revision, and the apiserver sends the 410 as the watch's
// first event ("The resourceVersion for the provided watch is too old.").
// The transport sees it in the stream, which proves the scenario happened.
func TestWatchExpiry(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t, "expiry")
	by := createBystanders(t, secrets, ns, 10)
	gap := createCascade(t, secrets, ns, "gap", 50, false)

	ft := faultproxy.New(faultproxy.Config{})
	startInProcess(t, ft, 100, 200)

	// kgc collects Secrets before the partition, and its Secrets watch
	// has carried events.
	warm := createCascade(t, secrets, ns, "warm", 3, false)
	warm.deleteOwner(t, metav1.DeletePropagationBackground)
	warm.waitGone(t)

	cut := ft.HoldWatches()
	gapAt := time.Now()
	t.Logf("cut %d watch streams; new watches held", cut)
	if cut == 0 {
		t.Fatal("kgc had no open watch to cut")
	}

	// Changes kgc cannot see: the owner of 50 dependents goes, and a whole
	// cascade is created and its owner deleted.
	gap.deleteOwner(t, metav1.DeletePropagationBackground)
	unseen := createCascade(t, secrets, ns, "unseen", 5, false)
	unseen.deleteOwner(t, metav1.DeletePropagationBackground)
	// A new protected dependent of the live keeper, also unseen.
	by.add(mustCreate(t, secrets, ns, "kept-during-gap", protected(nil), by.keeper.ref(true)))
	rev, err := cp.CompactEtcd(ctx)
	if err != nil {
		t.Fatalf("CompactEtcd: %v", err)
	}
	t.Logf("etcd compacted at revision %d", rev)
	// kgc is blind: nothing of the gap cascade may be gone yet.
	for _, c := range []cascade{gap, unseen} {
		if n, err := c.left(ctx); err != nil || n != c.size {
			t.Fatalf("cascade %s: %d of %d dependents left (err %v) while kgc could not watch", c.name, n, c.size, err)
		}
	}

	ft.ReleaseWatches()
	releasedAt := time.Now()
	t.Logf("watches released after a %s partition", releasedAt.Sub(gapAt).Round(time.Millisecond))

	gap.waitGone(t)
	unseen.waitGone(t)
	t.Logf("missed cascades collected %s after the watches were released", time.Since(releasedAt).Round(time.Millisecond))

	// The scenario happened: a Secrets watch was answered 410, and kgc
	// listed Secrets again afterwards.
	var gone *faultproxy.Gone
	for _, g := range ft.Gone() {
		if g.Path == secretsPath && !g.At.Before(releasedAt) {
			gone = &g
			break
		}
	}
	if gone == nil {
		t.Fatalf("no Secrets watch was answered 410 Gone after the release (all 410s: %+v); transport: %s", ft.Gone(), ft)
	}
	t.Logf("Secrets watch from resourceVersion %s answered 410 (in stream: %v) %s after the release",
		gone.Query.Get("resourceVersion"), gone.InStream, gone.At.Sub(releasedAt).Round(time.Millisecond))
	var relist *faultproxy.Request
	for _, r := range ft.Requests() {
		if r.Path == secretsPath && r.Start.After(gone.At) && (!r.Watch || r.Query.Get("sendInitialEvents") == "true") {
			relist = &r
			break
		}
	}
	if relist == nil {
		t.Errorf("kgc did not list Secrets again after the 410; transport: %s", ft)
	} else {
		t.Logf("relist %s (%s) %s after the 410, status %d", relist.Method, describeQuery(relist), relist.Start.Sub(gone.At).Round(time.Millisecond), relist.Status)
	}

	// The whole story of kgc's Secrets requests after the release.
	for _, r := range ft.Requests() {
		if r.Path == secretsPath && !r.Start.Before(releasedAt) {
			t.Logf("  +%s %s %s → %d", r.Start.Sub(releasedAt).Round(time.Millisecond), r.Method, describeQuery(&r), r.Status)
		}
	}
	for _, g := range ft.Gone() {
		if g.Path == secretsPath {
			t.Logf("  410 for the Secrets request with %s (in stream: %v) at +%s", g.Query.Encode(), g.InStream, g.At.Sub(releasedAt).Round(time.Millisecond))
		}
	}

	by.check(t)
	checkSafety(t, ns)
}

func describeQuery(r *faultproxy.Request) string {
	var parts []string
	for _, k := range []string{"watch", "sendInitialEvents", "resourceVersion", "resourceVersionMatch"} {
		if v := r.Query.Get(k); v != "" {
			parts = append(parts, fmt.Sprintf("%s=%s", k, v))
		}
	}
	if len(parts) == 0 {
		return "list"
	}
	return strings.Join(parts, "&")
}
