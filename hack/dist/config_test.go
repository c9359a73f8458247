package main

import (
	"strings"
	"testing"
)

const testRevision = "0123456789abcdef0123456789abcdef01234567"

func TestParseConfig(t *testing.T) {
	base := []string{"-version", "v0.1.0", "-revision", testRevision, "-build-date", "2026-11-26T10:00:00+01:00"}
	cfg, err := parseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.buildDate != "2026-11-26T09:00:00Z" {
		t.Errorf("build date %q, want it in UTC: 2026-11-26T09:00:00Z", cfg.buildDate)
	}
	var got []string
	for _, p := range cfg.platforms {
		got = append(got, p.String())
	}
	if strings.Join(got, " ") != DefaultPlatforms {
		t.Errorf("platforms %v, want %s", got, DefaultPlatforms)
	}
	cfg, err = parseConfig(append(base, "-platforms", "linux/amd64,darwin/arm64"))
	if err != nil || len(cfg.platforms) != 2 || cfg.platforms[1] != (platform{"darwin", "arm64"}) {
		t.Errorf("-platforms linux/amd64,darwin/arm64: %v, %v", cfg.platforms, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-version", "0.1.0"}, "-version"},
		{[]string{"-version", "v0.1"}, "-version"},
		{[]string{"-version", "v0.1.0 -X main.x=y"}, "-version"},
		{[]string{"-revision", "HEAD"}, "-revision"},
		{[]string{"-revision", testRevision[:12]}, "-revision"},
		{[]string{"-build-date", "2026-11-26"}, "-build-date"},
		{[]string{"-platforms", "linux"}, "-platforms"},
		{[]string{"-platforms", " "}, "-platforms"},
		{[]string{"-out", ""}, "-out"},
	} {
		args := append(append([]string{}, base...), tc.args...)
		if _, err := parseConfig(args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseConfig(%q) = %v, want an error about %s", tc.args, err, tc.want)
		}
	}
	for _, v := range []string{"v0.1.0", "v1.2.3-rc.1", "v0.0.0-test", "v2.0.0+build.5"} {
		if _, err := parseConfig(append(append([]string{}, base...), "-version", v)); err != nil {
			t.Errorf("-version %s: %v", v, err)
		}
	}
}

// The stamp reaches every variable internal/buildinfo reads, modified
// included when false (the Dockerfile always sets it, and the two builds
// must be the same).
func TestLdflags(t *testing.T) {
	s := stamp{version: "v0.1.0", revision: testRevision, buildDate: "2026-11-26T09:00:00Z"}
	want := "-s -w -X github.com/kgc-dev/kgc/internal/buildinfo.version=v0.1.0" +
		" -X github.com/kgc-dev/kgc/internal/buildinfo.revision=" + testRevision +
		" -X github.com/kgc-dev/kgc/internal/buildinfo.buildDate=2026-11-26T09:00:00Z" +
		" -X github.com/kgc-dev/kgc/internal/buildinfo.modified=false"
	if got := s.ldflags(); got != want {
		t.Errorf("ldflags\n%s\nwant\n%s", got, want)
	}
	s.modified = true
	if got := s.ldflags(); !strings.HasSuffix(got, "buildinfo.modified=true") {
		t.Errorf("ldflags of a modified tree: %s", got)
	}
}
