package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// release is one run of dist: its configuration and what it has written.
type release struct {
	cfg      config
	work     string            // scratch space for the binaries, removed at the end
	written  []string          // artifact file names in cfg.out, in writing order
	sums     map[string]string // artifact file name → SHA-256, hex
	archives map[string]string // archive file name → SHA-256, for the krew manifest
}

func newRelease(cfg config) (*release, error) {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return nil, err
	}
	// Artifacts of another run would end up in the checksums of none, or
	// be taken for this release's.
	entries, err := os.ReadDir(cfg.out)
	if err != nil {
		return nil, err
	}
	if len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty; remove it first (make dist does)", cfg.out)
	}
	work, err := os.MkdirTemp("", "kgc-dist-")
	if err != nil {
		return nil, err
	}
	return &release{cfg: cfg, work: work, sums: map[string]string{}, archives: map[string]string{}}, nil
}

func (r *release) cleanup() { os.RemoveAll(r.work) }

// buildPlatforms builds, archives and describes the binary of each
// platform in turn (go build uses every core for one).
func (r *release) buildPlatforms(ctx context.Context, stdout io.Writer) error {
	for _, p := range r.cfg.platforms {
		began := time.Now()
		bin, err := r.build(ctx, p)
		if err != nil {
			return err
		}
		binSum, err := fileSHA256(bin)
		if err != nil {
			return err
		}
		archive := r.cfg.archiveName(p)
		if err := r.writeArtifact(archive, func(w io.Writer) error {
			return writeArchive(w, r.modTime(), []archiveFile{
				{name: "kgc", path: bin, mode: 0o755},
				{name: "LICENSE", path: r.cfg.license, mode: 0o644},
			})
		}); err != nil {
			return err
		}
		r.archives[archive] = r.sums[archive]
		doc, err := sbomOf(bin, binSum, r.cfg, p)
		if err != nil {
			return err
		}
		if err := r.writeArtifact(r.cfg.sbomName(p), doc.write); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "dist: %s built and archived in %s\n", p, time.Since(began).Round(100*time.Millisecond))
	}
	return nil
}

// build runs the release's go build for p and returns the binary's path.
// The environment is this one's minus every variable that would change
// the binary (a GOFLAGS, a GOAMD64 level, an experiment), so that the
// release does not depend on who builds it.
func (r *release) build(ctx context.Context, p platform) (string, error) {
	bin := filepath.Join(r.work, p.os+"_"+p.arch, "kgc")
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags=" + r.cfg.ldflags(), "-o", bin, r.cfg.pkg}
	cmd := exec.CommandContext(ctx, r.cfg.goCmd, args...)
	cmd.Env = append(environWithout("GOFLAGS", "GOWORK", "CGO_ENABLED", "GOOS", "GOARCH", "GOEXPERIMENT",
		"GO386", "GOAMD64", "GOARM", "GOARM64", "GOMIPS", "GOMIPS64", "GOPPC64", "GORISCV64", "GOWASM"),
		"CGO_ENABLED=0", "GOWORK=off", "GOOS="+p.os, "GOARCH="+p.arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("GOOS=%s GOARCH=%s %s %s: %w\n%s", p.os, p.arch, r.cfg.goCmd, strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// modTime is every archived file's modification time: the build date,
// which is the commit's time, so that the archive is reproducible.
func (r *release) modTime() time.Time {
	t, err := time.Parse(time.RFC3339, r.cfg.buildDate)
	if err != nil {
		panic(err) // parseConfig normalised it
	}
	return t
}

// writeArtifact writes cfg.out/name with write and records its SHA-256.
func (r *release) writeArtifact(name string, write func(io.Writer) error) (err error) {
	f, err := os.Create(filepath.Join(r.cfg.out, name))
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	h := sha256.New()
	if err := write(io.MultiWriter(f, h)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	r.written = append(r.written, name)
	r.sums[name] = hex.EncodeToString(h.Sum(nil))
	return nil
}

// writeChecksums writes the checksums file: one `<sha256>  <name>` line
// per archive and SBOM, sorted by name, which `sha256sum -c` checks.
func (r *release) writeChecksums() error {
	names := slices.Sorted(maps.Keys(r.sums))
	return r.writeArtifact(r.cfg.checksumsName(), func(w io.Writer) error {
		for _, name := range names {
			if _, err := fmt.Fprintf(w, "%s  %s\n", r.sums[name], name); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeKrewManifest fills the krew template into cfg.out/krew/kgc.yaml.
// A run that built only some platforms cannot fill it; it says so and
// writes none.
func (r *release) writeKrewManifest(stdout io.Writer) error {
	tmpl, err := os.ReadFile(r.cfg.krewTemplate)
	if err != nil {
		return err
	}
	manifest, err := fillKrewTemplate(tmpl, r.cfg.version, r.archives)
	var missing *missingArchiveError
	if errors.As(err, &missing) {
		fmt.Fprintf(stdout, "dist: no krew manifest: %s names %s, which this run did not build\n", r.cfg.krewTemplate, missing.name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", r.cfg.krewTemplate, err)
	}
	dir := filepath.Join(r.cfg.out, "krew")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kgc.yaml"), manifest, 0o644); err != nil {
		return err
	}
	r.written = append(r.written, filepath.Join("krew", "kgc.yaml"))
	return nil
}

// list prints what was written, with sizes.
func (r *release) list(stdout io.Writer) error {
	for _, name := range r.written {
		fi, err := os.Stat(filepath.Join(r.cfg.out, name))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%10d  %s\n", fi.Size(), filepath.Join(r.cfg.out, name))
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// environWithout returns the environment minus the given variables.
func environWithout(names ...string) []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}
