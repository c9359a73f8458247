package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestRead(t *testing.T) {
	kgcMain := debug.Module{Path: modulePath, Version: "v0.3.0"}
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-20T10:11:12Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ld   stamp
		want Info
	}{
		{
			name: "no build information",
			want: Info{Version: Unknown, Revision: Unknown, BuildDate: Unknown, GoVersion: runtime.Version()},
		},
		{
			name: "kgc binary with VCS information",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: kgcMain, Settings: vcs},
			want: Info{Version: "v0.3.0", Revision: "0123abcd", Modified: true, BuildDate: "2026-11-20T10:11:12Z", GoVersion: "go1.26.0"},
		},
		{
			name: "kgc binary built in its tree without VCS information",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: modulePath, Version: "(devel)"}},
			want: Info{Version: "(devel)", Revision: Unknown, BuildDate: Unknown, GoVersion: "go1.26.0"},
		},
		{
			name: "the linker's values win",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: modulePath, Version: "(devel)"}, Settings: vcs},
			ld:   stamp{version: "v1.0.0", revision: "fedcba98", buildDate: "2026-12-01T00:00:00Z"},
			want: Info{Version: "v1.0.0", Revision: "fedcba98", BuildDate: "2026-12-01T00:00:00Z", GoVersion: "go1.26.0"},
		},
		{
			name: "a stamped revision says itself whether its tree was modified",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: modulePath, Version: "(devel)"}},
			ld:   stamp{version: "v1.0.0", revision: "fedcba98", buildDate: "2026-12-01T00:00:00Z", modified: "true"},
			want: Info{Version: "v1.0.0", Revision: "fedcba98", Modified: true, BuildDate: "2026-12-01T00:00:00Z", GoVersion: "go1.26.0"},
		},
		{
			name: "modified without a stamped revision is ignored",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: modulePath, Version: "(devel)"}},
			ld:   stamp{modified: "true"},
			want: Info{Version: "(devel)", Revision: Unknown, BuildDate: Unknown, GoVersion: "go1.26.0"},
		},
		{
			name: "embedded as a library: the dependency's version, not the program's revision",
			bi: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/app", Version: "v9.9.9"}, Settings: vcs,
				Deps: []*debug.Module{{Path: "k8s.io/client-go", Version: "v0.36.3"}, {Path: modulePath, Version: "v0.2.0"}}},
			want: Info{Version: "v0.2.0", Revision: Unknown, BuildDate: Unknown, GoVersion: "go1.26.0"},
		},
		{
			name: "embedded from a local directory",
			bi: &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/app"},
				Deps: []*debug.Module{{Path: modulePath, Version: "v0.0.0", Replace: &debug.Module{Path: "../kgc"}}}},
			want: Info{Version: "(devel)", Revision: Unknown, BuildDate: Unknown, GoVersion: "go1.26.0"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := read(tc.bi, tc.ld); got != tc.want {
				t.Errorf("read = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A test binary is package buildinfo's own module's: kgc, in its tree.
func TestGet(t *testing.T) {
	got := Get()
	if got.Version == "" || got.Revision == "" || got.BuildDate == "" || got.GoVersion != runtime.Version() {
		t.Errorf("Get = %+v", got)
	}
}
