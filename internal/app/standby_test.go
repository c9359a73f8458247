package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestStandbyReadiness(t *testing.T) {
	notReady := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready: monitors have not synced", http.StatusServiceUnavailable)
	})
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}

	// Without leader election the collector's own readiness decides.
	off := &standby{}
	if code, _ := get(off.readiness(notReady), "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("no leader election: /readyz = %d, want the collector's 503", code)
	}

	// A standby is ready, verbose says why; other paths are untouched.
	on := &standby{enabled: true}
	h := on.readiness(notReady)
	if code, _ := get(h, "/readyz"); code != http.StatusOK {
		t.Errorf("standby: /readyz = %d, want 200", code)
	}
	if code, body := get(h, "/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, "standby") {
		t.Errorf("standby: /readyz?verbose = %d %q", code, body)
	}
	if code, _ := get(h, "/metrics"); code != http.StatusServiceUnavailable {
		t.Errorf("standby: /metrics was intercepted (%d)", code)
	}

	// While leading, the collector decides again (503 until it has synced).
	entered := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- on.collect(func(context.Context) error { close(entered); <-release; return nil })(context.Background())
	}()
	<-entered
	if code, _ := get(h, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("leading, not synced: /readyz = %d, want 503", code)
	}
	close(release)
	<-done
	if code, _ := get(h, "/readyz"); code != http.StatusOK {
		t.Errorf("after leading: /readyz = %d, want 200 (standing by again)", code)
	}
}
