package app

import (
	"flag"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/kcm-flags.md")

// A kube-controller-manager command line for its garbage collector carries
// over: honoured flags take effect, ignored ones are accepted.
func TestKCMCommandLine(t *testing.T) {
	got, err := parse(t,
		"--kubeconfig=/etc/kubernetes/controller-manager.conf", "--kube-api-qps=-1", "--kube-api-burst=30",
		"--kube-api-content-type=application/vnd.kubernetes.protobuf", "--concurrent-gc-syncs=40",
		"--enable-garbage-collector", "--controllers=*,bootstrapsigner,tokencleaner",
		"--leader-elect=true", "--leader-elect-resource-lock=leases", "--leader-elect-resource-name=kgc",
		"--enable-leader-migration=false", "--profiling", "--contention-profiling", "--logging-format=json",
		"--min-resync-period", "12h", "--controller-start-interval=0s", "--controller-shutdown-timeout=10s",
		"--use-service-account-credentials", "--log-flush-frequency=5s",
	)
	if err != nil {
		t.Fatal(err)
	}
	if got.KubeAPIQPS != -1 || got.ConcurrentGCSyncs != 40 || !got.LeaderElection.LeaderElect || got.Observability.Logs.Format != LogFormatJSON ||
		!got.Observability.ContentionProfiling || !got.Observability.Profiling {
		t.Errorf("options = %+v", got)
	}
	var ignored []string
	for _, g := range got.KCM.given {
		ignored = append(ignored, g.flag.Name+"="+g.value)
	}
	want := []string{"min-resync-period=12h", "controller-start-interval=0s", "controller-shutdown-timeout=10s", "use-service-account-credentials=true"}
	if !slices.Equal(ignored, want) {
		t.Errorf("ignored flags recorded = %v, want %v", ignored, want)
	}

	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	got.KCM.logIgnored(logger)
	logged := strings.Join(lines, "\n")
	for _, w := range want {
		name, value, _ := strings.Cut(w, "=")
		if !strings.Contains(logged, `"flag"="--`+name+`" "value"="`+value+`"`) {
			t.Errorf("log does not say --%s=%s is ignored:\n%s", name, value, logged)
		}
	}
	if !strings.Contains(logged, `"Running only the garbage collector of --controllers" "ignored"=["bootstrapsigner" "tokencleaner"]`) {
		t.Errorf("log does not say which controllers are ignored:\n%s", logged)
	}
}

func TestKCMFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--enable-garbage-collector=false"}, "--enable-garbage-collector=false: kgc is a garbage collector"},
		{[]string{"--controllers=*,-garbage-collector-controller"}, "disables the garbage collector"},
		{[]string{"--controllers=-garbagecollector,*"}, "disables the garbage collector"},
		{[]string{"--controllers=bootstrapsigner"}, "disables the garbage collector"},
		{[]string{"--controllers="}, "disables the garbage collector"},
		{[]string{"--leader-elect-resource-lock=endpointsleases"}, `--leader-elect-resource-lock must be "leases"`},
		{[]string{"--enable-leader-migration"}, "--enable-leader-migration: leader migration"},
		{[]string{"--cloud-provider", "aws"}, "--cloud-provider is a kube-controller-manager flag kgc does not accept: configures the cloud provider"},
		{[]string{"--logging-format=xml"}, "Unsupported log format"},
		{[]string{"--log-text-split-stream"}, "LoggingAlphaOptions is disabled"},
	} {
		_, err := parse(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
	// The flags of kube-controller-manager's other controllers, and any
	// other, are unknown to kgc.
	for _, arg := range []string{"--concurrent-deployment-syncs=5", "--terminated-pod-gc-threshold=100", "--no-such-flag"} {
		if _, err := parse(t, arg); err == nil || !strings.Contains(err.Error(), "unknown flag") {
			t.Errorf("%s: err = %v, want an unknown flag", arg, err)
		}
	}
	// An ignored flag's value is still checked as kube-controller-manager
	// would.
	if _, err := parse(t, "--min-resync-period=often"); err == nil || !strings.Contains(err.Error(), "min-resync-period") {
		t.Errorf("--min-resync-period=often: err = %v", err)
	}
}

// Every refused flag fails with its reason, and all of them at once.
func TestKCMRefusedFlags(t *testing.T) {
	var all []string
	for _, f := range kcmFlags {
		if f.Handling != Refused {
			continue
		}
		arg := "--" + f.Name
		switch f.kind {
		case kindDuration:
			arg += "=1s"
		case kindString:
			arg += "=x"
		}
		all = append(all, arg)
		_, err := parse(t, arg)
		if err == nil || !strings.Contains(err.Error(), "--"+f.Name+" is a kube-controller-manager flag kgc does not accept: "+f.Reason) {
			t.Errorf("%s: err = %v", arg, err)
		}
	}
	_, err := parse(t, all...)
	if err == nil {
		t.Fatal("every refused flag at once: no error")
	}
	if n := strings.Count(err.Error(), "is a kube-controller-manager flag kgc does not accept"); n != len(all) {
		t.Errorf("%d refused flags given, %d reported", len(all), n)
	}
}

// Every listed flag is registered on `kgc run`; the compatibility-only
// ones are hidden, and a flag without a value is read as
// kube-controller-manager reads it.
func TestKCMFlagsRegistered(t *testing.T) {
	fs := NewRunCommand(nil).Flags()
	seen := map[string]bool{}
	for _, f := range kcmFlags {
		if seen[f.Name] {
			t.Errorf("--%s listed twice", f.Name)
		}
		seen[f.Name] = true
		pf := fs.Lookup(f.Name)
		if pf == nil {
			t.Errorf("--%s is listed but kgc run does not register it", f.Name)
			continue
		}
		if f.Handling != Honoured && !pf.Hidden {
			t.Errorf("--%s (%s) shows in --help", f.Name, f.Handling)
		}
		if f.Handling != Honoured && (pf.NoOptDefVal != "") != (f.kind == kindBool) {
			t.Errorf("--%s: takes no value: %v, but its kind is %v", f.Name, pf.NoOptDefVal != "", f.kind)
		}
		if f.Handling != Honoured && f.Reason == "" {
			t.Errorf("--%s is %s without a reason", f.Name, f.Handling)
		}
	}
}

func TestGCEnabled(t *testing.T) {
	for _, tc := range []struct {
		controllers []string
		enabled     bool
		others      []string
	}{
		{[]string{"*"}, true, nil},
		{[]string{"*", "bootstrapsigner", "-tokencleaner"}, true, []string{"bootstrapsigner", "-tokencleaner"}},
		{[]string{"garbage-collector-controller"}, true, nil},
		{[]string{"garbagecollector"}, true, nil},
		{[]string{"*", "-garbage-collector-controller"}, false, nil},
		{[]string{"-garbagecollector", "*"}, false, nil},
		{[]string{"garbagecollector", "-garbage-collector-controller"}, true, nil},
		{[]string{"-garbagecollector", "garbage-collector-controller"}, false, nil},
		{[]string{"bootstrapsigner"}, false, []string{"bootstrapsigner"}},
		{nil, false, nil},
	} {
		enabled, others := gcEnabled(tc.controllers)
		if enabled != tc.enabled || !slices.Equal(others, tc.others) {
			t.Errorf("gcEnabled(%q) = %v, %q; want %v, %q", tc.controllers, enabled, others, tc.enabled, tc.others)
		}
	}
}

// --contention-profiling turns the block profile on, with --profiling only.
func TestContentionProfiling(t *testing.T) {
	t.Cleanup(func() { runtime.SetBlockProfileRate(0) })
	block := func() {
		ch := make(chan struct{})
		go func() { time.Sleep(5 * time.Millisecond); close(ch) }()
		<-ch
	}
	o := ObservabilityOptions{ContentionProfiling: true}
	o.applyContentionProfiling()
	block()
	if n, _ := runtime.BlockProfile(nil); n != 0 {
		t.Fatalf("%d blocking events recorded without --profiling", n)
	}
	o.Profiling = true
	o.applyContentionProfiling()
	block()
	if n, _ := runtime.BlockProfile(nil); n == 0 {
		t.Error("no blocking event recorded with --profiling --contention-profiling")
	}
}

const (
	docKCMFlags = "../../docs/kcm-flags.md"
	docStart    = "<!-- kcm-flags:start -->"
	docEnd      = "<!-- kcm-flags:end -->"
)

// kcmFlagsMarkdown renders the flag list for docs/kcm-flags.md: one table
// per handling, flags with the same reason in one row.
func kcmFlagsMarkdown() string {
	var b strings.Builder
	for _, h := range []struct {
		handling Handling
		title    string
	}{
		{Honoured, "Honoured"},
		{Ignored, "Accepted and ignored, with a log line"},
		{Refused, "Refused, with the reason"},
	} {
		var reasons []string
		names := map[string][]string{}
		for _, f := range kcmFlags {
			if f.Handling != h.handling {
				continue
			}
			r := f.Reason
			if r == "" {
				r = "as in kube-controller-manager"
			}
			if _, ok := names[r]; !ok {
				reasons = append(reasons, r)
			}
			names[r] = append(names[r], "`--"+f.Name+"`")
		}
		b.WriteString("\n### " + h.title + "\n\n| flags | |\n|---|---|\n")
		for _, r := range reasons {
			b.WriteString("| " + strings.Join(names[r], ", ") + " | " + strings.ReplaceAll(r, "|", `\|`) + " |\n")
		}
	}
	return b.String()
}

// docs/kcm-flags.md lists exactly the flags of kcmFlags, with their
// reasons (`go test ./internal/app -run TestKCMFlagsDoc -update` rewrites
// it).
func TestKCMFlagsDoc(t *testing.T) {
	data, err := os.ReadFile(docKCMFlags)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start, end := strings.Index(doc, docStart), strings.Index(doc, docEnd)
	if start < 0 || end < start {
		t.Fatalf("%s lacks the %s … %s markers", docKCMFlags, docStart, docEnd)
	}
	want := doc[:start+len(docStart)] + "\n" + kcmFlagsMarkdown() + "\n" + doc[end:]
	if doc == want {
		return
	}
	if *update {
		if err := os.WriteFile(docKCMFlags, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date; rerun with -update", docKCMFlags)
}
