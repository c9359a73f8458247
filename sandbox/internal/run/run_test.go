package run

import (
	"bytes"
	"strings"
	"testing"
)

// TestDemo runs the whole sandbox the way a user would with --demo: control
// plane with its controllers and nodes, kgc, HTTP server, the three
// Deployment cascades, clean shutdown.
func TestDemo(t *testing.T) {
	testDemo(t, []string{"--demo", "--dir=", "--http-address=127.0.0.1:0"},
		"All three cascades completed", "replicaset/", "pod/", "and its 3 Pods stay")
}

// TestDemoWithoutControllers is the same on etcd + kube-apiserver alone:
// the ConfigMap cascades.
func TestDemoWithoutControllers(t *testing.T) {
	testDemo(t, []string{"--demo", "--controllers=none", "--dir=", "--http-address=127.0.0.1:0"},
		"All cascades completed")
}

func testDemo(t *testing.T, args []string, wants ...string) {
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), args, &stdout, &stderr)
	t.Logf("stdout:\n%s", stdout.String())
	t.Logf("stderr:\n%s", stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, want := range append([]string{"export KUBECONFIG=", "/debug/controllers/garbage-collector-controller/graph"}, wants...) {
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
		{[]string{"--controllers=*"}, 2},                              // kube-controller-manager's collector would run
		{[]string{"--controllers=*,garbage-collector-controller"}, 2}, // likewise
		{[]string{"--controllers=*,,x"}, 2},
		{[]string{"--namespace-lifecycle=maybe"}, 2},
		{[]string{"--nodes=-1"}, 2},
		{[]string{"--shadow", "--controllers=none"}, 2},
		{[]string{"--shadow", "--controllers=*,-garbage-collector-controller,-namespace-controller"}, 2}, // nothing would collect
		{[]string{"--shadow", "--namespace-lifecycle=true"}, 2},
	} {
		var out bytes.Buffer
		if code := Main(t.Context(), tc.args, &out, &out); code != tc.code {
			t.Errorf("Main(%q) = %d, want %d; output:\n%s", tc.args, code, tc.code, out.String())
		}
	}
}

func TestNamespaceLifecycleDefault(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false}, // kube-controller-manager's namespace controller runs
		{[]string{"--controllers=none"}, true},
		{[]string{"--controllers=*,-garbage-collector-controller,-namespace-controller"}, true},
		{[]string{"--controllers=deployment-controller,replicaset-controller"}, true},
		{[]string{"--namespace-lifecycle=true"}, true},
		{[]string{"--controllers=none", "--namespace-lifecycle=false"}, false},
		{[]string{"--shadow", "--controllers=*,-namespace-controller"}, false}, // shadow mode writes nothing
	} {
		var out bytes.Buffer
		c, err := parseSandboxFlags(tc.args, &out)
		if err != nil {
			t.Errorf("parseSandboxFlags(%q): %v\n%s", tc.args, err, out.String())
			continue
		}
		if c.namespaceLifecycle != tc.want {
			t.Errorf("parseSandboxFlags(%q): namespace lifecycle %v, want %v", tc.args, c.namespaceLifecycle, tc.want)
		}
	}
}

// --shadow turns kube-controller-manager's garbage collector on (it does
// the work) unless --controllers says otherwise, and kgc's namespace
// lifecycle off.
func TestShadowFlag(t *testing.T) {
	var out bytes.Buffer
	c, err := parseSandboxFlags([]string{"--shadow"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !c.shadow || c.controllers != "*" || c.namespaceLifecycle {
		t.Errorf("--shadow: shadow %v, controllers %q, namespace lifecycle %v; want true, \"*\", false", c.shadow, c.controllers, c.namespaceLifecycle)
	}
}
