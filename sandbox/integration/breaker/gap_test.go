package breaker

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/sandbox/internal/faultproxy"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// kgc's watch of the owners' resource is down — its LIST and WATCH of
// Secrets fail, single GETs work — while a controller's 250 owners come
// and go, each leaving a dependent ConfigMap. kgc never sees those owners
// alive, and a quorum GET finds nothing: what the unobserved-owners signal
// counts as the restore signature (250 is above its default limit, 200).
// But kgc's history of Secrets has a gap, in which a short-lived owner
// goes unseen as a matter of course: with default flags nothing trips,
// and every dependent is collected while the watch is still down.
func TestOwnersMissedWhileTheirWatchIsDownDoNotTrip(t *testing.T) {
	const n = 250
	ns := newNamespace(t)
	fp := faultproxy.New(faultproxy.Config{})
	cfg := rest.CopyConfig(restConfig)
	cfg.WrapTransport = fp.Wrap
	gc := startKGCOn(t, cfg, defaultOptions(ns))

	secrets := func(path string) bool { return path == "/api/v1/secrets" } // the monitor's collection only
	heal := fp.FailReads(secrets, http.StatusServiceUnavailable)
	t.Cleanup(heal)
	waitFor(t, "kgc's Secrets watch to fail", func() (bool, error) {
		return slices.ContainsFunc(fp.Requests(), func(r faultproxy.Request) bool { return r.Injected && secrets(r.Path) }), nil
	})

	owners := make([]types.UID, n)
	parallel(t, "create owners", n, func(i int) error {
		s, err := kubeClient.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owner-%d", i)}}, metav1.CreateOptions{})
		if err == nil {
			owners[i] = s.UID
		}
		return err
	})
	parallel(t, "delete owners", n, func(i int) error {
		return kubeClient.CoreV1().Secrets(ns).Delete(context.Background(), fmt.Sprintf("owner-%d", i), metav1.DeleteOptions{})
	})
	began := time.Now()
	createOwned(t, ns, "dep", n, func(i int) metav1.OwnerReference {
		return testenv.OwnerRef("v1", "Secret", fmt.Sprintf("owner-%d", i), owners[i], false)
	})
	waitWithin(t, 5*time.Minute, "every dependent of the owners kgc missed collected", func() (bool, error) { return count(t, ns, "dep") == 0, nil })
	t.Logf("%d dependents of owners missed in a watch gap collected %s after their creation began", n, time.Since(began).Round(time.Millisecond))
	noTrip(t, gc) // the Secrets reads fail until the test's cleanup heals them
}
