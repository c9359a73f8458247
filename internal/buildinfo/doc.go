// Package buildinfo says which kgc a binary holds: its module version, the
// VCS revision it was built from, the build date and the Go version, as the
// Go toolchain recorded them (runtime/debug.ReadBuildInfo). `kgc version`
// prints them and /metrics exports them (kgc_build_info).
//
// A release build stamps them with the linker instead: `make dist` does for
// the archives, and the Dockerfile does from its build arguments, since its
// build context has no .git directory to record a revision from. The
// variables are version, revision, buildDate (RFC 3339, UTC) and modified
// ("true" for a tree with uncommitted changes):
//
//	go build -ldflags "-X github.com/kgc-dev/kgc/internal/buildinfo.version=v0.1.0 -X github.com/kgc-dev/kgc/internal/buildinfo.revision=$(git rev-parse HEAD) -X github.com/kgc-dev/kgc/internal/buildinfo.buildDate=2026-01-02T03:04:05Z" ./cmd/kgc
package buildinfo
