package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The release tests run `make dist` for this machine's platform, as a
// release does for three, and check what a user of the release checks:
// the binary says which kgc it is, the checksums and the SBOM describe
// what was shipped, and the image's binary is the archive's.

// releaseStamp is what the release tests stamp: a test version, and the
// checkout's commit and commit time, which make dist reads from git itself
// (the tests read them independently, to check it).
type releaseStamp struct {
	version, revision, buildDate string
	fromGit                      bool // false: no git checkout; make dist cannot run
}

// buildArgs are the Dockerfile's stamp arguments for s, as make image
// passes them.
func (s releaseStamp) buildArgs() map[string]string {
	return map[string]string{"VERSION": s.version, "REVISION": s.revision, "BUILD_DATE": s.buildDate, "MODIFIED": "false"}
}

var stamped struct {
	once  sync.Once
	stamp releaseStamp
}

func testStamp(t *testing.T) releaseStamp {
	t.Helper()
	stamped.once.Do(func() {
		s := releaseStamp{version: "v0.0.0-test", revision: strings.Repeat("0", 40), buildDate: "2026-01-01T00:00:00Z"}
		rev, err1 := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
		date, err2 := exec.Command("git", "-C", repoRoot, "log", "-1", "--format=%cI").Output()
		if err1 == nil && err2 == nil {
			d, err := time.Parse(time.RFC3339, strings.TrimSpace(string(date)))
			if err != nil {
				t.Fatalf("git log -1 --format=%%cI: %q: %v", date, err)
			}
			s.revision, s.buildDate, s.fromGit = strings.TrimSpace(string(rev)), d.UTC().Format(time.RFC3339), true
		} else {
			t.Logf("not a git checkout (%v, %v): a fixed stamp, and no make dist", err1, err2)
		}
		stamped.stamp = s
	})
	return stamped.stamp
}

// buildEnvUnset are the variables a release build drops from the
// environment because they would change the binary; hack/dist drops the
// same.
var buildEnvUnset = []string{"GOFLAGS", "GOWORK", "CGO_ENABLED", "GOOS", "GOARCH", "GOEXPERIMENT",
	"GO386", "GOAMD64", "GOARM", "GOARM64", "GOMIPS", "GOMIPS64", "GOPPC64", "GORISCV64", "GOWASM"}

// distRun is make dist's output for this platform, once per test binary.
var distRun struct {
	once   sync.Once
	ok     bool
	dir    string
	output string
}

// makeDist runs `make dist VERSION=v0.0.0-test PLATFORMS=<this platform>`
// in the repository and returns its output directory.
func makeDist(t *testing.T) string {
	t.Helper()
	s := testStamp(t)
	if !s.fromGit {
		t.Skip("make dist stamps the commit from git; this is not a git checkout")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("make dist needs make: %v", err)
	}
	distRun.once.Do(func() {
		dir := filepath.Join(workDir, "dist")
		// A cold build cache makes this a full build of kgc and client-go.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
		defer cancel()
		// MODIFIED is given: whether the tree is modified may change while
		// other tests write their output.
		args := []string{"dist", "VERSION=" + s.version, "PLATFORMS=" + runtime.GOOS + "/" + runtime.GOARCH, "DIST=" + dir, "MODIFIED=false"}
		cmd := exec.CommandContext(ctx, "make", args...)
		cmd.Dir = repoRoot
		// make takes its variables from the environment too.
		cmd.Env = environWithout("VERSION", "REVISION", "BUILD_DATE", "MODIFIED", "DIST", "PLATFORMS", "GO", "MAKEFLAGS", "MFLAGS")
		began := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("make %s: %s\n%s", strings.Join(args, " "), time.Since(began).Round(time.Millisecond), out)
		distRun.ok, distRun.dir, distRun.output = true, dir, string(out)
	})
	if !distRun.ok {
		t.Fatal("make dist failed (see the first test that ran it)")
	}
	return distRun.dir
}

// distBinary extracts kgc from make dist's archive for this platform.
func distBinary(t *testing.T) (bin string, archive map[string][]byte) {
	t.Helper()
	dir := makeDist(t)
	name := fmt.Sprintf("kgc_%s_%s_%s.tar.gz", testStamp(t).version, runtime.GOOS, runtime.GOARCH)
	archive = readArchive(t, filepath.Join(dir, name))
	bin = filepath.Join(t.TempDir(), "kgc")
	if err := os.WriteFile(bin, archive["kgc"], 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, archive
}

// TestMakeDistStampsTheBinary: the binary make dist archives reports the
// version it was given, the commit and the commit's time (kgc version, in
// text and JSON), and is static.
func TestMakeDistStampsTheBinary(t *testing.T) {
	bin, archive := distBinary(t)
	s := testStamp(t)
	if names := slices.Sorted(maps.Keys(archive)); !slices.Equal(names, []string{"LICENSE", "kgc"}) {
		t.Errorf("the archive holds %v, want kgc and LICENSE", names)
	}
	if lic, err := os.ReadFile(filepath.Join(repoRoot, "LICENSE")); err != nil || !bytes.Equal(lic, archive["LICENSE"]) {
		t.Errorf("the archive's LICENSE is not the repository's (%v)", err)
	}

	out, err := exec.CommandContext(t.Context(), bin, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kgc version -o json: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("kgc version -o json: %v\n%s", err, out)
	}
	want := map[string]any{
		"version": s.version, "revision": s.revision, "buildDate": s.buildDate, "modified": false,
		"goVersion": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("kgc version -o json: %s = %v, want %v", k, got[k], v)
		}
	}
	text, err := exec.CommandContext(t.Context(), bin, "version").Output()
	if err != nil {
		t.Fatalf("kgc version: %v", err)
	}
	wantText := fmt.Sprintf("kgc %s\nrevision: %s\nbuild date: %s\n", s.version, s.revision, s.buildDate)
	if !strings.HasPrefix(string(text), wantText) {
		t.Errorf("kgc version printed\n%s\nwant it to start with\n%s", text, wantText)
	}
	if runtime.GOOS == "linux" {
		if p := staticProblems(bin); len(p) > 0 {
			t.Errorf("the release binary is not static: %q", p)
		}
	}
}

// TestMakeDistChecksumsAndSBOM: the checksums file covers every artifact in
// `sha256sum -c` form, and the SBOM describes the archived binary (its
// SHA-256) with exactly the modules Go recorded in it.
func TestMakeDistChecksumsAndSBOM(t *testing.T) {
	bin, _ := distBinary(t)
	dir := distRun.dir
	s := testStamp(t)
	prefix := fmt.Sprintf("kgc_%s_%s_%s", s.version, runtime.GOOS, runtime.GOARCH)
	sumsName := fmt.Sprintf("kgc_%s_checksums.txt", s.version)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	if want := []string{sumsName, prefix + ".spdx.json", prefix + ".tar.gz"}; !slices.Equal(files, want) {
		t.Errorf("make dist wrote %v, want %v (no krew manifest for one platform)", files, want)
	}
	if !strings.Contains(distRun.output, "no krew manifest") {
		t.Errorf("make dist for one platform does not say why it wrote no krew manifest:\n%s", distRun.output)
	}

	sums, err := os.ReadFile(filepath.Join(dir, sumsName))
	if err != nil {
		t.Fatal(err)
	}
	lineRE := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Errorf("checksums line %q is not `<sha256>  <name>`", sc.Text())
			continue
		}
		listed = append(listed, m[2])
		if got := fileSHA256(t, filepath.Join(dir, m[2])); got != m[1] {
			t.Errorf("%s: SHA-256 %s, the checksums file says %s", m[2], got, m[1])
		}
	}
	if want := []string{prefix + ".spdx.json", prefix + ".tar.gz"}; !slices.Equal(listed, want) {
		t.Errorf("the checksums file lists %v, want %v", listed, want)
	}
	// What users run.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.CommandContext(t.Context(), "sha256sum", "--check", "--strict", sumsName)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum --check --strict %s: %v\n%s", sumsName, err, out)
		}
	}

	data, err := os.ReadFile(filepath.Join(dir, prefix+".spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name        string `json:"name"`
			VersionInfo string `json:"versionInfo"`
			Checksums   []struct {
				Algorithm, ChecksumValue string
			} `json:"checksums"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 2 {
		t.Fatalf("SBOM: %s with %d packages", doc.SPDXVersion, len(doc.Packages))
	}
	kgc := doc.Packages[0]
	if kgc.Name != "kgc" || kgc.VersionInfo != s.version || len(kgc.Checksums) != 1 || kgc.Checksums[0].ChecksumValue != fileSHA256(t, bin) {
		t.Errorf("the SBOM's kgc %+v does not describe the archived binary (%s)", kgc, fileSHA256(t, bin))
	}
	var sbomModules []string
	for _, p := range doc.Packages[1:] {
		if p.Name == "stdlib" {
			if p.VersionInfo != runtime.Version() {
				t.Errorf("the SBOM's standard library is %s, want %s", p.VersionInfo, runtime.Version())
			}
			continue
		}
		sbomModules = append(sbomModules, p.Name+"@"+p.VersionInfo)
	}
	// go version -m: the modules the toolchain recorded in the binary.
	mOut, err := exec.CommandContext(t.Context(), "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	var binModules []string
	for line := range strings.Lines(string(mOut)) {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "dep" {
			binModules = append(binModules, f[1]+"@"+f[2])
		}
	}
	slices.Sort(sbomModules)
	slices.Sort(binModules)
	if len(binModules) == 0 || !slices.Equal(sbomModules, binModules) {
		t.Errorf("the SBOM lists %d modules, go version -m %d:\nSBOM: %v\ngo version -m: %v", len(sbomModules), len(binModules), sbomModules, binModules)
	}
}

// TestDockerfileBuildsTheReleaseBinary: with make dist's stamp as build
// arguments, the Dockerfile's build yields the very binary make dist
// archives, byte for byte: the image and the archives are one release.
func TestDockerfileBuildsTheReleaseBinary(t *testing.T) {
	distBin, _ := distBinary(t)
	imageBin := buildAsDockerfile(t)
	if a, b := fileSHA256(t, distBin), fileSHA256(t, imageBin); a != b {
		t.Errorf("make dist's binary (SHA-256 %s) and the Dockerfile's (%s) differ for the same stamp", a, b)
	}
}

// TestMakeImagePassesTheStamp: make image gives the Dockerfile each stamp
// argument with make dist's value, and no argument it does not declare.
func TestMakeImagePassesTheStamp(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("needs make: %v", err)
	}
	df := readDockerfile(t)
	vals := map[string]string{"VERSION": "v9.8.7", "REVISION": strings.Repeat("ab", 20), "BUILD_DATE": "2026-02-03T04:05:06Z", "MODIFIED": "true"}
	args := []string{"-n", "image"}
	for k, v := range vals {
		args = append(args, k+"="+v)
	}
	cmd := exec.CommandContext(t.Context(), "make", args...)
	cmd.Dir = repoRoot
	cmd.Env = environWithout("IMAGE", "IMAGE_PLATFORMS", "IMAGE_FLAGS", "MAKEFLAGS", "MFLAGS")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	passed := map[string]string{}
	for _, m := range regexp.MustCompile(`--build-arg ([A-Z_]+)='([^']*)'`).FindAllStringSubmatch(string(out), -1) {
		passed[m[1]] = m[2]
	}
	for _, arg := range stampArgs {
		if passed[arg] != vals[arg] {
			t.Errorf("make image passes %s=%q, want %q:\n%s", arg, passed[arg], vals[arg], out)
		}
	}
	for arg := range passed {
		if _, ok := df.buildArgs[arg]; !ok {
			t.Errorf("make image passes --build-arg %s, which the Dockerfile's builder stage does not declare", arg)
		}
	}
	if !strings.Contains(string(out), "-t 'ghcr.io/kgc-dev/kgc:v9.8.7'") {
		t.Errorf("make image does not tag IMAGE:VERSION:\n%s", out)
	}
}

// readArchive returns a gzip-compressed tar's regular files by name.
func readArchive(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Errorf("%s: %s is not a regular file", path, h.Name)
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
