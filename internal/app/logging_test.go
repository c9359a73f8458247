package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"
	logsjson "k8s.io/component-base/logs/json"
)

// TestMainInSubprocess is not a test: TestJSONLogLinesHaveKCMSchema runs
// the test binary again with KGC_TEST_MAIN_ARGS set, and this runs
// kgc's Main with those arguments, as the kgc binary would, in a
// process of its own (logging is process-wide).
func TestMainInSubprocess(t *testing.T) {
	args, ok := os.LookupEnv("KGC_TEST_MAIN_ARGS")
	if !ok {
		t.Skip("runs only as a subprocess of TestJSONLogLinesHaveKCMSchema")
	}
	os.Exit(Main(context.Background(), append([]string{"kgc"}, strings.Split(args, "\n")...), os.Stdout, os.Stderr))
}

// jsonFields maps each field of a JSON log line to its JSON type.
func jsonFields(t *testing.T, line []byte) map[string]string {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal(line, &rec); err != nil {
		t.Fatalf("log line %q is not one JSON object: %v", line, err)
	}
	out := map[string]string{}
	for k, v := range rec {
		switch v.(type) {
		case float64:
			out[k] = "number"
		case string:
			out[k] = "string"
		case bool:
			out[k] = "bool"
		case map[string]any:
			out[k] = "object"
		case []any:
			out[k] = "array"
		default:
			out[k] = "null"
		}
	}
	return out
}

// TestJSONLogLinesHaveKCMSchema runs `kgc run --logging-format=json` and
// compares the fields of its log lines with those of a line
// kube-controller-manager writes: component-base's JSON logger, as
// --logging-format=json sets it up, logging the same call. A log
// pipeline parsing kube-controller-manager's lines parses kgc's.
func TestJSONLogLinesHaveKCMSchema(t *testing.T) {
	// kube-controller-manager's line for logger.V(1).Info(msg, key, value).
	var ref bytes.Buffer
	c := logsapi.NewLoggingConfiguration()
	c.Format, c.Verbosity = logsapi.JSONLogFormat, 1
	logger, _ := logsjson.Factory{}.Create(*c, logsapi.LoggingOptions{ErrorStream: &ref, InfoStream: &ref})
	logger.V(1).Info("Set the GC target percentage", "gcPercent", 50)
	want := jsonFields(t, bytes.TrimSpace(ref.Bytes()))
	for _, f := range []string{"ts", "caller", "msg", "v", "gcPercent"} {
		if _, ok := want[f]; !ok {
			t.Fatalf("component-base's JSON line %s has no %q: the reference changed", ref.Bytes(), f)
		}
	}

	began := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainInSubprocess$")
	cmd.Env = append(os.Environ(), "GOGC=", "KGC_TEST_MAIN_ARGS="+strings.Join([]string{
		"run", "--logging-format=json", "-v=1",
		"--kubeconfig=" + filepath.Join(t.TempDir(), "missing"), "--http-address=",
		"--min-resync-period=12h", // logs that kgc ignores it
	}, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("kgc run without a kubeconfig succeeded")
	}
	lines := map[string][]byte{}
	for _, line := range bytes.Split(stderr.Bytes(), []byte("\n")) {
		if bytes.HasPrefix(line, []byte("{")) {
			var rec struct{ Msg string }
			_ = json.Unmarshal(line, &rec)
			lines[rec.Msg] = line
		}
	}
	// The reference's call, and a line at verbosity 0.
	v1, v0 := lines["Set the GC target percentage"], lines["Ignoring a kube-controller-manager flag"]
	if v1 == nil || v0 == nil {
		t.Fatalf("kgc's log lacks the expected JSON lines:\n%s", stderr.String())
	}
	if got := jsonFields(t, v1); !equalFields(got, want) {
		t.Errorf("kgc's line %s has the fields %v; kube-controller-manager's %s has %v", v1, got, ref.Bytes(), want)
	}
	got := jsonFields(t, v0)
	for _, f := range []string{"ts", "caller", "msg", "v"} {
		if got[f] != want[f] {
			t.Errorf("kgc's line %s: %q is a %s, in kube-controller-manager's schema a %s", v0, f, got[f], want[f])
		}
	}
	for _, f := range []string{"flag", "value", "reason"} {
		if got[f] != "string" {
			t.Errorf("kgc's line %s: key %q is %q, want a string at the top level", v0, f, got[f])
		}
	}
	var rec struct {
		TS     float64
		Caller string
		V      int
	}
	if err := json.Unmarshal(v0, &rec); err != nil {
		t.Fatal(err)
	}
	if ts := time.UnixMicro(int64(rec.TS * 1000)); ts.Before(began.Add(-time.Second)) || ts.After(time.Now().Add(time.Second)) {
		t.Errorf("ts %v (%s) is not the time the line was written", rec.TS, ts)
	}
	if !regexp.MustCompile(`^[\w/.-]+\.go:[0-9]+$`).MatchString(rec.Caller) || rec.V != 0 {
		t.Errorf("caller %q, v %d; want file.go:line and 0", rec.Caller, rec.V)
	}
}

func equalFields(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
