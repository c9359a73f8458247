package gc

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/wait"
)

// serve runs one request against kgc's HTTP handler.
func serve(t *testing.T, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	collector.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

// The library's handler: health, readiness (monitors synced by TestMain),
// and the debug graph filtered to one connected component.
func TestHandler(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := serve(t, path); code != http.StatusOK {
			t.Errorf("GET %s: %d %q, want 200", path, code, body)
		}
	}

	tc := newTestCase(t)
	rc := tc.rc("rc", protected())
	p := tc.pod("pod", withOwners(rc.ref(true)), protected())
	unrelated := tc.pod("unrelated", protected())
	const graph = "/debug/controllers/garbage-collector-controller/graph"

	var code int
	var body string
	err := wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		code, body = serve(t, graph+"?uid="+string(p.uid))
		return code == http.StatusOK && strings.Contains(body, string(p.uid)) && strings.Contains(body, string(rc.uid)), nil
	})
	if err != nil {
		t.Fatalf("GET %s?uid=%s: want 200 naming %s and its owner %s; last: %d %q", graph, p.uid, p, rc, code, body)
	}
	if !strings.Contains(body, "digraph") {
		t.Errorf("graph is not Graphviz DOT: %q", body)
	}
	if strings.Contains(body, string(unrelated.uid)) {
		t.Errorf("graph filtered to %s's component names unrelated %s: %q", p, unrelated, body)
	}
}
