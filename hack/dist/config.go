package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// DefaultPlatforms are the platforms a release is built for: the image's
// two and the kubectl plugin's usual laptop. .krew.yaml names the same.
const DefaultPlatforms = "linux/amd64 linux/arm64 darwin/arm64"

// buildinfoPkg holds the variables the stamp sets (internal/buildinfo).
const buildinfoPkg = "github.com/kgc-dev/kgc/internal/buildinfo"

// stamp is what a release binary says about itself (kgc version,
// kgc_build_info).
type stamp struct {
	version   string // a semantic version with a leading v: the tag
	revision  string // the full commit hash
	buildDate string // RFC 3339, UTC
	modified  bool   // the tree had uncommitted changes
}

// ldflags are the linker flags of a release build: stripped (-s -w; the
// Go build information `go version -m` reads is kept), and the stamp,
// modified included even when false. The Dockerfile's go build line spells
// the same flags with its build arguments; sandbox/integration/deploy
// checks that both yield the same binary.
func (s stamp) ldflags() string {
	return fmt.Sprintf("-s -w -X %[1]s.version=%[2]s -X %[1]s.revision=%[3]s -X %[1]s.buildDate=%[4]s -X %[1]s.modified=%[5]t",
		buildinfoPkg, s.version, s.revision, s.buildDate, s.modified)
}

// platform is a GOOS/GOARCH pair.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// config is dist's command line.
type config struct {
	stamp
	platforms    []platform
	out          string // the directory the artifacts go to; empty or absent
	goCmd        string
	pkg          string // the main package to build
	license      string // the file each archive carries as LICENSE
	krewTemplate string
}

// semverRE is a semantic version (semver.org 2.0.0) with the leading v that
// Go modules, the image tags and krew expect.
var semverRE = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// revisionRE is a full git object name, SHA-1 or SHA-256.
var revisionRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)

func parseConfig(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("dist", flag.ContinueOnError)
	fs.StringVar(&cfg.version, "version", "", "the release's version, e.g. v0.1.0 (required)")
	fs.StringVar(&cfg.revision, "revision", "", "the full commit hash the release is built from (required)")
	buildDate := fs.String("build-date", "", "the build date, RFC 3339: the commit's time, for reproducible artifacts (required)")
	fs.BoolVar(&cfg.modified, "modified", false, "the tree has uncommitted changes (stamped, so `kgc version` says so)")
	platforms := fs.String("platforms", DefaultPlatforms, "GOOS/GOARCH pairs, separated by spaces or commas")
	fs.StringVar(&cfg.out, "out", "dist", "the directory to write to; it must be empty or absent")
	fs.StringVar(&cfg.goCmd, "go", "go", "the go command")
	fs.StringVar(&cfg.pkg, "pkg", "./cmd/kgc", "the main package to build")
	fs.StringVar(&cfg.license, "license", "LICENSE", "the license file each archive carries")
	fs.StringVar(&cfg.krewTemplate, "krew-template", ".krew.yaml", "the krew plugin manifest template")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if !semverRE.MatchString(cfg.version) {
		errs = append(errs, fmt.Errorf("-version %q: want a semantic version with a leading v, e.g. v0.1.0 or v0.2.0-rc.1", cfg.version))
	}
	if !revisionRE.MatchString(cfg.revision) {
		errs = append(errs, fmt.Errorf("-revision %q: want a full commit hash", cfg.revision))
	}
	if t, err := time.Parse(time.RFC3339, *buildDate); err != nil {
		errs = append(errs, fmt.Errorf("-build-date %q: want an RFC 3339 time: %w", *buildDate, err))
	} else {
		cfg.buildDate = t.UTC().Format(time.RFC3339)
	}
	for _, f := range strings.FieldsFunc(*platforms, func(r rune) bool { return r == ' ' || r == ',' }) {
		goos, goarch, ok := strings.Cut(f, "/")
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			errs = append(errs, fmt.Errorf("-platforms: %q is not GOOS/GOARCH", f))
			continue
		}
		cfg.platforms = append(cfg.platforms, platform{goos, goarch})
	}
	if len(cfg.platforms) == 0 {
		errs = append(errs, errors.New("-platforms: no platform"))
	}
	if cfg.out == "" {
		errs = append(errs, errors.New("-out: empty"))
	}
	return cfg, errors.Join(errs...)
}

// archiveName is the archive of one platform's binary. The krew template
// and docs/releasing.md spell the same names.
func (c config) archiveName(p platform) string {
	return fmt.Sprintf("kgc_%s_%s_%s.tar.gz", c.version, p.os, p.arch)
}

func (c config) sbomName(p platform) string {
	return fmt.Sprintf("kgc_%s_%s_%s.spdx.json", c.version, p.os, p.arch)
}

func (c config) checksumsName() string {
	return fmt.Sprintf("kgc_%s_checksums.txt", c.version)
}
