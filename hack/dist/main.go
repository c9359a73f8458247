// Command dist builds kgc's release artifacts into one directory, as `make
// dist` runs it from the repository's root:
//
//   - for each platform, a static kgc binary (CGO_ENABLED=0, -trimpath,
//     stripped) stamped with the release's version, revision and build
//     date, in an archive kgc_<version>_<os>_<arch>.tar.gz with the
//     LICENSE;
//   - an SPDX 2.3 SBOM of each binary, kgc_<version>_<os>_<arch>.spdx.json,
//     read from the module versions the Go toolchain recorded in it;
//   - kgc_<version>_checksums.txt, the SHA-256 of the archives and SBOMs in
//     `sha256sum -c` form;
//   - krew/kgc.yaml, the krew plugin manifest filled from the repository's
//     .krew.yaml template with each archive's URL and SHA-256, when every
//     archive the template names was built.
//
// Each artifact is a function of the source tree, the stamp and the Go
// toolchain alone: the binaries record no VCS state (-buildvcs=false; the
// stamp says it), and the archives hold fixed owners and the build date as
// every file's time. Building a tag again with the same Go yields the same
// checksums. The stamp's build date is the commit's time for that reason.
//
// docs/releasing.md says how a release is cut and how to check what this
// writes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dist:", err)
		os.Exit(1)
	}
}

// run parses the command line, builds every artifact and lists them.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	rel, err := newRelease(cfg)
	if err != nil {
		return err
	}
	defer rel.cleanup()
	if err := rel.buildPlatforms(ctx, stdout); err != nil {
		return err
	}
	if err := rel.writeChecksums(); err != nil {
		return err
	}
	if err := rel.writeKrewManifest(stdout); err != nil {
		return err
	}
	return rel.list(stdout)
}
