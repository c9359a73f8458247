package app

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/pkg/kgc"
)

// RunOptions are the flags of `kgc run`. Names follow kube-controller-manager
// where it has one.
type RunOptions struct {
	Kubeconfig            string
	Master                string
	KubeAPIQPS            float32
	KubeAPIBurst          int
	KubeAPIContentType    string
	ConcurrentGCSyncs     int
	MaxWritesInFlight     int
	DiscoveryResyncPeriod time.Duration
	UnlistedHold          time.Duration
	StuckThreshold        time.Duration
	IgnoredResources      []string
	Serving               ServingOptions // serving.go
	NamespaceLifecycle    bool
	WriteHistorySize      int
	OrphanJournal         bool
	OrphanJournalTTL      time.Duration
	StreamingLists        bool
	Shadow                ShadowOptions // shadow.go
	LeaderElection        LeaderElectionOptions
	Breaker               BreakerRunOptions
	Observability         ObservabilityOptions
	KCM                   KCMOptions

	// Completed fields.
	Ignored []schema.GroupResource
	// gcPercentChanged: --gc-percent was given (it then wins over GOGC).
	gcPercentChanged bool
}

// NewRunOptions returns the defaults.
func NewRunOptions() *RunOptions {
	o := &RunOptions{
		KubeAPIQPS:            20,
		KubeAPIBurst:          30,
		ConcurrentGCSyncs:     20,
		DiscoveryResyncPeriod: 30 * time.Second,
		UnlistedHold:          time.Minute,
		StuckThreshold:        5 * time.Minute,
		Serving:               NewServingOptions(),
		WriteHistorySize:      kgc.DefaultWriteHistorySize,
		OrphanJournal:         true,
		OrphanJournalTTL:      10 * time.Minute,
		StreamingLists:        true,
		Shadow:                ShadowOptions{Window: kgc.DefaultShadowWindow},
		LeaderElection:        NewLeaderElectionOptions(),
		Breaker:               NewBreakerRunOptions(),
		Observability:         NewObservabilityOptions(),
		KCM:                   NewKCMOptions(),
	}
	for _, gr := range discovery.DefaultIgnored() {
		o.IgnoredResources = append(o.IgnoredResources, gr.String())
	}
	return o
}

// AddFlags registers the options on fs.
func (o *RunOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Defaults to $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.")
	fs.StringVar(&o.Master, "master", o.Master, "The address of the Kubernetes API server (overrides any value in kubeconfig).")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "QPS to use while talking with the API server. Negative: no client-side rate limit (as client-go and kube-controller-manager take it).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst to use while talking with the API server. Unused when --kube-api-qps is negative.")
	fs.StringVar(&o.KubeAPIContentType, "kube-api-content-type", o.KubeAPIContentType, `Content type of the typed clients' requests (events, the leader election Lease): "application/json" or "application/vnd.kubernetes.protobuf". Empty: client-go's default (JSON). The metadata clients that carry the garbage collection's requests choose their own.`)
	fs.IntVar(&o.ConcurrentGCSyncs, "concurrent-gc-syncs", o.ConcurrentGCSyncs, "The number of garbage collector workers that are allowed to sync concurrently.")
	fs.IntVar(&o.MaxWritesInFlight, "max-writes-inflight", o.MaxWritesInFlight, "The most API writes (DELETEs and patches) in flight at once; 0 means twice --concurrent-gc-syncs. Workers hand decided writes to these slots and go on deciding.")
	fs.DurationVar(&o.DiscoveryResyncPeriod, "discovery-resync-period", o.DiscoveryResyncPeriod, "How often to rediscover deletable resources and start or stop their monitors.")
	fs.DurationVar(&o.UnlistedHold, "unlisted-hold", o.UnlistedHold, "How long an owner's orphan or foregroundDeletion finalizer waits for resources that could hold its dependents and have never been listed (a failing list); past it the finalizer is removed, and dependents found later are still orphaned, not deleted, for Orphan. Also how long a resource's first list may deliver no page before the owners its dependents wait for are read with GETs instead.")
	fs.DurationVar(&o.StuckThreshold, "stuck-threshold", o.StuckThreshold, "How long a deletion may take before kgc_stuck_objects and kgc_oldest_stuck_deletion_seconds count it (what `kgc stuck --older-than` selects).")
	fs.StringSliceVar(&o.IgnoredResources, "ignored-resources", o.IgnoredResources, "Resources never monitored, as resource.group (core: resource). Pass an empty value to monitor everything.")
	fs.BoolVar(&o.NamespaceLifecycle, "namespace-lifecycle", o.NamespaceLifecycle, "Also do the namespace controller's job: empty deleted namespaces (Pods first), set their status conditions, and remove their kubernetes finalizer once nothing is left. For API servers without kube-controller-manager; leave it off where kube-controller-manager runs its namespace controller.")
	fs.IntVar(&o.WriteHistorySize, "write-history-size", o.WriteHistorySize, "How many of its last writes (DELETEs and patches) kgc keeps in memory with why it made them (which owner was gone and how kgc knew, the policy, the preconditions, the outcome), served at /debug/controllers/garbage-collector-controller/history and read by kgc explain --ask-kgc. 0 keeps none; every write is logged either way.")
	fs.BoolVar(&o.OrphanJournal, "orphan-journal", o.OrphanJournal, "Remember the owners kgc orphaned (deleted with the Orphan policy) on the Lease <--leader-elect-resource-name>"+orphanJournalSuffix+" in --leader-elect-resource-namespace, so that a dependent seen only after its owner went (its resource unlisted past --unlisted-hold, or its watch lagging) is orphaned, not deleted, also by a restarted kgc or a new leader. kgc starts no worker until it has read that Lease (get), and each orphan finalizer removal waits until its owner is written there (create, update). Off: the memory lives in the process only.")
	fs.BoolVar(&o.StreamingLists, "streaming-lists", o.StreamingLists, "List each resource as one streaming list (a watch with sendInitialEvents: kube-apiserver's WatchList, on by default since 1.34; several times faster than pages at a million objects), falling back to pages where the server refuses or ignores it. Off: every list is paged.")
	fs.DurationVar(&o.OrphanJournalTTL, "orphan-journal-ttl", o.OrphanJournalTTL, "How long the orphan journal remembers an owner once every resource is listed and healthy and every API group discoverable (while one is not, it forgets none).")
	o.Serving.AddFlags(fs)
	o.Shadow.AddFlags(fs)
	o.LeaderElection.AddFlags(fs)
	o.Breaker.AddFlags(fs)
	o.Observability.AddFlags(fs)
	o.KCM.AddFlags(fs)
}

// Complete fills derived fields; call before Validate.
func (o *RunOptions) Complete() error {
	ignored, err := discovery.ParseGroupResources(o.IgnoredResources)
	if err != nil {
		return fmt.Errorf("--ignored-resources: %w", err)
	}
	o.Ignored = ignored
	if o.Ignored == nil {
		o.Ignored = []schema.GroupResource{}
	}
	o.Serving.complete(o.Kubeconfig)
	return nil
}

// Validate returns every problem with the options, not just the first.
func (o *RunOptions) Validate() []error {
	var errs []error
	errs = append(errs, validateClientBudget(o.KubeAPIQPS, o.KubeAPIBurst)...)
	switch o.KubeAPIContentType {
	case "", runtime.ContentTypeJSON, runtime.ContentTypeProtobuf:
	default:
		errs = append(errs, fmt.Errorf("--kube-api-content-type must be %q or %q, got %q", runtime.ContentTypeJSON, runtime.ContentTypeProtobuf, o.KubeAPIContentType))
	}
	if o.ConcurrentGCSyncs <= 0 {
		errs = append(errs, fmt.Errorf("--concurrent-gc-syncs must be positive, got %d", o.ConcurrentGCSyncs))
	}
	if o.MaxWritesInFlight < 0 {
		errs = append(errs, fmt.Errorf("--max-writes-inflight must not be negative (0 means twice --concurrent-gc-syncs), got %d", o.MaxWritesInFlight))
	}
	if o.UnlistedHold <= 0 {
		errs = append(errs, fmt.Errorf("--unlisted-hold must be positive, got %s", o.UnlistedHold))
	}
	if o.StuckThreshold <= 0 {
		errs = append(errs, fmt.Errorf("--stuck-threshold must be positive, got %s", o.StuckThreshold))
	}
	if o.WriteHistorySize < 0 {
		errs = append(errs, fmt.Errorf("--write-history-size must not be negative (0 keeps no history), got %d", o.WriteHistorySize))
	}
	if o.OrphanJournalTTL <= 0 {
		errs = append(errs, fmt.Errorf("--orphan-journal-ttl must be positive, got %s", o.OrphanJournalTTL))
	}
	if o.DiscoveryResyncPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--discovery-resync-period must be at least 1s, got %s", o.DiscoveryResyncPeriod))
	}
	errs = append(errs, o.Serving.Validate()...)
	errs = append(errs, o.Shadow.Validate(o.NamespaceLifecycle, o.Breaker)...)
	errs = append(errs, o.LeaderElection.Validate()...)
	errs = append(errs, o.Breaker.Validate()...)
	errs = append(errs, o.Observability.Validate()...)
	errs = append(errs, o.KCM.Validate()...)
	return errs
}

// validateClientBudget checks --kube-api-qps and --kube-api-burst as
// client-go reads rest.Config.QPS: a negative QPS turns its rate limiter off
// (the burst is then unused), a positive one needs a positive burst. Zero
// is refused: kube-controller-manager hands it to client-go, which then
// limits to its own default of 5 QPS — hardly what a command line meant.
func validateClientBudget(qps float32, burst int) []error {
	switch {
	case math.IsNaN(float64(qps)) || math.IsInf(float64(qps), 0):
		return []error{fmt.Errorf("--kube-api-qps must be a finite number, got %v", qps)}
	case qps == 0:
		return []error{errors.New("--kube-api-qps must not be 0 (client-go would take it as its default of 5 QPS): give a positive QPS, or a negative one for no client-side rate limit")}
	case qps > 0 && burst <= 0:
		return []error{fmt.Errorf("--kube-api-burst must be positive when --kube-api-qps is, got %d", burst)}
	}
	return nil
}

// errValidation wraps option errors so Execute can print usage hints.
var errValidation = errors.New("invalid options")

// orphanJournalSuffix names the orphan journal's Lease after the
// leader-election Lease (a Lease of its own: the leader's renewals would
// conflict with its writes).
const orphanJournalSuffix = "-orphans"

// orphanJournal returns the library's option for --orphan-journal.
func (o *RunOptions) orphanJournal() *kgc.OrphanJournalOptions {
	if !o.OrphanJournal {
		return nil
	}
	return &kgc.OrphanJournalOptions{LeaseNamespace: o.LeaderElection.ResourceNamespace,
		LeaseName: o.LeaderElection.ResourceName + orphanJournalSuffix, TTL: o.OrphanJournalTTL}
}
