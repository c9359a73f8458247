package cpproc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// childPackage is the child's main package, built by childBinary.
const childPackage = "github.com/kgc-dev/kgc/sandbox/internal/cmd/kgc-controlplane"

// buildMu serializes this process's builds; the file lock serializes
// processes.
var buildMu sync.Mutex

// childBinary builds kgc-controlplane and returns a path to it that stays
// valid until release is called. The build runs in the directory of this
// package's sources when they exist (in the module and workspace the test
// binary was built in), else in the working directory, with the
// environment's go settings but without -race (the point of the child is
// to run the control plane without the race detector) unless race
// (Options.Race).
//
// The binary is shared by every caller building from the same source tree
// with the same toolchain and settings: its directory is keyed by them.
// `go build -o` on it relinks only when the sources changed, and rename
// replaces the file, so a hard link taken under the lock keeps the binary
// this caller built even if another caller rebuilds it right after.
func childBinary(race bool) (path string, release func(), err error) {
	goCmd := goCommand()
	srcDir := sourceDir()
	if srcDir == "" {
		if srcDir, err = os.Getwd(); err != nil {
			return "", nil, fmt.Errorf("building kgc-controlplane: %w", err)
		}
	}
	key := sha256.New()
	for _, s := range []string{fmt.Sprint(race), srcDir, goCmd, runtime.GOOS, runtime.GOARCH, runtime.Version(), os.Getenv("GOFLAGS"), os.Getenv("GOWORK"), os.Getenv("GOEXPERIMENT"), os.Getenv("CGO_ENABLED")} {
		fmt.Fprintf(key, "%q\n", s)
	}
	dir := filepath.Join(cacheDir(), "kgc-controlplane-"+hex.EncodeToString(key.Sum(nil))[:16])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("building kgc-controlplane: %w", err)
	}

	buildMu.Lock()
	defer buildMu.Unlock()
	unlock, err := lockFile(filepath.Join(dir, "lock"))
	if err != nil {
		return "", nil, fmt.Errorf("building kgc-controlplane: %w", err)
	}
	defer unlock()

	shared := filepath.Join(dir, "kgc-controlplane")
	// Without DWARF: the link takes a third of the time, and stack traces
	// and profiles do not need it. Without version control stamping: it
	// would make every commit relink the binary.
	args := []string{"build", "-ldflags=-w", "-buildvcs=false", "-o", shared}
	env := append(os.Environ(), "GOFLAGS="+withoutRace(os.Getenv("GOFLAGS")))
	if race {
		args = append(args, "-race")
	} else {
		args = append(args, PlainBuildFlags...)
		env = append(env, PlainBuildEnv...)
	}
	build := exec.Command(goCmd, append(args, childPackage)...)
	build.Dir = srcDir
	build.Env = env
	var out bytes.Buffer
	build.Stdout, build.Stderr = &out, &out
	if err := build.Run(); err != nil {
		return "", nil, fmt.Errorf("building kgc-controlplane (%s in %s): %w\n%s", strings.Join(build.Args, " "), srcDir, err, out.String())
	}
	removeStaleLinks(dir)
	linkDir, err := os.MkdirTemp(dir, "run-")
	if err != nil {
		return "", nil, fmt.Errorf("building kgc-controlplane: %w", err)
	}
	private := filepath.Join(linkDir, "kgc-controlplane")
	if err := linkOrCopy(shared, private); err != nil {
		os.RemoveAll(linkDir)
		return "", nil, fmt.Errorf("building kgc-controlplane: %w", err)
	}
	return private, func() { os.RemoveAll(linkDir) }, nil
}

// cacheDir returns where the child binaries are kept: beside the go
// command's build cache by default, so that they last as long as it does
// (a warm build cache then also means no link).
func cacheDir() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return dir
	}
	return os.TempDir()
}

// PlainBuildFlags and PlainBuildEnv are how the sandbox builds every
// program it builds without -race (this child, kubectl, kgc): as a release
// builds kgc (make dist, the Dockerfile: static, paths trimmed). Each of
// them changes how every package compiles, so builds that differ in them
// share no compiled package; alike, the child's build compiles kgc's
// dependencies once for all of them, the release builds the deploy tests
// make included.
var (
	PlainBuildFlags = []string{"-trimpath"}
	PlainBuildEnv   = []string{"CGO_ENABLED=0"}
)

// withoutRace returns GOFLAGS without -race.
func withoutRace(goflags string) string {
	var kept []string
	for _, f := range strings.Fields(goflags) {
		switch strings.TrimLeft(f, "-") {
		case "race", "race=true", "race=1":
			continue
		}
		kept = append(kept, f)
	}
	return strings.Join(kept, " ")
}

// removeStaleLinks removes the links of callers that died between taking
// theirs and removing it (a link is needed only until the child has
// started): each may hold an old binary's disk space. A link's directory
// is as old as the link.
func removeStaleLinks(dir string) {
	runs, _ := filepath.Glob(filepath.Join(dir, "run-*"))
	for _, r := range runs {
		if fi, err := os.Stat(r); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(r)
		}
	}
}

// goCommand returns the go command of the toolchain this binary was built
// with (go test runs its tests with it first in PATH; GOROOT says where
// it is otherwise).
func goCommand() string {
	if path, err := exec.LookPath("go"); err == nil {
		return path
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// sourceDir returns the directory of this package's sources, or "" when
// the binary was built without them (-trimpath, or sources moved).
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(filepath.Join(dir, "build.go")); err != nil {
		return ""
	}
	return dir
}

// linkOrCopy makes dst the file src is: a hard link where the file system
// has them, a copy otherwise.
func linkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o700)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
