package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Flag names, as kube-controller-manager spells them.
const (
	flagLeaderElect          = "leader-elect"
	flagLeaseDuration        = "leader-elect-lease-duration"
	flagRenewDeadline        = "leader-elect-renew-deadline"
	flagRetryPeriod          = "leader-elect-retry-period"
	flagLeaseName            = "leader-elect-resource-name"
	flagLeaseNamespace       = "leader-elect-resource-namespace"
	defaultLeaseResourceName = "kgc"
)

// LeaderElectionOptions are the --leader-elect* flags of `kgc run`.
type LeaderElectionOptions struct {
	// LeaderElect is set by the flag, or else by Complete: on when kgc runs
	// in a Pod with its service account, off otherwise.
	LeaderElect       bool
	LeaseDuration     time.Duration
	RenewDeadline     time.Duration
	RetryPeriod       time.Duration
	ResourceName      string
	ResourceNamespace string
}

// NewLeaderElectionOptions returns kube-controller-manager's defaults, with
// leader election off until Complete decides.
func NewLeaderElectionOptions() LeaderElectionOptions {
	return LeaderElectionOptions{
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		ResourceName:      defaultLeaseResourceName,
		ResourceNamespace: metav1.NamespaceSystem,
	}
}

// AddFlags registers the options on fs.
func (o *LeaderElectionOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.LeaderElect, flagLeaderElect, o.LeaderElect, "Hold a Lease before collecting, so that only one of several kgc replicas acts at a time. Defaults to true inside a cluster (in-cluster service account, no --kubeconfig or $KUBECONFIG), false elsewhere.")
	fs.DurationVar(&o.LeaseDuration, flagLeaseDuration, o.LeaseDuration, "How long a standby waits after the leader's last renewal before it takes the Lease over: the longest a dead leader goes unreplaced. Counted in whole seconds.")
	fs.DurationVar(&o.RenewDeadline, flagRenewDeadline, o.RenewDeadline, "How long the leader keeps trying to renew the Lease before it stops collecting and exits. Must be less than the lease duration.")
	fs.DurationVar(&o.RetryPeriod, flagRetryPeriod, o.RetryPeriod, "How often candidates try to acquire, and the leader to renew, the Lease.")
	fs.StringVar(&o.ResourceName, flagLeaseName, o.ResourceName, "Name of the coordination.k8s.io Lease used for leader election.")
	fs.StringVar(&o.ResourceNamespace, flagLeaseNamespace, o.ResourceNamespace, "Namespace of the Lease used for leader election.")
}

// inCluster reports whether the in-cluster service account config is
// available. A variable so that tests do not depend on where they run.
var inCluster = func() bool {
	_, err := rest.InClusterConfig()
	return err == nil
}

// Complete applies the in-cluster default of --leader-elect: replicas in a
// cluster need an election, a developer's `kgc run` does not. A flag given
// explicitly always wins.
func (o *LeaderElectionOptions) Complete(fs *pflag.FlagSet, kubeconfig string) {
	if fs.Changed(flagLeaderElect) {
		return
	}
	o.LeaderElect = kubeconfig == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) == "" && inCluster()
}

// Validate returns every problem with the options. It checks them even with
// leader election off, so that a flag set wrong fails the same way
// everywhere, whatever the in-cluster default turns out to be.
func (o *LeaderElectionOptions) Validate() []error {
	var errs []error
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{{flagLeaseDuration, o.LeaseDuration}, {flagRenewDeadline, o.RenewDeadline}, {flagRetryPeriod, o.RetryPeriod}} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", d.flag, d.value))
		}
	}
	// The Lease records its duration in whole seconds, and that is what
	// standbys go by.
	if lease := o.LeaseDuration.Truncate(time.Second); o.RenewDeadline > 0 && lease <= o.RenewDeadline {
		errs = append(errs, fmt.Errorf("--%s (%s, %s in whole seconds) must be greater than --%s (%s)",
			flagLeaseDuration, o.LeaseDuration, lease, flagRenewDeadline, o.RenewDeadline))
	}
	// client-go's elector adds up to 20% jitter to the retry period.
	if o.RetryPeriod > 0 && o.RenewDeadline > 0 && float64(o.RenewDeadline) <= leaderelection.JitterFactor*float64(o.RetryPeriod) {
		errs = append(errs, fmt.Errorf("--%s (%s) must be greater than %v × --%s (%s)",
			flagRenewDeadline, o.RenewDeadline, leaderelection.JitterFactor, flagRetryPeriod, o.RetryPeriod))
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.ResourceName) {
		errs = append(errs, fmt.Errorf("--%s %q: %s", flagLeaseName, o.ResourceName, msg))
	}
	for _, msg := range validation.IsDNS1123Label(o.ResourceNamespace) {
		errs = append(errs, fmt.Errorf("--%s %q: %s", flagLeaseNamespace, o.ResourceNamespace, msg))
	}
	return errs
}

// errLostLeadership ends `kgc run` when another replica took over or the
// Lease could not be renewed in time: the process exits non-zero and its
// Pod restarts as a standby, as kube-controller-manager's does.
var errLostLeadership = errors.New("lost leadership")

// newIdentity names this candidate in the Lease: the host (the Pod name in
// a cluster) for people, plus a random suffix so that two processes on one
// host never mistake each other's Lease for their own.
func newIdentity(hostname func() (string, error)) (string, error) {
	host, err := hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// runWithLeaderElection runs collect until ctx is done — directly when
// leader election is off, else only while this process holds the Lease.
func runWithLeaderElection(ctx context.Context, cfg *rest.Config, o LeaderElectionOptions, collect func(context.Context) error) error {
	if !o.LeaderElect {
		return collect(ctx)
	}
	id, err := newIdentity(os.Hostname)
	if err != nil {
		return err
	}
	// Its own client: its own rate limiter, so that renewals never queue
	// behind the collector's requests, and a timeout, so that one hung
	// request cannot use up the renew deadline (client-go's heuristic).
	cfg = rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	cfg.Timeout = max(time.Second, o.RenewDeadline/2)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	defer httpClient.CloseIdleConnections()
	client, err := coordinationv1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("leader election client: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.ResourceNamespace, Name: o.ResourceName},
		Client:     client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	return runElected(ctx, lock, o, collect)
}

// Log keys.
const (
	logKeyLease    = "lease"
	logKeyIdentity = "identity"
	logKeyLeader   = "leader"
)

// runElected runs collect while lock is held, until ctx is done (nil, or
// collect's error), collect returns by itself (its error), or the Lease is
// lost (errLostLeadership). collect has returned when runElected returns.
func runElected(ctx context.Context, lock resourcelock.Interface, o LeaderElectionOptions, collect func(context.Context) error) error {
	// The lease key is for kgc's own messages; the collector's need none.
	logger := klog.FromContext(ctx).WithValues(logKeyLease, lock.Describe())
	electionCtx, endElection := context.WithCancel(ctx)
	defer endElection()
	e := &election{
		logger:        logger,
		collect:       collect,
		renewDeadline: o.RenewDeadline,
		endElection:   endElection,
		leadDone:      make(chan struct{}),
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          &fencedLock{Interface: lock, e: e},
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		// Safe because fencedLock lets the release through only once
		// collect has returned.
		ReleaseOnCancel: true,
		Name:            o.ResourceName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: e.lead,
			OnStoppedLeading: func() {
				if e.acquired.Load() {
					logger.Info("Stopped leading")
				}
			},
			OnNewLeader: func(leader string) {
				if leader == "" {
					return // released; the next holder is reported when it takes over
				}
				logger.Info("New leader", logKeyLeader, leader, "self", leader == lock.Identity())
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	logger.Info("Waiting to lead before collecting", logKeyIdentity, lock.Identity())
	elector.Run(electionCtx)

	// The elector has stopped: whatever the reason, collect must end too.
	_ = e.stopCollecting(context.Background())
	if e.acquired.Load() {
		<-e.leadDone
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.exited:
		return e.err
	case ctx.Err() != nil && !e.fenced:
		return nil // shutdown
	case !e.acquired.Load():
		return fmt.Errorf("leader election ended without leading, lease %s", lock.Describe())
	default:
		logger.Info("Lost leadership; collector stopped")
		return fmt.Errorf("%w of lease %s", errLostLeadership, lock.Describe())
	}
}

// election is the state shared by the elector's callbacks, fencedLock and
// runElected.
type election struct {
	logger        klog.Logger
	collect       func(context.Context) error
	renewDeadline time.Duration
	endElection   context.CancelFunc // stops the elector, which then releases the Lease

	acquired  atomic.Bool   // a write of our record succeeded, so the elector calls lead
	lastRenew atomic.Int64  // UnixNano taken before the latest successful write of our record
	leadDone  chan struct{} // closed when lead returns

	mu      sync.Mutex
	stopped bool               // collect must not start any more
	cancel  context.CancelFunc // cancels collect's context
	running chan struct{}      // closed when collect has returned; nil until it starts
	exited  bool               // collect returned by itself, not because it was stopped
	fenced  bool               // the Lease went unrenewed for the renew deadline
	err     error              // what collect returned
}

// lead is OnStartedLeading: it runs collect until ctx (cancelled by the
// elector once it stops renewing) is done, or the fence fires.
func (e *election) lead(ctx context.Context) {
	defer close(e.leadDone)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	running := make(chan struct{})
	e.cancel, e.running = cancel, running
	e.mu.Unlock()

	fenceDone := make(chan struct{})
	go func() {
		defer close(fenceDone)
		e.fence(ctx, cancel)
	}()
	e.logger.Info("Started leading; collecting")
	err := e.collect(ctx)
	exited := ctx.Err() == nil
	cancel()
	<-fenceDone
	e.mu.Lock()
	e.exited, e.err = exited, err
	e.mu.Unlock()
	close(running)
	// Hand the Lease over now rather than when it expires.
	e.endElection()
}

// fence stops collecting once the Lease has gone unrenewed for the renew
// deadline. The elector gives up at about the same time, but cancels
// lead's context only after trying to release the Lease, which takes up to
// one more request timeout; a standby may already be acting by then.
func (e *election) fence(ctx context.Context, stop context.CancelFunc) {
	for {
		left := time.Until(time.Unix(0, e.lastRenew.Load()).Add(e.renewDeadline))
		if left <= 0 {
			break
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	e.logger.Info("Lease not renewed within the renew deadline; stopping the collector", "renewDeadline", e.renewDeadline)
	e.mu.Lock()
	e.fenced = true
	e.mu.Unlock()
	stop()
	e.endElection()
}

// stopCollecting keeps collect from starting, cancels it if it runs and
// waits until it has returned or ctx is done.
func (e *election) stopCollecting(ctx context.Context) error {
	e.mu.Lock()
	e.stopped = true
	cancel, running := e.cancel, e.running
	e.mu.Unlock()
	if running == nil {
		return nil
	}
	cancel()
	select {
	case <-running:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fencedLock is the lock as the elector sees it. It notes every successful
// write of our record (for the fence), and lets a release — the record
// without holder that ReleaseOnCancel writes — reach the API server only
// once collect has returned: a standby takes over at once after a release,
// and two collectors must never act together.
type fencedLock struct {
	resourcelock.Interface
	e *election
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, r, l.Interface.Create)
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity == "" {
		if err := l.e.stopCollecting(ctx); err != nil {
			return fmt.Errorf("not releasing the lease while the collector runs: %w", err)
		}
	}
	return l.write(ctx, r, l.Interface.Update)
}

func (l *fencedLock) write(ctx context.Context, r resourcelock.LeaderElectionRecord, write func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	before := time.Now()
	if err := write(ctx, r); err != nil {
		return err
	}
	switch r.HolderIdentity {
	case l.Identity():
		l.e.lastRenew.Store(before.UnixNano())
		l.e.acquired.Store(true)
	case "":
		l.e.logger.Info("Released lease")
	}
	return nil
}
