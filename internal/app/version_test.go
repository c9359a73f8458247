package app

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/kgc-dev/kgc/internal/buildinfo"
)

func TestVersionCommand(t *testing.T) {
	out, errs, code := runKGC(t, "version")
	if code != 0 {
		t.Fatalf("kgc version: exit %d: %s", code, errs)
	}
	var want bytes.Buffer
	writeVersion(&want, buildinfo.Get())
	if out != want.String() {
		t.Errorf("kgc version printed\n%s\nwant\n%s", out, want.String())
	}
	if _, _, code := runKGC(t, "version", "extra"); code == 0 {
		t.Error("kgc version extra: exit 0")
	}
	if _, errs, code := runKGC(t, "version", "-o", "yaml"); code == 0 || !strings.Contains(errs, "want text or json") {
		t.Errorf("kgc version -o yaml: exit %d, %q", code, errs)
	}
}

func TestVersionCommandJSON(t *testing.T) {
	out, errs, code := runKGC(t, "version", "-o", "json")
	if code != 0 {
		t.Fatalf("kgc version -o json: exit %d: %s", code, errs)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("kgc version -o json: %v\n%s", err, out)
	}
	b := buildinfo.Get()
	want := map[string]any{
		"version": b.Version, "revision": b.Revision, "modified": b.Modified, "buildDate": b.BuildDate,
		"goVersion": b.GoVersion, "platform": runtime.GOOS + "/" + runtime.GOARCH,
	}
	if len(got) != len(want) {
		t.Errorf("kgc version -o json has keys %v, want those of %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("kgc version -o json: %s = %v, want %v", k, got[k], v)
		}
	}
}

func TestWriteVersion(t *testing.T) {
	var buf bytes.Buffer
	writeVersion(&buf, buildinfo.Info{Version: "v0.4.0", Revision: "0123abcd", Modified: true, BuildDate: "2026-11-20T10:11:12Z", GoVersion: "go1.26.1"})
	want := "kgc v0.4.0\nrevision: 0123abcd (modified)\nbuild date: 2026-11-20T10:11:12Z\ngo: go1.26.1 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if buf.String() != want {
		t.Errorf("output\n%s\nwant\n%s", buf.String(), want)
	}
}
