package app

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/spf13/cobra"

	"github.com/kgc-dev/kgc/internal/buildinfo"
)

func TestVersionCommand(t *testing.T) {
	out, errs, code := runKGC(t, "version")
	if code != 0 {
		t.Fatalf("kgc version: exit %d: %s", code, errs)
	}
	b := buildinfo.Get()
	rev := b.Revision
	if b.Modified {
		rev += " (modified)"
	}
	want := "kgc " + b.Version + "\nrevision: " + rev + "\ngo: " + b.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if out != want {
		t.Errorf("kgc version printed\n%s\nwant\n%s", out, want)
	}
	if _, _, code := runKGC(t, "version", "extra"); code == 0 {
		t.Error("kgc version extra: exit 0")
	}
}

func TestWriteVersion(t *testing.T) {
	var buf bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&buf)
	writeVersion(cmd, buildinfo.Info{Version: "v0.4.0", Revision: "0123abcd", Modified: true, GoVersion: "go1.26.1"})
	want := "kgc v0.4.0\nrevision: 0123abcd (modified)\ngo: go1.26.1 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if buf.String() != want {
		t.Errorf("output\n%s\nwant\n%s", buf.String(), want)
	}
}
