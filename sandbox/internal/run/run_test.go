package run

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs the whole sandbox the way a user would with --demo: control
// plane, kgc, HTTP server, both cascades, clean shutdown.
func TestDemo(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"--demo", "--dir=", "--http-address=127.0.0.1:0"}, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	t.Logf("stderr:\n%s", stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, want := range []string{"export KUBECONFIG=", "/debug/controllers/garbage-collector-controller/graph", "Both cascades completed"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-h"}, 0},
		{[]string{"demo", "-h"}, 0},
		{[]string{"--no-such-flag"}, 2},
		{[]string{"stray"}, 2},
		{[]string{"demo", "stray"}, 2},
	} {
		var out bytes.Buffer
		if code := Main(t.Context(), tc.args, &out, &out); code != tc.code {
			t.Errorf("Main(%q) = %d, want %d; output:\n%s", tc.args, code, tc.code, out.String())
		}
	}
}
