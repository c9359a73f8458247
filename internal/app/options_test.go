package app

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// parse runs `kgc run args…` with a run func that only captures the options.
func parse(t *testing.T, args ...string) (*RunOptions, error) {
	t.Helper()
	var got *RunOptions
	cmd := NewRunCommand(func(_ context.Context, o *RunOptions) error {
		got = o
		return nil
	})
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	cmd.SetArgs(args)
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(context.Background())
	if err == nil && got == nil {
		t.Fatal("command succeeded without calling run")
	}
	if err != nil && got != nil {
		t.Fatalf("run was called although the command failed: %v", err)
	}
	return got, err
}

func defaults() RunOptions {
	return RunOptions{
		KubeAPIQPS:            20,
		KubeAPIBurst:          30,
		ConcurrentGCSyncs:     20,
		DiscoveryResyncPeriod: 30 * time.Second,
		UnlistedHold:          time.Minute,
		StuckThreshold:        5 * time.Minute,
		Serving:               NewServingOptions(),
		WriteHistorySize:      10000,
		OrphanJournal:         true,
		OrphanJournalTTL:      10 * time.Minute,
		StreamingLists:        true,
		Shadow:                ShadowOptions{Window: 3 * time.Minute},
		LeaderElection:        NewLeaderElectionOptions(), // off: TestMain pins "not in a cluster"
		Observability:         NewObservabilityOptions(),
		KCM:                   NewKCMOptions(),
		Breaker:               BreakerRunOptions{Enabled: true, Window: 10 * time.Minute, UnobservedOwners: 200, VanishedMinimum: 10, Rollback: true, DanglingMinimum: 1000, HoldRestored: true},
		IgnoredResources:      []string{"events", "events.events.k8s.io"},
		Ignored:               []schema.GroupResource{{Resource: "events"}, {Group: "events.k8s.io", Resource: "events"}},
	}
}

func TestRunFlags(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		modify func(o *RunOptions)
	}{
		{name: "defaults", modify: func(*RunOptions) {}},
		{name: "kubeconfig", args: []string{"--kubeconfig=/tmp/kc"}, modify: func(o *RunOptions) {
			o.Kubeconfig = "/tmp/kc"
			// The delegated authentication and authorization ask the same API server.
			o.Serving.Authentication.RemoteKubeConfigFile, o.Serving.Authorization.RemoteKubeConfigFile = "/tmp/kc", "/tmp/kc"
		}},
		{name: "delegated kubeconfigs of their own", args: []string{"--kubeconfig=/tmp/kc", "--authentication-kubeconfig=/tmp/authn", "--authorization-kubeconfig=/tmp/authz"}, modify: func(o *RunOptions) {
			o.Kubeconfig = "/tmp/kc"
			o.Serving.Authentication.RemoteKubeConfigFile, o.Serving.Authorization.RemoteKubeConfigFile = "/tmp/authn", "/tmp/authz"
		}},
		{name: "secure serving", args: []string{"--secure-port=8443", "--bind-address=127.0.0.1", "--tls-cert-file=/c.crt", "--tls-private-key-file=/c.key", "--authorization-always-allow-paths=/healthz,/metrics"}, modify: func(o *RunOptions) {
			o.Serving.SecureServing.BindPort = 8443
			o.Serving.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
			o.Serving.SecureServing.ServerCert.CertKey.CertFile, o.Serving.SecureServing.ServerCert.CertKey.KeyFile = "/c.crt", "/c.key"
			o.Serving.Authorization.AlwaysAllowPaths = []string{"/healthz", "/metrics"}
		}},
		{name: "no secure port", args: []string{"--secure-port=0"}, modify: func(o *RunOptions) { o.Serving.SecureServing.BindPort = 0 }},
		{name: "write history off", args: []string{"--write-history-size=0"}, modify: func(o *RunOptions) { o.WriteHistorySize = 0 }},
		{name: "master", args: []string{"--master", "https://10.0.0.1:6443"}, modify: func(o *RunOptions) { o.Master = "https://10.0.0.1:6443" }},
		{name: "qps", args: []string{"--kube-api-qps=55.5"}, modify: func(o *RunOptions) { o.KubeAPIQPS = 55.5 }},
		{name: "burst", args: []string{"--kube-api-burst=7"}, modify: func(o *RunOptions) { o.KubeAPIBurst = 7 }},
		{name: "negative qps: no rate limit", args: []string{"--kube-api-qps=-1"}, modify: func(o *RunOptions) { o.KubeAPIQPS = -1 }},
		{name: "negative qps: the burst is unused", args: []string{"--kube-api-qps=-1", "--kube-api-burst=0"}, modify: func(o *RunOptions) { o.KubeAPIQPS, o.KubeAPIBurst = -1, 0 }},
		{name: "content type", args: []string{"--kube-api-content-type=application/vnd.kubernetes.protobuf"}, modify: func(o *RunOptions) { o.KubeAPIContentType = "application/vnd.kubernetes.protobuf" }},
		{name: "workers", args: []string{"--concurrent-gc-syncs=3"}, modify: func(o *RunOptions) { o.ConcurrentGCSyncs = 3 }},
		{name: "writes in flight", args: []string{"--max-writes-inflight=64"}, modify: func(o *RunOptions) { o.MaxWritesInFlight = 64 }},
		{name: "unlisted hold", args: []string{"--unlisted-hold=30s"}, modify: func(o *RunOptions) { o.UnlistedHold = 30 * time.Second }},
		{name: "stuck threshold", args: []string{"--stuck-threshold=1h"}, modify: func(o *RunOptions) { o.StuckThreshold = time.Hour }},
		{name: "resync", args: []string{"--discovery-resync-period=2m30s"}, modify: func(o *RunOptions) { o.DiscoveryResyncPeriod = 150 * time.Second }},
		{name: "http address", args: []string{"--http-address=127.0.0.1:9000"}, modify: func(o *RunOptions) { o.Serving.HTTPAddress = "127.0.0.1:9000" }},
		{name: "http disabled", args: []string{"--http-address="}, modify: func(o *RunOptions) { o.Serving.HTTPAddress = "" }},
		{name: "http on localhost", args: []string{"--http-address=localhost:10258"}, modify: func(o *RunOptions) { o.Serving.HTTPAddress = "localhost:10258" }},
		{name: "ipv6 http address", args: []string{"--http-address=[::1]:10258"}, modify: func(o *RunOptions) { o.Serving.HTTPAddress = "[::1]:10258" }},
		{name: "namespace lifecycle", args: []string{"--namespace-lifecycle"}, modify: func(o *RunOptions) { o.NamespaceLifecycle = true }},
		{name: "paged lists", args: []string{"--streaming-lists=false"}, modify: func(o *RunOptions) { o.StreamingLists = false }},
		{name: "breaker off", args: []string{"--deletion-breaker=false", "--hold-restored-references=false"}, modify: func(o *RunOptions) { o.Breaker.Enabled, o.Breaker.HoldRestored = false, false }},
		{
			name: "breaker thresholds",
			args: []string{"--breaker-window=1m", "--breaker-unobserved-owners=5", "--breaker-dangling-fraction=0.5", "--breaker-dangling-minimum=7",
				"--breaker-vanished-minimum=3", "--breaker-rollback=false"},
			modify: func(o *RunOptions) {
				o.Breaker.Window, o.Breaker.UnobservedOwners, o.Breaker.DanglingFraction, o.Breaker.DanglingMinimum = time.Minute, 5, 0.5, 7
				o.Breaker.VanishedMinimum, o.Breaker.Rollback = 3, false
			},
		},
		{name: "dry run: a Lease of its own", args: []string{"--dry-run", "--shadow-window=10m"}, modify: func(o *RunOptions) {
			o.Shadow = ShadowOptions{DryRun: true, Window: 10 * time.Minute}
			o.LeaderElection.ResourceName = "kgc-shadow"
			o.Breaker.Enabled, o.Breaker.HoldRestored = false, false // shadow mode holds nothing
		}},
		{name: "dry run: the Lease given", args: []string{"--dry-run", "--leader-elect-resource-name=gc"}, modify: func(o *RunOptions) {
			o.Shadow.DryRun = true
			o.LeaderElection.ResourceName = "gc"
			o.Breaker.Enabled, o.Breaker.HoldRestored = false, false
		}},
		{
			name: "ignored resources replace the defaults",
			args: []string{"--ignored-resources=pods,deployments.apps"},
			modify: func(o *RunOptions) {
				o.IgnoredResources = []string{"pods", "deployments.apps"}
				o.Ignored = []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments"}}
			},
		},
		{
			name: "ignored resources repeated",
			args: []string{"--ignored-resources=pods", "--ignored-resources", "leases.coordination.k8s.io, secrets"},
			modify: func(o *RunOptions) {
				o.IgnoredResources = []string{"pods", "leases.coordination.k8s.io", " secrets"}
				o.Ignored = []schema.GroupResource{{Resource: "pods"}, {Group: "coordination.k8s.io", Resource: "leases"}, {Resource: "secrets"}}
			},
		},
		{
			name: "ignored resources empty means none",
			args: []string{"--ignored-resources="},
			modify: func(o *RunOptions) {
				o.IgnoredResources = []string{}
				o.Ignored = []schema.GroupResource{}
			},
		},
		{
			name: "ignored resources blank entries are skipped",
			args: []string{"--ignored-resources=pods,,"},
			modify: func(o *RunOptions) {
				o.IgnoredResources = []string{"pods", "", ""}
				o.Ignored = []schema.GroupResource{{Resource: "pods"}}
			},
		},
		{
			name: "everything",
			args: []string{
				"--kubeconfig", "kc", "--master", "m", "--kube-api-qps", "1", "--kube-api-burst", "1",
				"--concurrent-gc-syncs", "1", "--discovery-resync-period", "1s", "--http-address", "127.0.0.1:0", "--ignored-resources", "widgets.example.com",
			},
			modify: func(o *RunOptions) {
				o.Kubeconfig, o.Master, o.KubeAPIQPS, o.KubeAPIBurst = "kc", "m", 1, 1
				o.ConcurrentGCSyncs, o.DiscoveryResyncPeriod, o.Serving.HTTPAddress = 1, time.Second, "127.0.0.1:0"
				o.Serving.Authentication.RemoteKubeConfigFile, o.Serving.Authorization.RemoteKubeConfigFile = "kc", "kc"
				o.IgnoredResources = []string{"widgets.example.com"}
				o.Ignored = []schema.GroupResource{{Group: "example.com", Resource: "widgets"}}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(t, tc.args...)
			if err != nil {
				t.Fatalf("parse %v: %v", tc.args, err)
			}
			want := defaults()
			tc.modify(&want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("options for %v =\n  %+v\nwant\n  %+v", tc.args, *got, want)
			}
		})
	}
}

func TestRunFlagErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		want       []string // substrings of the error
		validation bool     // the error comes from Validate
	}{
		{name: "positional argument", args: []string{"extra"}, want: []string{"unknown command"}},
		{name: "unknown flag", args: []string{"--no-such-flag"}, want: []string{"unknown flag"}},
		{name: "qps not a number", args: []string{"--kube-api-qps=fast"}, want: []string{"kube-api-qps"}},
		{name: "bad duration", args: []string{"--discovery-resync-period=soon"}, want: []string{"discovery-resync-period"}},
		{name: "ignored resource with a slash", args: []string{"--ignored-resources=apps/deployments"}, want: []string{"--ignored-resources", `"apps/deployments"`}},
		{name: "ignored resource without a name", args: []string{"--ignored-resources=.apps"}, want: []string{`".apps"`}},
		{
			name: "every invalid ignored resource is reported",
			args: []string{"--ignored-resources=pods,a/b,.x"},
			want: []string{`"a/b"`, `".x"`},
		},
		{name: "qps zero", args: []string{"--kube-api-qps=0"}, want: []string{"--kube-api-qps must not be 0", "a negative one for no client-side rate limit"}, validation: true},
		{name: "qps not a number", args: []string{"--kube-api-qps=NaN"}, want: []string{"--kube-api-qps must be a finite number"}, validation: true},
		{name: "qps infinite", args: []string{"--kube-api-qps=+Inf"}, want: []string{"--kube-api-qps must be a finite number"}, validation: true},
		{name: "write history negative", args: []string{"--write-history-size=-1"}, want: []string{"--write-history-size must not be negative"}, validation: true},
		{name: "burst zero", args: []string{"--kube-api-burst=0"}, want: []string{"--kube-api-burst must be positive when --kube-api-qps is, got 0"}, validation: true},
		{name: "content type", args: []string{"--kube-api-content-type=application/yaml"}, want: []string{"--kube-api-content-type must be", `"application/yaml"`}, validation: true},
		{name: "workers zero", args: []string{"--concurrent-gc-syncs=0"}, want: []string{"--concurrent-gc-syncs must be positive"}, validation: true},
		{name: "workers negative", args: []string{"--concurrent-gc-syncs=-3"}, want: []string{"--concurrent-gc-syncs must be positive, got -3"}, validation: true},
		{name: "writes in flight negative", args: []string{"--max-writes-inflight=-1"}, want: []string{"--max-writes-inflight must not be negative (0 means twice --concurrent-gc-syncs), got -1"}, validation: true},
		{name: "unlisted hold zero", args: []string{"--unlisted-hold=0s"}, want: []string{"--unlisted-hold must be positive, got 0s"}, validation: true},
		{name: "stuck threshold zero", args: []string{"--stuck-threshold=0s"}, want: []string{"--stuck-threshold must be positive, got 0s"}, validation: true},
		{name: "shadow window zero", args: []string{"--shadow-window=0s"}, want: []string{"--shadow-window must be positive, got 0s"}, validation: true},
		{name: "dry run writes no namespace", args: []string{"--dry-run", "--namespace-lifecycle"}, want: []string{"--dry-run and --namespace-lifecycle exclude each other"}, validation: true},
		{name: "dry run holds nothing", args: []string{"--dry-run", "--deletion-breaker"}, want: []string{"--dry-run excludes --deletion-breaker"}, validation: true},
		{name: "resync too short", args: []string{"--discovery-resync-period=500ms"}, want: []string{"--discovery-resync-period must be at least 1s"}, validation: true},
		{name: "http address without port", args: []string{"--http-address=localhost"}, want: []string{`--http-address "localhost"`}, validation: true},
		{name: "http address with too many colons", args: []string{"--http-address=::1:80"}, want: []string{"--http-address"}, validation: true},
		{name: "plain http on every interface", args: []string{"--http-address=:10258"}, want: []string{`--http-address ":10258"`, "loopback"}, validation: true},
		{name: "plain http on a pod address", args: []string{"--http-address=10.0.0.5:10258"}, want: []string{"loopback"}, validation: true},
		{name: "secure port out of range", args: []string{"--secure-port=70000"}, want: []string{"--secure-port 70000"}, validation: true},
		{name: "always-allow path with an inner star", args: []string{"--authorization-always-allow-paths=/a*b"}, want: []string{"--authorization-always-allow-paths"}, validation: true},
		{
			name: "all validation errors at once",
			args: []string{
				"--kube-api-qps=1", "--kube-api-burst=-1", "--kube-api-content-type=text/plain", "--concurrent-gc-syncs=0",
				"--discovery-resync-period=0s", "--http-address=nope", "--controllers=-garbagecollector", "--secure-port=-1",
			},
			want: []string{
				"--kube-api-burst", "--kube-api-content-type", "--concurrent-gc-syncs",
				"--discovery-resync-period", "--http-address", "--controllers", "--secure-port",
			},
			validation: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.args...)
			if err == nil {
				t.Fatalf("parse %v succeeded", tc.args)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if got := errors.Is(err, errValidation); got != tc.validation {
				t.Errorf("errors.Is(err, errValidation) = %v, want %v", got, tc.validation)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(o *RunOptions)
		errs   int
	}{
		{"defaults", func(*RunOptions) {}, 0},
		{"no http server", func(o *RunOptions) { o.Serving.HTTPAddress = "" }, 0},
		{"no server at all", func(o *RunOptions) { o.Serving.HTTPAddress, o.Serving.SecureServing.BindPort = "", 0 }, 0},
		{"resync exactly 1s", func(o *RunOptions) { o.DiscoveryResyncPeriod = time.Second }, 0},
		{"qps zero", func(o *RunOptions) { o.KubeAPIQPS = 0 }, 1},
		{"qps negative", func(o *RunOptions) { o.KubeAPIQPS = -1 }, 0},
		{"qps negative, burst unused", func(o *RunOptions) { o.KubeAPIQPS, o.KubeAPIBurst = -1, -1 }, 0},
		{"qps positive, burst zero", func(o *RunOptions) { o.KubeAPIBurst = 0 }, 1},
		{"two problems", func(o *RunOptions) { o.KubeAPIBurst, o.ConcurrentGCSyncs = 0, -1 }, 2},
		{"breaker fraction above 1", func(o *RunOptions) { o.Breaker.DanglingFraction = 1.5 }, 1},
		{"breaker off: its thresholds unchecked", func(o *RunOptions) { o.Breaker.Enabled, o.Breaker.DanglingFraction = false, 1.5 }, 0},
		{"five problems", func(o *RunOptions) {
			o.KubeAPIBurst, o.KubeAPIContentType, o.ConcurrentGCSyncs, o.DiscoveryResyncPeriod, o.Serving.HTTPAddress = 0, "x", 0, 0, "x"
		}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewRunOptions()
			tc.modify(o)
			if errs := o.Validate(); len(errs) != tc.errs {
				t.Errorf("Validate = %v, want %d errors", errs, tc.errs)
			}
		})
	}
}

func TestCompleteDoesNotShareDefaults(t *testing.T) {
	a, b := NewRunOptions(), NewRunOptions()
	a.IgnoredResources[0] = "changed"
	if b.IgnoredResources[0] != "events" {
		t.Fatal("NewRunOptions instances share their IgnoredResources slice")
	}
}

func TestLogFlags(t *testing.T) {
	cmd := NewRunCommand(func(context.Context, *RunOptions) error { return nil })
	v := cmd.Flags().Lookup("v")
	if v == nil || v.Shorthand != "v" {
		t.Fatalf("-v flag = %+v, want verbosity with shorthand v", v)
	}
	if cmd.Flags().Lookup("vmodule") == nil {
		t.Error("--vmodule missing")
	}
	for _, name := range []string{"log_file", "logtostderr", "alsologtostderr", "log_dir"} {
		if cmd.Flags().Lookup(name) != nil {
			t.Errorf("klog file flag --%s exposed", name)
		}
	}
}

func TestRootCommand(t *testing.T) {
	var called bool
	root := NewRootCommand(context.Background(), func(_ context.Context, o *RunOptions) error {
		called = o.ConcurrentGCSyncs == 4
		return nil
	})
	root.SetArgs([]string{"run", "--concurrent-gc-syncs=4"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !called {
		t.Error("kgc run did not reach the run func with its flags")
	}
}

func TestRunErrorIsReturned(t *testing.T) {
	boom := errors.New("boom")
	cmd := NewRunCommand(func(context.Context, *RunOptions) error { return boom })
	cmd.SetArgs([]string{})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); !errors.Is(err, boom) {
		t.Errorf("Execute = %v, want the run func's error", err)
	}
}

func TestExecuteExitCode(t *testing.T) {
	var stdout, stderr strings.Builder
	if code := Execute(context.Background(), []string{"run", "--concurrent-gc-syncs=0"}, &stdout, &stderr); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if !strings.Contains(stderr.String(), "--concurrent-gc-syncs must be positive") {
		t.Errorf("stderr = %q", stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := Execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != 0 {
		t.Errorf("--help exit code %d, want 0", code)
	}
	if !strings.Contains(stdout.String(), "run") {
		t.Errorf("--help output lacks the run command: %q", stdout.String())
	}
}

func TestValidateRejectsNonNumericPort(t *testing.T) {
	for _, addr := range []string{":abc", "127.0.0.1:", ":70000"} {
		o := NewRunOptions()
		o.Serving.HTTPAddress = addr
		if errs := o.Validate(); len(errs) != 1 {
			t.Errorf("Validate(--http-address=%q) = %v, want one error", addr, errs)
		}
	}
}

func TestObservabilityFlags(t *testing.T) {
	for _, format := range []string{"--logging-format=json", "--log-format=json"} {
		var got *RunOptions
		cmd := NewRunCommand(func(_ context.Context, o *RunOptions) error { got = o; return nil })
		cmd.SetArgs([]string{format, "--profiling", "-v=3", "--log-flush-frequency=2s"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if got.Observability.Logs.Format != LogFormatJSON || !got.Observability.Profiling || got.Observability.Logs.Verbosity != 3 ||
			got.Observability.Logs.FlushFrequency.Duration.Duration != 2*time.Second {
			t.Errorf("%s: observability options = %+v, logs %+v", format, got.Observability, got.Observability.Logs)
		}
	}
	cmd := NewRunCommand(func(context.Context, *RunOptions) error { t.Fatal("run with a bad --logging-format"); return nil })
	cmd.SetArgs([]string{"--logging-format=xml"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--logging-format") || !strings.Contains(err.Error(), "Unsupported log format") {
		t.Errorf("--logging-format=xml: err = %v", err)
	}
	// --vmodule is the text format's, as in kube-controller-manager.
	cmd = NewRunCommand(func(context.Context, *RunOptions) error { t.Fatal("run with --vmodule in JSON"); return nil })
	cmd.SetArgs([]string{"--logging-format=json", "--vmodule=workers*=4"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "Only supported for text log format") {
		t.Errorf("--vmodule with JSON: err = %v", err)
	}
}

// --gc-percent when given, else GOGC from the environment, else kgc's
// default.
func TestApplyGCPercent(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name    string
		percent int
		changed bool
		gogc    string
		want    int // what the runtime ends up with
	}{
		{"default", kgc.RecommendedGCPercent, false, "", kgc.RecommendedGCPercent},
		{"GOGC wins over the default", kgc.RecommendedGCPercent, false, "80", 100},
		{"the flag wins over GOGC", 30, true, "80", 30},
		{"the flag alone", 70, true, "", 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			o := NewObservabilityOptions()
			o.GCPercent = tc.percent
			o.ApplyGCPercent(tc.changed, env(tc.gogc))
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC percent = %d, want %d", got, tc.want)
			}
		})
	}
	cmd := NewRunCommand(func(context.Context, *RunOptions) error { return nil })
	if f := cmd.Flags().Lookup("gc-percent"); f == nil || f.DefValue != strconv.Itoa(kgc.RecommendedGCPercent) {
		t.Errorf("--gc-percent flag = %+v", f)
	}
}

// writeKubeconfig writes a kubeconfig for server and returns its path.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server +
		"\ncontexts:\n- name: c\n  context:\n    cluster: c\ncurrent-context: c\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The client config kgc run builds carries the client flags as given: a
// negative QPS reaches client-go, and no RateLimiter overrides it, so
// client-go builds no rate limiter (pkg/kgc's TestWithBudget checks the
// clients client-go builds from such a config).
func TestRestConfig(t *testing.T) {
	kubeconfig := writeKubeconfig(t, "https://10.0.0.1:6443")
	for _, tc := range []struct {
		name        string
		args        []string
		qps         float32
		burst       int
		contentType string
	}{
		{name: "defaults", qps: 20, burst: 30},
		{name: "no rate limit", args: []string{"--kube-api-qps=-1"}, qps: -1, burst: 30},
		{name: "KCM command line", args: []string{"--kube-api-qps=-1", "--kube-api-burst=0", "--kube-api-content-type=application/vnd.kubernetes.protobuf"},
			qps: -1, contentType: "application/vnd.kubernetes.protobuf"},
		{name: "budget", args: []string{"--kube-api-qps=100", "--kube-api-burst=200"}, qps: 100, burst: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parse(t, append(tc.args, "--kubeconfig", kubeconfig)...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := o.RestConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tc.qps || cfg.Burst != tc.burst || cfg.ContentType != tc.contentType {
				t.Errorf("QPS %v, Burst %d, ContentType %q; want %v, %d, %q", cfg.QPS, cfg.Burst, cfg.ContentType, tc.qps, tc.burst, tc.contentType)
			}
			if cfg.RateLimiter != nil {
				t.Errorf("the config carries a RateLimiter, which would override QPS %v", cfg.QPS)
			}
		})
	}
}
