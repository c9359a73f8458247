package deploy

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line    int
	keyword string // upper case
	args    string
}

// stage is one FROM … section of a Dockerfile.
type stage struct {
	from, name   string
	instructions []instruction
}

// parseDockerfile splits a Dockerfile into stages. It understands comments,
// line continuations and the instructions this repository's Dockerfile uses;
// anything fancier (heredocs, parser directives) is rejected so that the
// test never silently misreads the file.
func parseDockerfile(t *testing.T, data []byte) []stage {
	t.Helper()
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return
		}
		keyword, args, _ := strings.Cut(text, " ")
		in := instruction{line: start, keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)}
		if strings.Contains(in.args, "<<") {
			t.Fatalf("Dockerfile:%d: heredocs are not understood by this test", in.line)
		}
		switch in.keyword {
		case "FROM":
			f := strings.Fields(in.args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--platform=") })
			st := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else if len(f) != 1 {
				t.Fatalf("Dockerfile:%d: FROM %s: not understood", in.line, in.args)
			}
			stages = append(stages, st)
		case "ARG", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "ENV", "LABEL":
			if len(stages) == 0 {
				if in.keyword == "ARG" {
					return // a global ARG
				}
				t.Fatalf("Dockerfile:%d: %s before FROM", in.line, in.keyword)
			}
			stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
		default:
			t.Fatalf("Dockerfile:%d: instruction %s is not understood by this test; teach it", in.line, in.keyword)
		}
	}
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 {
			if strings.HasPrefix(trimmed, "#") || trimmed == "" {
				continue
			}
			start = i + 1
		} else if strings.HasPrefix(trimmed, "#") {
			continue // comments inside a continued instruction are dropped
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		flush()
	}
	flush()
	return stages
}

// execForm parses an exec-form (JSON array) instruction argument.
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(in.args), &out); err != nil || len(out) == 0 {
		t.Fatalf("Dockerfile:%d: %s %s: want the exec form, a JSON array (%v)", in.line, in.keyword, in.args, err)
	}
	return out
}

// buildCommand is the builder stage's `go build` RUN line: its environment
// assignments and the go command's arguments, their variables not expanded.
type buildCommand struct {
	env  map[string]string
	args []string // after "go"
	vars []string // the variables the line uses
}

// parseBuildCommand reads `VAR=value … go build …` from a RUN line.
func parseBuildCommand(t *testing.T, in instruction) buildCommand {
	t.Helper()
	fields, vars, err := shellWords(in.args)
	if err != nil {
		t.Fatalf("Dockerfile:%d: RUN %s: %v", in.line, in.args, err)
	}
	cmd := buildCommand{env: map[string]string{}, vars: vars}
	for len(fields) > 0 && strings.Contains(fields[0], "=") && !strings.HasPrefix(fields[0], "-") {
		k, v, _ := strings.Cut(fields[0], "=")
		cmd.env[k] = v
		fields = fields[1:]
	}
	if len(fields) < 2 || fields[0] != "go" || fields[1] != "build" {
		t.Fatalf("Dockerfile:%d: RUN %s: want `VAR=value … go build …`", in.line, in.args)
	}
	cmd.args = fields[1:]
	return cmd
}

// shellVarRE is a variable reference, ${NAME} or $NAME.
var shellVarRE = regexp.MustCompile(`^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)

// shellWords splits a command line into words as a shell does for the
// little shell syntax the build command needs: white space separates
// words, a double-quoted string is part of one word (the quotes removed),
// and $NAME and ${NAME} are variables, left in the words for the caller
// to expand and returned by name. Anything else a shell would interpret
// is refused: this is not a shell, and must not misread the line.
func shellWords(line string) (words, vars []string, err error) {
	var word strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '"':
			quoted, inWord = !quoted, true
		case (c == ' ' || c == '\t') && !quoted:
			if inWord {
				words, inWord = append(words, word.String()), false
				word.Reset()
			}
		case c == '$':
			m := shellVarRE.FindStringSubmatch(line[i:])
			if m == nil {
				return nil, nil, fmt.Errorf("only $NAME and ${NAME} are understood here, not %q", line[i:])
			}
			name := m[1] + m[2]
			if !slices.Contains(vars, name) {
				vars = append(vars, name)
			}
			word.WriteString(m[0])
			i += len(m[0]) - 1
			inWord = true
		case strings.IndexByte("'&|;(){}<>*?[]~`\\!#", c) >= 0 && !quoted,
			strings.IndexByte("`\\", c) >= 0:
			return nil, nil, fmt.Errorf("%q: keep the build command free of shell syntax but double quotes and variables", c)
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, nil, errors.New("unterminated double quote")
	}
	if inWord {
		words = append(words, word.String())
	}
	return words, vars, nil
}

// dockerfile is what the tests need from the Dockerfile.
type dockerfile struct {
	builderImage, finalImage string
	build                    buildCommand
	output                   string // go build -o in the builder stage
	binary                   string // where the final stage puts it
	entrypoint, cmd          []string
	user                     string
	// buildArgs are the ARGs the builder stage declares before its go
	// build line, with their defaults ("" for none).
	buildArgs map[string]string
	// argsAfterDownload: the ARGs declared after the module download,
	// whose values do not invalidate its layer.
	argsAfterDownload []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages := parseDockerfile(t, data)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want 2 (builder, final)", len(stages))
	}
	builder, final := stages[0], stages[1]
	df := dockerfile{builderImage: builder.from, finalImage: final.from, buildArgs: map[string]string{}}
	var builds []instruction
	downloaded := false
	for _, in := range builder.instructions {
		switch {
		case in.keyword == "RUN" && strings.Contains(in.args, "go build"):
			builds = append(builds, in)
		case in.keyword == "RUN" && strings.Contains(in.args, "go mod download"):
			downloaded = true
		case in.keyword == "ARG" && len(builds) == 0:
			name, def, _ := strings.Cut(in.args, "=")
			df.buildArgs[name] = def
			if downloaded {
				df.argsAfterDownload = append(df.argsAfterDownload, name)
			}
		}
	}
	if len(builds) != 1 {
		t.Fatalf("the builder stage has %d `go build` RUN lines, want 1", len(builds))
	}
	df.build = parseBuildCommand(t, builds[0])
	for i, a := range df.build.args {
		if a == "-o" && i+1 < len(df.build.args) {
			df.output = df.build.args[i+1]
		}
	}
	for _, in := range final.instructions {
		switch in.keyword {
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from="+builder.name && f[1] == df.output {
				df.binary = f[2]
			}
		case "ENTRYPOINT":
			df.entrypoint = execForm(t, in)
		case "CMD":
			df.cmd = execForm(t, in)
		case "USER":
			df.user = in.args
		}
	}
	return df
}

// TestDockerfile checks the Dockerfile's shape: a Go 1.26 builder, a
// distroless (or scratch) non-root final stage whose entrypoint is the
// binary the builder produced, built static from the root module alone.
func TestDockerfile(t *testing.T) {
	df := readDockerfile(t)
	if !strings.HasPrefix(df.builderImage, "golang:1.26") {
		t.Errorf("builder image %s, want golang:1.26", df.builderImage)
	}
	switch df.finalImage {
	case "gcr.io/distroless/static:nonroot", "scratch":
	default:
		t.Errorf("final image %s, want gcr.io/distroless/static:nonroot or scratch", df.finalImage)
	}
	if u, _, _ := strings.Cut(df.user, ":"); u == "" || u == "0" || u == "root" {
		t.Errorf("final stage USER %q, want a non-root numeric user", df.user)
	}
	for k, v := range map[string]string{"CGO_ENABLED": "0", "GOWORK": "off"} {
		if df.build.env[k] != v {
			t.Errorf("the go build RUN line sets %s=%q, want %s=%s", k, df.build.env[k], k, v)
		}
	}
	if pkg := df.build.args[len(df.build.args)-1]; pkg != "./cmd/kgc" {
		t.Errorf("go build builds %s, want ./cmd/kgc", pkg)
	}
	if df.output == "" || df.binary == "" {
		t.Fatalf("the final stage must COPY --from=<builder> the go build -o output (%q); found %q", df.output, df.binary)
	}
	if len(df.entrypoint) != 1 || df.entrypoint[0] != df.binary {
		t.Errorf("ENTRYPOINT %q, want [%q]", df.entrypoint, df.binary)
	}
	// Docker gives a RUN line only the build arguments its stage declares;
	// any other variable would be empty, silently.
	for _, v := range df.build.vars {
		if _, ok := df.buildArgs[v]; !ok {
			t.Errorf("the go build RUN line uses $%s, which the builder stage does not declare with ARG", v)
		}
	}
	// The release stamp, declared after the module download so that each
	// new version does not download the modules again.
	for _, arg := range stampArgs {
		if !slices.Contains(df.build.vars, arg) || !slices.Contains(df.argsAfterDownload, arg) {
			t.Errorf("the builder stage must declare ARG %s after `go mod download` and stamp the binary with it", arg)
		}
	}
}

// stampArgs are the Dockerfile's build arguments that stamp the binary,
// as make image passes them (make dist's stamp).
var stampArgs = []string{"VERSION", "REVISION", "BUILD_DATE", "MODIFIED"}

// built is kgc as the Dockerfile builds it, once per test binary.
var built struct {
	once sync.Once
	ok   bool
	bin  string
}

// buildAsDockerfile runs the Dockerfile's go build command as written, in a
// copy of the build context the Dockerfile gets (the repository filtered by
// .dockerignore), with its environment (CGO_ENABLED=0 GOWORK=off; this
// machine's platform for $TARGETOS/$TARGETARCH; testStamp's build
// arguments, as make image would pass them), and returns the binary.
func buildAsDockerfile(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		df := readDockerfile(t)
		ctxDir := filepath.Join(workDir, "context")
		copyBuildContext(t, repoRoot, ctxDir)
		bin := filepath.Join(workDir, "out", "kgc")
		// The build args Docker gives the builder stage on this machine:
		// the automatic platform ones, and the stamp.
		values := map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH}
		for k, v := range testStamp(t).buildArgs() {
			values[k] = v
		}
		expand := func(s string) string {
			return os.Expand(s, func(name string) string {
				if _, declared := df.buildArgs[name]; !declared {
					t.Fatalf("the go build RUN line uses $%s, which the builder stage does not declare", name)
				}
				if v, ok := values[name]; ok {
					return v
				}
				return df.buildArgs[name]
			})
		}
		args := slices.Clone(df.build.args)
		for i := range args {
			args[i] = expand(args[i])
			if i > 0 && args[i-1] == "-o" {
				args[i] = bin
			}
		}
		env := environWithout(buildEnvUnset...)
		for k, v := range df.build.env {
			env = append(env, k+"="+expand(v))
		}
		// A cold build cache makes this a full build of kgc and client-go.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
		defer cancel()
		began := time.Now()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = ctxDir
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s (in the build context, %v): %v\n%s", strings.Join(args, " "), df.build.env, err, out)
		}
		t.Logf("go %s: built in %s", strings.Join(args, " "), time.Since(began).Round(time.Millisecond))
		built.ok, built.bin = true, bin
	})
	if !built.ok {
		t.Fatal("building kgc the Dockerfile's way failed (see the first test that tried)")
	}
	return built.bin
}

// TestBuildCommand builds kgc with the Dockerfile's command (see
// buildAsDockerfile) and checks that the binary is static — it must run on
// distroless/static, which has no libc — and that it accepts the image's
// CMD and the Deployment's arguments.
func TestBuildCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the image is linux; this test reads the ELF binary it builds (GOOS=%s)", runtime.GOOS)
	}
	df := readDockerfile(t)
	bin := buildAsDockerfile(t)
	ctx := t.Context()

	t.Run("static", func(t *testing.T) {
		if p := staticProblems(bin); len(p) > 0 {
			t.Errorf("%s is not static: %q", bin, p)
		}
		// The check can fail: this machine's shell is normally dynamic.
		for _, dyn := range []string{"/bin/sh", "/usr/bin/env"} {
			if _, err := os.Stat(dyn); err != nil {
				continue
			}
			if p := staticProblems(dyn); len(p) == 0 {
				t.Logf("%s looks static: the check was not exercised on a dynamic binary", dyn)
			} else {
				t.Logf("for comparison, %s: %q", dyn, p)
			}
			break
		}
	})

	t.Run("image command", func(t *testing.T) {
		// CMD: `docker run <image>` runs kgc run.
		if out, err := exec.CommandContext(ctx, bin, append(slices.Clone(df.cmd), "--help")...).CombinedOutput(); err != nil {
			t.Errorf("kgc %q --help: %v\n%s", df.cmd, err, out)
		}
	})

	t.Run("deployment args", func(t *testing.T) {
		c := deploymentContainer(t)
		// --help parses every flag first: an unknown one fails.
		out, err := exec.CommandContext(ctx, bin, append(slices.Clone(c.Args), "--help")...).CombinedOutput()
		if err != nil {
			t.Errorf("kgc %q --help: %v\n%s", c.Args, err, out)
		}
	})
}

// deploymentContainer returns kgc's container in deploy/'s Deployment.
func deploymentContainer(t *testing.T) corev1.Container {
	t.Helper()
	var d *appsv1.Deployment
	for _, m := range loadManifests(t) {
		if m.obj.GetKind() == "Deployment" {
			d = typed[appsv1.Deployment](t, m)
		}
	}
	if d == nil || len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("deploy/ has no Deployment with one container")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Command) > 0 {
		t.Fatalf("the Deployment overrides the image's ENTRYPOINT with %q", c.Command)
	}
	return c
}

// staticProblems returns why bin is not a static ELF executable — one that
// needs no dynamic loader and no shared library — or nothing.
func staticProblems(bin string) []string {
	f, err := elf.Open(bin)
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		out = append(out, fmt.Sprintf("ELF type %s, not an executable", f.Type))
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			out = append(out, "a PT_INTERP program header: it needs a dynamic loader")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil {
		out = append(out, fmt.Sprintf("reading DT_NEEDED: %v", err))
	} else if len(libs) > 0 {
		out = append(out, fmt.Sprintf("needs shared libraries (DT_NEEDED) %q", libs))
	}
	return out
}

// environWithout returns the environment minus the given variables, so that
// the build sees what the Dockerfile sets and not this machine's settings.
func environWithout(names ...string) []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, k)
	})
}

// dockerignore holds the patterns of a .dockerignore file.
type dockerignore struct {
	patterns []ignorePattern
}

type ignorePattern struct {
	pattern   string
	exception bool // a `!` line: re-includes what earlier lines excluded
}

// parseDockerignore reads .dockerignore with Docker's rules for the syntax
// this repository uses: comments, blank lines, path patterns matched with
// filepath.Match against the path or any of its parent directories, and `!`
// exceptions; the last matching line decides. `**` is rejected: Docker's
// meaning for it is not implemented here.
func parseDockerignore(t *testing.T, data []byte) dockerignore {
	t.Helper()
	var di dockerignore
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := ignorePattern{}
		if rest, ok := strings.CutPrefix(line, "!"); ok {
			p.exception, line = true, strings.TrimSpace(rest)
		}
		if strings.Contains(line, "**") {
			t.Fatalf(".dockerignore: %q: ** is not understood by this test", line)
		}
		p.pattern = strings.TrimPrefix(path.Clean(line), "/")
		if _, err := path.Match(p.pattern, ""); err != nil {
			t.Fatalf(".dockerignore: %q: %v", line, err)
		}
		di.patterns = append(di.patterns, p)
	}
	return di
}

// excluded reports whether rel (slash-separated, relative to the context
// root) is left out of the build context.
func (di dockerignore) excluded(rel string) bool {
	out := false
	for _, p := range di.patterns {
		if matchesOrParent(p.pattern, rel) {
			out = !p.exception
		}
	}
	return out
}

// mayReinclude reports whether some exception could bring back a path
// inside the excluded directory dir, so that the walk has to enter it.
func (di dockerignore) mayReinclude(dir string) bool {
	for _, p := range di.patterns {
		if p.exception && strings.HasPrefix(p.pattern, dir+"/") {
			return true
		}
	}
	return false
}

func matchesOrParent(pattern, rel string) bool {
	for p := rel; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if ok, _ := path.Match(pattern, p); ok {
			return true
		}
	}
	return false
}

// copyBuildContext copies the files of src that .dockerignore leaves in the
// build context to dst.
func copyBuildContext(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(src, ".dockerignore"))
	if err != nil {
		t.Fatalf("the Dockerfile needs a .dockerignore (the sandbox module and .git do not belong in the build context): %v", err)
	}
	di := parseDockerignore(t, data)
	var files int
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if di.excluded(rel) {
			if d.IsDir() && !di.mayReinclude(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			files++
			return os.WriteFile(target, data, 0o644)
		default:
			return fmt.Errorf("%s: only regular files and directories are expected in the build context", rel)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
			t.Fatalf("the build context lacks %s: %v", f, err)
		}
	}
	for _, f := range []string{"sandbox", "go.work", ".git"} {
		if _, err := os.Stat(filepath.Join(dst, f)); err == nil {
			t.Errorf("the build context contains %s; .dockerignore should leave it out", f)
		}
	}
	t.Logf("build context: %d files", files)
}

// TestDockerignoreMatcher pins the matcher's reading of Docker's rules on
// the cases the whitelist .dockerignore relies on.
func TestDockerignoreMatcher(t *testing.T) {
	di := parseDockerignore(t, []byte("# c\n*\n!go.mod\n!cmd\n!/pkg/\n*.md\n"))
	for rel, want := range map[string]bool{
		"go.mod":          false,
		"go.sum":          true,
		"cmd":             false,
		"cmd/kgc/main.go": false,
		"pkg/kgc/kgc.go":  false,
		"sandbox/go.mod":  true,
		"README.md":       true,
		"cmd/README.md":   false, // *.md matches only at the root
		".git/config":     true,
		"internal/x.go":   true,
	} {
		if got := di.excluded(rel); got != want {
			t.Errorf("excluded(%q) = %v, want %v", rel, got, want)
		}
	}
	var buf bytes.Buffer
	for _, p := range di.patterns {
		fmt.Fprintf(&buf, "%v:%s ", p.exception, p.pattern)
	}
	if got, want := buf.String(), "false:* true:go.mod true:cmd true:pkg false:*.md "; got != want {
		t.Errorf("patterns = %q, want %q", got, want)
	}
}

// TestShellWords pins the build line's word splitting on what the
// Dockerfile uses, and its refusal of the shell syntax it does not
// understand.
func TestShellWords(t *testing.T) {
	words, vars, err := shellWords(`A=0 GOOS=$TARGETOS go build -ldflags="-s -X p.v=${VERSION} -X p.r=$REVISION" -o /out/kgc ./cmd/kgc`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=0", "GOOS=$TARGETOS", "go", "build", "-ldflags=-s -X p.v=${VERSION} -X p.r=$REVISION", "-o", "/out/kgc", "./cmd/kgc"}
	if !slices.Equal(words, want) {
		t.Errorf("words %q, want %q", words, want)
	}
	if !slices.Equal(vars, []string{"TARGETOS", "VERSION", "REVISION"}) {
		t.Errorf("vars %q", vars)
	}
	for _, line := range []string{
		`go build $(git rev-parse HEAD)`, `go build -ldflags='-s'`, `go build "unterminated`,
		`go build ./... && true`, "go build `x`", `go build "$(x)"`, `go build ${A:-b}`, `go build \"`,
	} {
		if _, _, err := shellWords(line); err == nil {
			t.Errorf("shellWords(%q) accepted", line)
		}
	}
}
