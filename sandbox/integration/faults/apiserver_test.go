package faults

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
)

const (
	// restartCascade is the size of the cascade the apiserver restarts
	// in; at 20 QPS kgc needs about 15 s for it.
	restartCascade = 300
	// apiDowntime is how long the apiserver stays down (its restart
	// takes longer still on a loaded machine).
	apiDowntime = 3 * time.Second
)

// TestAPIServerRestartMidCascade stops kube-apiserver (etcd keeps running)
// in the middle of a Foreground cascade run by an in-process kgc, keeps it
// down for a few seconds and starts it again on the same address. kgc must
// reconnect on its own: its watches resume (an object created after the
// restart is collected), the cascade finishes, and nothing else is deleted.
func TestAPIServerRestartMidCascade(t *testing.T) {
	ns := createNamespace(t, "apirestart")
	by := createBystanders(t, configMaps, ns, 20)
	c := createCascade(t, configMaps, ns, "restart", restartCascade, true)

	// The transport only records: when kgc's watches come back.
	ft := faultproxy.New(faultproxy.Config{})
	startInProcess(t, ft, 20, 30)

	c.deleteOwner(t, metav1.DeletePropagationForeground)
	var left int
	poll(t, "the cascade to be part done", func(ctx context.Context) (bool, error) {
		n, err := c.left(ctx)
		if err != nil {
			return false, err
		}
		if n == 0 {
			return false, fmt.Errorf("the cascade finished before the apiserver could be stopped")
		}
		left = n
		return n <= restartCascade-30, nil
	})

	stopAt := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("StopAPIServer: %v", err)
	}
	t.Cleanup(func() {
		// Whatever happened, the next tests need an apiserver.
		if err := cp.StartAPIServer(context.Background()); err != nil {
			t.Errorf("StartAPIServer in cleanup: %v", err)
		}
	})
	t.Logf("apiserver stopped in %s with %d of %d dependents left", time.Since(stopAt).Round(time.Millisecond), left, restartCascade)
	time.Sleep(apiDowntime) // the outage itself, not an assertion
	startAt := time.Now()
	if err := cp.StartAPIServer(t.Context()); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	upAt := time.Now()
	t.Logf("apiserver down for %s (restart took %s)", upAt.Sub(stopAt).Round(time.Millisecond), upAt.Sub(startAt).Round(time.Millisecond))

	// A cascade that starts after the restart can only be seen through
	// resumed watches (or relists).
	fresh := createCascade(t, configMaps, ns, "fresh", 3, false)
	fresh.deleteOwner(t, metav1.DeletePropagationBackground)
	freshTook := fresh.waitGone(t)
	c.waitGone(t)
	t.Logf("a cascade created after the restart was collected in %s", freshTook.Round(time.Millisecond))

	// When did kgc come back? The apiserver serves requests a while
	// before StartAPIServer sees it ready, so measure from the start.
	var firstOK, firstWatch, lastDelete time.Time
	gone := 0
	for _, r := range ft.Requests() {
		if r.Start.Before(startAt) {
			continue
		}
		if r.Status/100 == 2 && (firstOK.IsZero() || r.End.Before(firstOK)) {
			firstOK = r.End
		}
		if r.Watch && r.Status == 200 && (firstWatch.IsZero() || r.End.Before(firstWatch)) {
			firstWatch = r.End
		}
		if r.Method == "DELETE" && r.Status/100 == 2 && strings.HasPrefix(path.Base(r.Path), c.name+"-") && r.End.After(lastDelete) {
			lastDelete = r.End
		}
	}
	for _, g := range ft.Gone() {
		if g.At.After(startAt) {
			gone++
		}
	}
	if firstWatch.IsZero() {
		t.Fatalf("kgc opened no watch after the restart; transport: %s", ft)
	}
	if lastDelete.IsZero() {
		t.Fatalf("kgc deleted none of the cascade's dependents after the restart; transport: %s", ft)
	}
	t.Logf("after StartAPIServer was called: kgc's first successful request at +%s, first watch at +%s, "+
		"last dependent deleted at +%s (apiserver ready at +%s); %d of kgc's resumed watches were answered 410 (the new watch cache starts at a later revision)",
		firstOK.Sub(startAt).Round(time.Millisecond), firstWatch.Sub(startAt).Round(time.Millisecond),
		lastDelete.Sub(startAt).Round(time.Millisecond), upAt.Sub(startAt).Round(time.Millisecond), gone)
	t.Logf("transport: %s", ft)
	by.check(t)
	checkSafety(t, ns)
}
