package app

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Handling is what `kgc run` does with a kube-controller-manager flag.
type Handling string

const (
	// Honoured: kgc accepts the flag and does what kube-controller-manager
	// does with it, within the limits its reason states.
	Honoured Handling = "honoured"
	// Ignored: kgc accepts the flag so that the command line carries over,
	// logs that it ignores it, and why.
	Ignored Handling = "ignored"
	// Refused: kgc fails with the reason.
	Refused Handling = "refused"
)

// KCMFlag is one flag of kube-controller-manager v1.36 that concerns its
// garbage collector — the collector itself, the clients and leader
// election it runs with, how it is observed — and what `kgc run` does with
// it. The flags of kube-controller-manager's other controllers are not
// listed; kgc does not know them ("unknown flag").
type KCMFlag struct {
	Name     string
	Handling Handling
	Reason   string
	// kind is how kgc parses a flag it only ignores or refuses, so that
	// `--flag value` and a bare boolean `--flag` both read as in
	// kube-controller-manager. Honoured flags are registered by their
	// owners with their own types.
	kind valueKind
}

type valueKind int

const (
	kindString valueKind = iota
	kindBool
	kindDuration
)

// Reasons shared by groups of flags.
const (
	reasonDelegated = "without it, kgc's --kubeconfig when given, else the in-cluster service account (kube-controller-manager: the in-cluster service account only)"
	reasonMetrics   = "kgc exports its own metrics and kube-controller-manager's collector's series (docs/metrics.md) unfiltered: none is hidden or deprecated, and every label has a small fixed set of values"
	reasonCloud     = "configures the cloud provider and the node, route and IPAM controllers, not the garbage collector"
	reasonVersion   = "kgc implements the garbage collection of kube-controller-manager v1.36 (docs/semantics.md) and cannot emulate another version"
	// The alpha logging options need the LoggingAlphaOptions feature
	// gate, in kube-controller-manager as in component-base.
	reasonLogsAlpha = "parsed and validated as kube-controller-manager parses them: a value other than the default needs the LoggingAlphaOptions feature gate, which kgc, having no --feature-gates, never has, so it is refused as kube-controller-manager refuses it without the gate"
)

var kcmFlags = []KCMFlag{
	// The client.
	{Name: "kubeconfig", Handling: Honoured, Reason: "without it kgc also reads $KUBECONFIG and ~/.kube/config before the in-cluster service account; kube-controller-manager goes to the service account directly"},
	{Name: "master", Handling: Honoured},
	{Name: "kube-api-qps", Handling: Honoured, Reason: "a negative value means no client-side rate limit, as in client-go; 0, which client-go turns into its default of 5 QPS, is refused. As kube-controller-manager does for its garbage collector, the collector's own requests (owner lookups, deletions, patches) get twice this QPS, and every other client (lists and watches, discovery, events, Leases) this QPS, each its own bucket (see The request budget)"},
	{Name: "kube-api-burst", Handling: Honoured, Reason: "the burst of every client, the collector's own requests' included, as in kube-controller-manager; unused when --kube-api-qps is negative"},
	{Name: "kube-api-content-type", Handling: Honoured, Reason: "application/json or application/vnd.kubernetes.protobuf, for the typed clients (events, the leader election Lease); the metadata clients that carry the garbage collection's own requests choose theirs, in kgc as in kube-controller-manager. kgc's default is client-go's (JSON), kube-controller-manager's protobuf"},

	// The garbage collector.
	{Name: "concurrent-gc-syncs", Handling: Honoured, Reason: "workers per queue; their writes then run in --max-writes-inflight slots"},
	{Name: "enable-garbage-collector", Handling: Honoured, Reason: "true (the default) is accepted; false is refused, as kgc would have nothing to do: to stop collecting, stop kgc. kube-apiserver's flag of the same name must stay true, it adds the finalizers kgc acts on", kind: kindBool},
	{Name: "controllers", Handling: Honoured, Reason: "a list that enables the garbage collector as kube-controller-manager reads it ('*', garbage-collector-controller or its alias garbagecollector; the first entry naming it wins) is accepted and its other entries ignored, with a log line; a list that disables it is refused"},

	// kube-controller-manager's generic options.
	{Name: "min-resync-period", Handling: Ignored, Reason: "an informer's resync replays its cache to its handlers; kgc's monitors keep no cache to replay (the graph is the only copy of each object) and relist only when a watch cannot be resumed", kind: kindDuration},
	{Name: "controller-start-interval", Handling: Ignored, Reason: "kgc starts one controller", kind: kindDuration},
	{Name: "controller-shutdown-timeout", Handling: Ignored, Reason: "at shutdown kgc lets in-flight writes finish for at most 5s, then returns; nothing else waits", kind: kindDuration},
	{Name: "use-service-account-credentials", Handling: Ignored, Reason: "kgc always uses the credentials of its kubeconfig or, in a cluster, its own service account (deploy/ grants it what it needs); it does not mint a token per controller", kind: kindBool},
	{Name: "feature-gates", Handling: Refused, Reason: "kgc has no feature gates. None of kube-controller-manager v1.36's gates is read by its garbage collector's own code, and the client-go gates it applies to the collector's informers (WatchListClient and the like) do not apply to kgc's monitors, which are not client-go informers"},
	{Name: "emulated-version", Handling: Refused, Reason: reasonVersion},
	{Name: "min-compatibility-version", Handling: Refused, Reason: reasonVersion},
	{Name: "allocate-node-cidrs", Handling: Refused, Reason: reasonCloud, kind: kindBool},
	{Name: "allow-untagged-cloud", Handling: Refused, Reason: reasonCloud, kind: kindBool},
	{Name: "cidr-allocator-type", Handling: Refused, Reason: reasonCloud},
	{Name: "cloud-config", Handling: Refused, Reason: reasonCloud},
	{Name: "cloud-provider", Handling: Refused, Reason: reasonCloud},
	{Name: "cluster-cidr", Handling: Refused, Reason: reasonCloud},
	{Name: "cluster-name", Handling: Refused, Reason: reasonCloud},
	{Name: "configure-cloud-routes", Handling: Refused, Reason: reasonCloud, kind: kindBool},
	{Name: "external-cloud-volume-plugin", Handling: Refused, Reason: reasonCloud},
	{Name: "node-monitor-period", Handling: Refused, Reason: reasonCloud, kind: kindDuration},
	{Name: "node-sync-period", Handling: Refused, Reason: reasonCloud, kind: kindDuration},
	{Name: "route-reconciliation-period", Handling: Refused, Reason: reasonCloud, kind: kindDuration},

	// Leader election.
	{Name: "leader-elect", Handling: Honoured, Reason: "kgc's default is true only inside a cluster (its service account, no --kubeconfig or $KUBECONFIG), kube-controller-manager's always true"},
	{Name: "leader-elect-lease-duration", Handling: Honoured},
	{Name: "leader-elect-renew-deadline", Handling: Honoured},
	{Name: "leader-elect-retry-period", Handling: Honoured},
	{Name: "leader-elect-resource-name", Handling: Honoured, Reason: "kgc's default is kgc: a kgc holding kube-controller-manager's Lease would stop all of its controllers"},
	{Name: "leader-elect-resource-namespace", Handling: Honoured},
	{Name: "leader-elect-resource-lock", Handling: Honoured, Reason: "leases, the only value kube-controller-manager v1.36 accepts too"},
	{Name: "enable-leader-migration", Handling: Honoured, Reason: "false (the default) is accepted; true is refused: leader migration hands controllers between kube-controller-manager and cloud-controller-manager, and kgc is neither; it holds its own Lease", kind: kindBool},
	{Name: "leader-migration-config", Handling: Refused, Reason: "leader migration hands controllers between kube-controller-manager and cloud-controller-manager, and kgc is neither; it holds its own Lease (--leader-elect-resource-name)"},

	// Profiling.
	{Name: "profiling", Handling: Honoured, Reason: "serves /debug/pprof/ (on --secure-port, to identities allowed to get it); kgc's default is false, kube-controller-manager's true"},
	{Name: "contention-profiling", Handling: Honoured, Reason: "with --profiling, records every blocking event for /debug/pprof/block"},

	// Serving: kube-controller-manager's own options (k8s.io/apiserver), registered by ServingOptions.
	{Name: "bind-address", Handling: Honoured},
	{Name: "secure-port", Handling: Honoured, Reason: "kgc's default is 10355, clear of every Kubernetes component's port (kube-controller-manager's is 10257; docs/operator/security.md says why)"},
	{Name: "cert-dir", Handling: Honoured},
	{Name: "tls-cert-file", Handling: Honoured},
	{Name: "tls-private-key-file", Handling: Honoured},
	{Name: "tls-cipher-suites", Handling: Honoured},
	{Name: "tls-curve-preferences", Handling: Honoured},
	{Name: "tls-min-version", Handling: Honoured},
	{Name: "tls-sni-cert-key", Handling: Honoured},
	{Name: "disable-http2-serving", Handling: Honoured},
	{Name: "http2-max-streams-per-connection", Handling: Honoured},
	{Name: "permit-address-sharing", Handling: Honoured},
	{Name: "permit-port-sharing", Handling: Honoured},
	{Name: "authentication-kubeconfig", Handling: Honoured, Reason: reasonDelegated},
	{Name: "authentication-skip-lookup", Handling: Honoured},
	{Name: "authentication-token-webhook-cache-ttl", Handling: Honoured},
	{Name: "authentication-tolerate-lookup-failure", Handling: Honoured},
	{Name: "client-ca-file", Handling: Honoured},
	{Name: "requestheader-allowed-names", Handling: Honoured},
	{Name: "requestheader-client-ca-file", Handling: Honoured},
	{Name: "requestheader-extra-headers-prefix", Handling: Honoured},
	{Name: "requestheader-group-headers", Handling: Honoured},
	{Name: "requestheader-uid-headers", Handling: Honoured},
	{Name: "requestheader-username-headers", Handling: Honoured},
	{Name: "authorization-always-allow-paths", Handling: Honoured, Reason: "a request without credentials is authenticated as system:anonymous only on these paths and answered 401 on every other (kube-controller-manager: 403 for system:anonymous)"},
	{Name: "authorization-kubeconfig", Handling: Honoured, Reason: reasonDelegated},
	{Name: "authorization-webhook-cache-authorized-ttl", Handling: Honoured},
	{Name: "authorization-webhook-cache-unauthorized-ttl", Handling: Honoured},

	// Metrics.
	{Name: "allow-metric-labels", Handling: Refused, Reason: reasonMetrics},
	{Name: "allow-metric-labels-manifest", Handling: Refused, Reason: reasonMetrics},
	{Name: "disabled-metrics", Handling: Refused, Reason: reasonMetrics},
	{Name: "show-hidden-metrics-for-version", Handling: Refused, Reason: reasonMetrics},

	// Logs: component-base's logging, as kube-controller-manager's
	// (logging.go).
	{Name: "v", Handling: Honoured},
	{Name: "vmodule", Handling: Honoured},
	{Name: "logging-format", Handling: Honoured, Reason: "text or json, component-base's formats, as in kube-controller-manager; kgc's --log-format is another name for it"},
	{Name: "log-flush-frequency", Handling: Honoured},
	{Name: "log-text-info-buffer-size", Handling: Honoured, Reason: reasonLogsAlpha},
	{Name: "log-text-split-stream", Handling: Honoured, Reason: reasonLogsAlpha},
	{Name: "log-json-info-buffer-size", Handling: Honoured, Reason: reasonLogsAlpha},
	{Name: "log-json-split-stream", Handling: Honoured, Reason: reasonLogsAlpha},

	{Name: "version", Handling: Refused, Reason: "`kgc version` prints kgc's version", kind: kindBool},
}

// KCMFlags lists the kube-controller-manager flags that concern its garbage
// collector, each with what `kgc run` does with it.
func KCMFlags() []KCMFlag {
	out := make([]KCMFlag, len(kcmFlags))
	copy(out, kcmFlags)
	return out
}

// kcmGCController and kcmGCAlias name kube-controller-manager's garbage
// collector in its --controllers.
const (
	kcmGCController = "garbage-collector-controller"
	kcmGCAlias      = "garbagecollector"
	kcmLeaseLock    = "leases"
)

// KCMOptions are the kube-controller-manager flags `kgc run` accepts only
// so that a kube-controller-manager command line carries over (see
// KCMFlags). They are hidden from --help; docs/kcm-flags.md lists them.
type KCMOptions struct {
	EnableGarbageCollector bool
	Controllers            []string
	ResourceLock           string
	EnableLeaderMigration  bool

	// given are the ignored and refused flags on the command line, in order.
	given []givenFlag
}

type givenFlag struct {
	flag  *KCMFlag
	value string
}

// NewKCMOptions returns kube-controller-manager's defaults.
func NewKCMOptions() KCMOptions {
	return KCMOptions{EnableGarbageCollector: true, Controllers: []string{"*"}, ResourceLock: kcmLeaseLock}
}

// AddFlags registers, hidden, the kube-controller-manager flags that no
// other option of `kgc run` registers.
func (o *KCMOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.EnableGarbageCollector, "enable-garbage-collector", o.EnableGarbageCollector, "kube-controller-manager compatibility: must be true.")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "kube-controller-manager compatibility: must enable the garbage collector; kgc runs nothing else.")
	fs.StringVar(&o.ResourceLock, "leader-elect-resource-lock", o.ResourceLock, "kube-controller-manager compatibility: must be leases.")
	fs.BoolVar(&o.EnableLeaderMigration, "enable-leader-migration", o.EnableLeaderMigration, "kube-controller-manager compatibility: must be false.")
	for _, name := range []string{"enable-garbage-collector", "controllers", "leader-elect-resource-lock", "enable-leader-migration"} {
		_ = fs.MarkHidden(name)
	}
	for i := range kcmFlags {
		f := &kcmFlags[i]
		if f.Handling == Honoured {
			continue
		}
		pf := fs.VarPF(kcmValue{o: o, flag: f}, f.Name, "", "kube-controller-manager compatibility: "+string(f.Handling)+".")
		if f.kind == kindBool {
			pf.NoOptDefVal = "true"
		}
		pf.Hidden = true
	}
}

// kcmValue records an ignored or refused flag given to `kgc run`.
type kcmValue struct {
	o    *KCMOptions
	flag *KCMFlag
}

func (v kcmValue) String() string { return "" }

func (v kcmValue) Type() string {
	switch v.flag.kind {
	case kindBool:
		return "bool"
	case kindDuration:
		return "duration"
	}
	return "string"
}

// Set checks the value as kube-controller-manager would parse it.
func (v kcmValue) Set(s string) error {
	var err error
	switch v.flag.kind {
	case kindBool:
		_, err = strconv.ParseBool(s)
	case kindDuration:
		_, err = time.ParseDuration(s)
	}
	if err != nil {
		return err
	}
	v.o.given = append(v.o.given, givenFlag{flag: v.flag, value: s})
	return nil
}

// gcEnabled reads controllers as kube-controller-manager does: the first
// entry that names the garbage collector, enabling or disabling it, wins;
// else '*' enables it (it is on by default). It also returns the entries
// that concern other controllers.
func gcEnabled(controllers []string) (enabled bool, others []string) {
	decided, star := false, false
	for _, c := range controllers {
		name, disable := strings.CutPrefix(c, "-")
		switch {
		case c == "*":
			star = true
		case name == kcmGCController || name == kcmGCAlias:
			if !decided {
				enabled, decided = !disable, true
			}
		default:
			others = append(others, c)
		}
	}
	if !decided {
		enabled = star
	}
	return enabled, others
}

// Validate returns every problem with the options.
func (o *KCMOptions) Validate() []error {
	var errs []error
	if !o.EnableGarbageCollector {
		errs = append(errs, fmt.Errorf("--enable-garbage-collector=false: kgc is a garbage collector and would have nothing to do; to stop collecting, stop kgc"))
	}
	if ok, _ := gcEnabled(o.Controllers); !ok {
		errs = append(errs, fmt.Errorf("--controllers=%s disables the garbage collector (%s), which is all kgc runs", strings.Join(o.Controllers, ","), kcmGCController))
	}
	if o.ResourceLock != kcmLeaseLock {
		errs = append(errs, fmt.Errorf("--leader-elect-resource-lock must be %q, got %q", kcmLeaseLock, o.ResourceLock))
	}
	if o.EnableLeaderMigration {
		errs = append(errs, fmt.Errorf("--enable-leader-migration: leader migration hands controllers between kube-controller-manager and cloud-controller-manager, and kgc is neither; it holds its own Lease"))
	}
	for _, g := range o.given {
		if g.flag.Handling == Refused {
			errs = append(errs, fmt.Errorf("--%s is a kube-controller-manager flag kgc does not accept: %s", g.flag.Name, g.flag.Reason))
		}
	}
	return errs
}

// logIgnored says which kube-controller-manager flags kgc accepted without
// acting on them.
func (o *KCMOptions) logIgnored(logger klog.Logger) {
	for _, g := range o.given {
		if g.flag.Handling == Ignored {
			logger.Info("Ignoring a kube-controller-manager flag", "flag", "--"+g.flag.Name, "value", g.value, "reason", g.flag.Reason)
		}
	}
	if _, others := gcEnabled(o.Controllers); len(others) > 0 {
		logger.Info("Running only the garbage collector of --controllers", "ignored", others)
	}
}
