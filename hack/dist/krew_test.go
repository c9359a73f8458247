package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// krewManifest is krew's Plugin (sigs.k8s.io/krew/pkg/index), the fields a
// plugin manifest may have; strict decoding refuses any other.
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Caveats          string         `json:"caveats"`
		Homepage         string         `json:"homepage"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	URI      string `json:"uri"`
	Sha256   string `json:"sha256"`
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Files []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
	Bin string `json:"bin"`
}

var krewSHA256 = regexp.MustCompile(`^[a-f0-9]{64}$`)

// The repository's template, filled for a release of every default
// platform, is a manifest krew accepts (the checks of krew's own
// validation and of krew-index's), and each platform installs from its
// archive: the URL names it, the SHA-256 is its, and it holds the files
// and the binary the manifest names, the LICENSE among them.
func TestKrewManifest(t *testing.T) {
	const tag = "v0.3.1"
	cfg, err := parseConfig([]string{"-version", tag, "-revision", testRevision, "-build-date", "2026-11-26T09:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, lic := filepath.Join(dir, "kgc"), filepath.Join(dir, "LICENSE")
	for _, p := range []string{bin, lic} {
		if err := os.WriteFile(p, []byte(filepath.Base(p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	archives := map[string]string{}   // name → SHA-256
	contents := map[string][]string{} // name → file names
	byPlatform := map[string]string{} // os/arch → archive name
	for _, p := range cfg.platforms {
		name := cfg.archiveName(p)
		var buf bytes.Buffer
		// Every platform's archive differs, so that a wrong URL or sum shows.
		if err := writeArchive(&buf, time.Unix(int64(len(archives)), 0), []archiveFile{{name: "kgc", path: bin, mode: 0o755}, {name: "LICENSE", path: lic, mode: 0o644}}); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf.Bytes())
		archives[name] = hex.EncodeToString(sum[:])
		contents[name] = archiveNames(t, buf.Bytes())
		byPlatform[p.String()] = name
	}

	tmpl, err := os.ReadFile(filepath.Join("..", "..", ".krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := fillKrewTemplate(tmpl, tag, archives)
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.UnmarshalStrict(out, &m); err != nil {
		t.Fatalf("the filled manifest: %v\n%s", err, out)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" {
		t.Errorf("apiVersion %q, kind %q", m.APIVersion, m.Kind)
	}
	// krew-index keeps it as plugins/<name>.yaml; dist writes krew/kgc.yaml.
	if m.Metadata.Name != "kgc" {
		t.Errorf("metadata.name %q, want kgc", m.Metadata.Name)
	}
	if m.Spec.Version != tag {
		t.Errorf("spec.version %q, want %s", m.Spec.Version, tag)
	}
	if d := m.Spec.ShortDescription; d == "" || strings.ContainsAny(d, "\r\n") || len(d) > 50 {
		t.Errorf("shortDescription %q: want one line of at most 50 characters", d)
	}
	if m.Spec.Description == "" || !strings.HasPrefix(m.Spec.Homepage, "https://") {
		t.Errorf("description %q, homepage %q", m.Spec.Description, m.Spec.Homepage)
	}
	var seen []string
	for i, p := range m.Spec.Platforms {
		labels := p.Selector.MatchLabels
		for k := range labels {
			if k != "os" && k != "arch" {
				t.Errorf("platform %d: selector key %q (krew knows os and arch)", i, k)
			}
		}
		plat := labels["os"] + "/" + labels["arch"]
		if slices.Contains(seen, plat) {
			t.Errorf("platform %d: %s selected twice", i, plat)
		}
		seen = append(seen, plat)
		name, ok := byPlatform[plat]
		if !ok {
			t.Errorf("platform %d: %s is not a release platform (%s)", i, plat, DefaultPlatforms)
			continue
		}
		if want := "https://github.com/kgc-dev/kgc/releases/download/" + tag + "/" + name; p.URI != want {
			t.Errorf("platform %s: uri %q, want %q", plat, p.URI, want)
		}
		if !krewSHA256.MatchString(p.Sha256) || p.Sha256 != archives[name] {
			t.Errorf("platform %s: sha256 %q, want %s's, %s", plat, p.Sha256, name, archives[name])
		}
		if p.Bin == "" || len(p.Files) == 0 {
			t.Errorf("platform %s: bin %q, files %v", plat, p.Bin, p.Files)
		}
		var installed []string
		for _, f := range p.Files {
			if f.From == "" || f.To == "" {
				t.Errorf("platform %s: file operation %+v", plat, f)
			}
			if !slices.Contains(contents[name], f.From) {
				t.Errorf("platform %s: %s is not in %s (%v)", plat, f.From, name, contents[name])
			}
			installed = append(installed, path.Join(f.To, f.From))
		}
		if !slices.Contains(installed, p.Bin) {
			t.Errorf("platform %s: bin %s is not installed by %v", plat, p.Bin, installed)
		}
		if !slices.Contains(installed, "LICENSE") {
			t.Errorf("platform %s: no LICENSE installed (krew-index requires one)", plat)
		}
	}
	if slices.Sort(seen); len(seen) != len(cfg.platforms) {
		t.Errorf("the manifest's platforms %v, want the release's %s", seen, DefaultPlatforms)
	}
}

// A template naming an archive that was not built is refused with the
// archive's name, so that a one-platform run says why it has no manifest.
func TestKrewTemplateNamesAnUnbuiltArchive(t *testing.T) {
	tmpl := []byte(`{{addURIAndSha "https://example.com/{{ .TagName }}/kgc_{{ .TagName }}_linux_amd64.tar.gz" .TagName }}`)
	_, err := fillKrewTemplate(tmpl, "v0.1.0", map[string]string{"kgc_v0.1.0_linux_arm64.tar.gz": strings.Repeat("a", 64)})
	var missing *missingArchiveError
	if !errors.As(err, &missing) || missing.name != "kgc_v0.1.0_linux_amd64.tar.gz" {
		t.Errorf("err = %v, want the missing kgc_v0.1.0_linux_amd64.tar.gz", err)
	}
	out, err := fillKrewTemplate(tmpl, "v0.1.0", map[string]string{"kgc_v0.1.0_linux_amd64.tar.gz": "ff"})
	if want := "uri: https://example.com/v0.1.0/kgc_v0.1.0_linux_amd64.tar.gz\n    sha256: ff"; err != nil || string(out) != want {
		t.Errorf("filled %q, %v; want %q", out, err, want)
	}
	if out, err := fillKrewTemplate([]byte(`{{ .Version }} {{ indent 2 "a\nb" }}`), "v1.2.3-rc.1", nil); err != nil || string(out) != "1.2.3 a\n  b" {
		t.Errorf("Version and indent: %q, %v", out, err)
	}
}

func archiveNames(t *testing.T, archive []byte) []string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(fmt.Errorf("reading the archive: %w", err))
		}
		names = append(names, h.Name)
	}
}
