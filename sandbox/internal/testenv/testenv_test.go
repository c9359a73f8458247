package testenv

import (
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamespaceName(t *testing.T) {
	for name, want := range map[string]string{
		"TestForeground":                 `^it-foreground-[a-z0-9]{5}$`,
		"TestOrphan/Sub_Case#01":         `^it-orphan-sub-case-01-[a-z0-9]{5}$`,
		"Test" + strings.Repeat("A", 60): `^it-a{40}-[a-z0-9]{5}$`,
		"TestX_":                         `^it-x-[a-z0-9]{5}$`,
	} {
		got := NamespaceName(name)
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("NamespaceName(%q) = %q, want %s", name, got, want)
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Errorf("NamespaceName(%q) = %q is not a namespace name: %v", name, got, errs)
		}
	}
	if a, b := NamespaceName("TestA"), NamespaceName("TestA"); a == b {
		t.Errorf("two names for one test are both %q", a)
	}
}

func TestHasCondition(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "NamesAccepted", "status": "True"},
		map[string]any{"type": "Established", "status": "False"},
	}}}}
	if HasCondition(u, "Established", "True") {
		t.Error("Established=False counted as True")
	}
	if !HasCondition(u, "Established", "False") || !HasCondition(u, "NamesAccepted", "True") {
		t.Error("a present condition not found")
	}
	if HasCondition(&unstructured.Unstructured{Object: map[string]any{}}, "Established", "True") {
		t.Error("a condition found in an object without status")
	}
}

func TestCRD(t *testing.T) {
	crd := CRD("kgc.test", "widgets", "Widget", false, "v2", "v1")
	if got := crd.GetName(); got != "widgets.kgc.test" {
		t.Errorf("name %q", got)
	}
	if scope, _, _ := unstructured.NestedString(crd.Object, "spec", "scope"); scope != "Cluster" {
		t.Errorf("scope %q, want Cluster", scope)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 2 {
		t.Fatalf("%d versions, want 2", len(versions))
	}
	for i, want := range []bool{true, false} {
		if got := versions[i].(map[string]any)["storage"]; got != want {
			t.Errorf("version %d storage %v, want %v", i, got, want)
		}
	}
}

func TestProc(t *testing.T) {
	p := StartProc(t, "sh", 10*time.Second, "/bin/sh", "-c", "echo ready; echo ready; exec sleep 60")
	deadline := time.Now().Add(10 * time.Second)
	for p.Count(t, "ready") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("log %q", p.Log(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if l := p.Line(t, "rea"); l != "ready\n" {
		t.Errorf("Line = %q", l)
	}
	if _, ok := p.Exited(); ok {
		t.Fatal("exited before it was signalled")
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t); code != -1 {
		t.Errorf("exit code %d after SIGTERM, want -1", code)
	}
	if code, ok := p.Exited(); !ok || code != -1 {
		t.Errorf("Exited() = %d, %v", code, ok)
	}
}
