package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Set by -ldflags -X; they win over what the toolchain recorded. A
// release build (make dist, the Dockerfile) sets all of them: the image's
// build context has no .git to record a revision from, and a stamped
// version is the tag's, not a pseudo-version. modified is "true" when the
// tree had uncommitted changes; it is read only along with revision.
var (
	version   string
	revision  string
	buildDate string
	modified  string
)

// modulePath is kgc's module: the main module of the kgc binary, a
// dependency of a program that embeds kgc as a library.
const modulePath = "github.com/kgc-dev/kgc"

// Unknown stands for a version or revision nobody recorded.
const Unknown = "unknown"

// Info is what a binary knows about the kgc it holds.
type Info struct {
	// Version is kgc's module version: a release ("v0.1.0"), a
	// pseudo-version, "(devel)" for a build inside kgc's own tree, or
	// Unknown.
	Version string
	// Revision is the VCS commit kgc was built from, or Unknown (a
	// library build, a build without VCS information).
	Revision string
	// Modified: the working tree had uncommitted changes.
	Modified bool
	// BuildDate is an RFC 3339 time in UTC: a release build's stamp,
	// which is its commit's time so that building a tag again yields the
	// same bytes; else the commit time the toolchain recorded
	// (vcs.time); else Unknown.
	BuildDate string
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string
}

// Get returns the build information of the running binary.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return read(bi, stamp{version: version, revision: revision, buildDate: buildDate, modified: modified})
}

// stamp holds the linker-set values; an empty one was not set.
type stamp struct {
	version, revision, buildDate, modified string
}

// read takes kgc's build information from bi (nil when the binary has
// none) and the linker-set values.
func read(bi *debug.BuildInfo, ld stamp) Info {
	info := Info{Version: Unknown, Revision: Unknown, BuildDate: Unknown, GoVersion: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if bi.Main.Path == modulePath {
			info.Version = orUnknown(bi.Main.Version)
			// VCS settings describe the main module only.
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Revision = orUnknown(s.Value)
				case "vcs.modified":
					info.Modified = s.Value == "true"
				case "vcs.time":
					info.BuildDate = orUnknown(s.Value)
				}
			}
		} else {
			for _, d := range bi.Deps {
				if d.Path != modulePath {
					continue
				}
				info.Version = orUnknown(d.Version)
				if d.Replace != nil {
					// Replaced by a local directory: no version.
					info.Version = d.Replace.Version
					if info.Version == "" {
						info.Version = "(devel)"
					}
				}
			}
		}
	}
	if ld.version != "" {
		info.Version = ld.version
	}
	if ld.revision != "" {
		// The stamp describes its own tree: the toolchain's vcs.modified
		// may describe another (none, in an image's build context).
		info.Revision, info.Modified = ld.revision, ld.modified == "true"
	}
	if ld.buildDate != "" {
		info.BuildDate = ld.buildDate
	}
	return info
}

func orUnknown(s string) string {
	if s == "" {
		return Unknown
	}
	return s
}
