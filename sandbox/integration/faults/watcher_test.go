package faults

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// startSafetyWatcher starts the package's safety watcher (package safety)
// over ConfigMaps and Secrets. Give it its own connection, without fault
// injection: across an apiserver restart its informers relist, and a
// deletion missed in the gap still arrives as a deletion.
func startSafetyWatcher(ctx context.Context, client metadata.Interface) (*safety.Watcher, error) {
	return safety.Start(ctx, client, []schema.GroupVersionResource{configMaps.gvr(), secrets.gvr()})
}

// checkSafety waits until the watcher has caught up with the present (a
// marker object of each kind, created now in ns, must come back through
// its watch), then fails t for every protected object of ns that was
// deleted, or started deletion, during the test.
func checkSafety(t *testing.T, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	problems := watcher.Check(ctx, ns, waitTimeout, func(ctx context.Context, gvr schema.GroupVersionResource, token string) error {
		for _, k := range []kind{configMaps, secrets} {
			if k.gvr() == gvr {
				_, err := create(ctx, k, ns, "marker-"+token, map[string]string{labelMarker: token})
				return err
			}
		}
		return fmt.Errorf("no marker for %s", gvr)
	})
	for _, p := range problems {
		t.Errorf("safety: %s", p)
	}
}
