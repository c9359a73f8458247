package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strings"
)

// The SBOM is an SPDX 2.3 document in its JSON form
// (https://spdx.github.io/spdx-spec/v2.3/), describing one binary: kgc
// itself, the Go standard library and every module linked in, as the Go
// toolchain recorded them in the binary (what `go version -m` prints).
// Those are exactly the modules whose code the binary holds, which the
// module graph (go.mod, go.sum) over-approximates.
//
// Only what dist knows for certain is asserted: kgc's license, the
// binary's SHA-256, each module's version and package URL. Dependencies'
// licenses and download locations are NOASSERTION, as SPDX permits.

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	Comment           string             `json:"comment,omitempty"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo"`
	PackageFileName       string            `json:"packageFileName,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	LicenseConcluded      string            `json:"licenseConcluded"`
	LicenseDeclared       string            `json:"licenseDeclared"`
	CopyrightText         string            `json:"copyrightText"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

const (
	noAssertion = "NOASSERTION"
	repoURL     = "https://github.com/kgc-dev/kgc"
	kgcSPDXID   = "SPDXRef-Package-kgc"
)

// sbomOf reads the build information recorded in the binary at bin and
// describes it.
func sbomOf(bin, binSHA256 string, cfg config, p platform) (spdxDocument, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return spdxDocument{}, fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	return newSBOM(bi, binSHA256, cfg, p), nil
}

// newSBOM describes the binary bi was read from. It is deterministic: the
// creation time is the build date and the namespace is derived from the
// binary's checksum, so a reproduced build has an identical SBOM.
func newSBOM(bi *debug.BuildInfo, binSHA256 string, cfg config, p platform) spdxDocument {
	name := strings.TrimSuffix(cfg.sbomName(p), ".spdx.json")
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: fmt.Sprintf("%s/spdx/%s-%s", repoURL, name, binSHA256),
		Comment: fmt.Sprintf("The kgc binary of %s, %s, built by %s with %s; the modules are those the Go toolchain recorded in the binary.",
			cfg.archiveName(p), p, bi.GoVersion, buildSettings(bi)),
		CreationInfo: spdxCreationInfo{
			Created:  cfg.buildDate,
			Creators: []string{"Tool: kgc-hack-dist-" + cfg.version},
		},
	}
	kgc := spdxPackage{
		Name:                  "kgc",
		SPDXID:                kgcSPDXID,
		VersionInfo:           cfg.version,
		PackageFileName:       "kgc",
		DownloadLocation:      fmt.Sprintf("git+%s.git@%s", repoURL, cfg.revision),
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: binSHA256}},
		LicenseConcluded:      "Apache-2.0",
		LicenseDeclared:       "Apache-2.0",
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "APPLICATION",
		ExternalRefs:          []spdxExternalRef{golangPURL(bi.Main.Path, cfg.version)},
	}
	// The standard library is a dependency like any other to a
	// vulnerability scanner; its version is the toolchain's.
	goVersion := strings.TrimPrefix(bi.GoVersion, "go")
	stdlib := spdxPackage{
		Name:                  "stdlib",
		SPDXID:                "SPDXRef-Package-go-stdlib",
		VersionInfo:           bi.GoVersion,
		DownloadLocation:      noAssertion,
		LicenseConcluded:      noAssertion,
		LicenseDeclared:       "BSD-3-Clause",
		CopyrightText:         noAssertion,
		PrimaryPackagePurpose: "LIBRARY",
		ExternalRefs:          []spdxExternalRef{golangPURL("stdlib", goVersion)},
	}
	doc.Packages = append(doc.Packages, kgc, stdlib)
	doc.Relationships = append(doc.Relationships,
		spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", kgcSPDXID},
		spdxRelationship{kgcSPDXID, "DEPENDS_ON", stdlib.SPDXID})
	seen := map[string]bool{}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			// The code linked in is the replacement's.
			d = d.Replace
		}
		id := spdxID("SPDXRef-Package-go-module-" + d.Path + "-" + d.Version)
		for base, i := id, 2; seen[id]; i++ {
			id = fmt.Sprintf("%s-%d", base, i)
		}
		seen[id] = true
		pkg := spdxPackage{
			Name:                  d.Path,
			SPDXID:                id,
			VersionInfo:           d.Version,
			DownloadLocation:      noAssertion,
			LicenseConcluded:      noAssertion,
			LicenseDeclared:       noAssertion,
			CopyrightText:         noAssertion,
			PrimaryPackagePurpose: "LIBRARY",
		}
		if d.Version != "" && d.Version != "(devel)" {
			pkg.ExternalRefs = []spdxExternalRef{golangPURL(d.Path, d.Version)}
		}
		doc.Packages = append(doc.Packages, pkg)
		doc.Relationships = append(doc.Relationships, spdxRelationship{kgcSPDXID, "DEPENDS_ON", id})
	}
	return doc
}

// buildSettings are the settings that shaped the binary, as `go version
// -m` prints them.
func buildSettings(bi *debug.BuildInfo) string {
	var parts []string
	for _, s := range bi.Settings {
		switch s.Key {
		case "-trimpath", "-ldflags", "CGO_ENABLED", "GOOS", "GOARCH", "GOAMD64", "GOARM64":
			parts = append(parts, s.Key+"="+s.Value)
		}
	}
	return strings.Join(parts, " ")
}

func purl(locator string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

// golangPURL is the package URL of a Go module version. The purl
// specification percent-encodes a version's '+' (v2.0.0+incompatible).
func golangPURL(path, version string) spdxExternalRef {
	return purl("pkg:golang/" + path + "@" + strings.ReplaceAll(version, "+", "%2B"))
}

// spdxIDUnsafe is what an SPDX identifier may not hold: it is
// "SPDXRef-" followed by letters, digits, '.' and '-'.
var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(s string) string { return spdxIDUnsafe.ReplaceAllString(s, "-") }

func (d spdxDocument) write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
