// Package buildinfo says which kgc a binary holds: its module version, the
// VCS revision it was built from and the Go version, as the Go toolchain
// recorded them (runtime/debug.ReadBuildInfo). `kgc version` prints them
// and /metrics exports them (kgc_build_info).
//
// A build that cannot record them — `go build` without the .git directory,
// as in the Dockerfile, or with -buildvcs=false — can set the version and
// revision with the linker:
//
//	go build -ldflags "-X github.com/kgc-dev/kgc/internal/buildinfo.version=v0.1.0 -X github.com/kgc-dev/kgc/internal/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/kgc
package buildinfo
