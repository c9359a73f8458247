package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"runtime/debug"
	"testing"
)

// Patterns of the SPDX 2.3 JSON schema for identifiers, times and
// checksum values.
var (
	spdxIDPattern    = regexp.MustCompile(`^SPDXRef-[a-zA-Z0-9.-]+$`)
	spdxTimePattern  = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]|23:59:60)Z$`)
	spdxValuePattern = regexp.MustCompile(`^[0-9a-f]+$`)
)

func TestSBOM(t *testing.T) {
	cfg, err := parseConfig([]string{"-version", "v0.1.0", "-revision", testRevision, "-build-date", "2026-11-26T09:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Path:      "github.com/kgc-dev/kgc/cmd/kgc",
		Main:      debug.Module{Path: "github.com/kgc-dev/kgc", Version: "(devel)"},
		Deps: []*debug.Module{
			{Path: "k8s.io/client-go", Version: "v0.36.3", Sum: "h1:x"},
			{Path: "github.com/Old/thing", Version: "v2.0.0+incompatible"},
			{Path: "example.com/replaced", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.0.1"}},
			// Two paths that sanitize to the same identifier.
			{Path: "example.com/a_b", Version: "v1.0.0"},
			{Path: "example.com/a~b", Version: "v1.0.0"},
		},
		Settings: []debug.BuildSetting{{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"}, {Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}},
	}
	binSum := "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	doc := newSBOM(bi, binSum, cfg, platform{"linux", "arm64"})

	var buf bytes.Buffer
	if err := doc.write(&buf); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := newSBOM(bi, binSum, cfg, platform{"linux", "arm64"}).write(&again); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("the SBOM of the same binary differs from one run to the next (%v)", err)
	}

	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.Name != "kgc_v0.1.0_linux_arm64" {
		t.Errorf("document header %+v", doc)
	}
	if !spdxTimePattern.MatchString(doc.CreationInfo.Created) || doc.CreationInfo.Created != cfg.buildDate || len(doc.CreationInfo.Creators) == 0 {
		t.Errorf("creation info %+v", doc.CreationInfo)
	}
	ids := map[string]spdxPackage{}
	for _, p := range doc.Packages {
		if !spdxIDPattern.MatchString(p.SPDXID) {
			t.Errorf("package %s: SPDXID %q", p.Name, p.SPDXID)
		}
		if _, dup := ids[p.SPDXID]; dup {
			t.Errorf("SPDXID %s twice", p.SPDXID)
		}
		ids[p.SPDXID] = p
		for _, c := range p.Checksums {
			if c.Algorithm != "SHA256" || !spdxValuePattern.MatchString(c.ChecksumValue) {
				t.Errorf("package %s: checksum %+v", p.Name, c)
			}
		}
	}
	kgc := ids[kgcSPDXID]
	if kgc.VersionInfo != "v0.1.0" || len(kgc.Checksums) != 1 || kgc.Checksums[0].ChecksumValue != binSum ||
		kgc.LicenseDeclared != "Apache-2.0" || kgc.DownloadLocation != "git+https://github.com/kgc-dev/kgc.git@"+testRevision {
		t.Errorf("kgc's package %+v", kgc)
	}
	purls := map[string]string{}
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			if r.ReferenceType == "purl" {
				purls[p.Name] = r.ReferenceLocator
			}
		}
	}
	for name, want := range map[string]string{
		"kgc":                  "pkg:golang/github.com/kgc-dev/kgc@v0.1.0",
		"stdlib":               "pkg:golang/stdlib@1.26.8",
		"k8s.io/client-go":     "pkg:golang/k8s.io/client-go@v0.36.3",
		"github.com/Old/thing": "pkg:golang/github.com/Old/thing@v2.0.0%2Bincompatible",
		"example.com/fork":     "pkg:golang/example.com/fork@v1.0.1",
	} {
		if purls[name] != want {
			t.Errorf("purl of %s = %q, want %q", name, purls[name], want)
		}
	}
	if _, ok := purls["example.com/replaced"]; ok {
		t.Error("a replaced module is listed, not its replacement only")
	}
	if len(doc.Packages) != 2+len(bi.Deps) {
		t.Errorf("%d packages, want kgc, stdlib and %d modules", len(doc.Packages), len(bi.Deps))
	}
	// kgc is described, and depends on every other package.
	depends := map[string]bool{}
	described := false
	for _, r := range doc.Relationships {
		if _, ok := ids[r.RelatedSPDXElement]; !ok {
			t.Errorf("relationship %+v names an unknown element", r)
		}
		switch {
		case r.SPDXElementID == "SPDXRef-DOCUMENT" && r.RelationshipType == "DESCRIBES" && r.RelatedSPDXElement == kgcSPDXID:
			described = true
		case r.SPDXElementID == kgcSPDXID && r.RelationshipType == "DEPENDS_ON":
			depends[r.RelatedSPDXElement] = true
		default:
			t.Errorf("unexpected relationship %+v", r)
		}
	}
	if !described || len(depends) != len(doc.Packages)-1 {
		t.Errorf("described %v, kgc depends on %d of %d other packages", described, len(depends), len(doc.Packages)-1)
	}
	var generic map[string]any
	if err := json.Unmarshal(buf.Bytes(), &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"spdxVersion", "dataLicense", "SPDXID", "name", "documentNamespace", "creationInfo", "packages", "relationships"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("the JSON lacks %s", k)
		}
	}
}
