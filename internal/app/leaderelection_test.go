package app

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func TestMain(m *testing.M) {
	// --leader-elect defaults from the environment; the tests must not
	// depend on whether they happen to run in a Pod. Tests of the
	// in-cluster default set inCluster themselves.
	inCluster = func() bool { return false }
	os.Exit(m.Run())
}

func TestLeaderElectionFlags(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	tests := []struct {
		name   string
		args   []string
		modify func(o *LeaderElectionOptions)
	}{
		{name: "defaults", modify: func(*LeaderElectionOptions) {}},
		{name: "on", args: []string{"--leader-elect"}, modify: func(o *LeaderElectionOptions) { o.LeaderElect = true }},
		{name: "off", args: []string{"--leader-elect=false"}, modify: func(*LeaderElectionOptions) {}},
		{
			name: "timings",
			args: []string{"--leader-elect-lease-duration=1m", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=5s"},
			modify: func(o *LeaderElectionOptions) {
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = time.Minute, 40*time.Second, 5*time.Second
			},
		},
		{
			name: "lease",
			args: []string{"--leader-elect-resource-name=kgc.example.com", "--leader-elect-resource-namespace", "kgc-system"},
			modify: func(o *LeaderElectionOptions) {
				o.ResourceName, o.ResourceNamespace = "kgc.example.com", "kgc-system"
			},
		},
		{
			// What the sandbox integration test passes.
			name: "short timings",
			args: []string{
				"--leader-elect", "--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s",
				"--leader-elect-retry-period=500ms", "--leader-elect-resource-namespace=kgc-le-1", "--http-address=127.0.0.1:0", "--secure-port=0",
			},
			modify: func(o *LeaderElectionOptions) {
				o.LeaderElect = true
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
				o.ResourceNamespace = "kgc-le-1"
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(t, tc.args...)
			if err != nil {
				t.Fatalf("parse %v: %v", tc.args, err)
			}
			want := NewLeaderElectionOptions()
			tc.modify(&want)
			if !reflect.DeepEqual(got.LeaderElection, want) {
				t.Errorf("leader election options for %v =\n  %+v\nwant\n  %+v", tc.args, got.LeaderElection, want)
			}
		})
	}
}

func TestLeaderElectInClusterDefault(t *testing.T) {
	tests := []struct {
		name       string
		inCluster  bool
		kubeconfig string // $KUBECONFIG
		args       []string
		want       bool
	}{
		{name: "in cluster", inCluster: true, want: true},
		{name: "in cluster with --kubeconfig", inCluster: true, args: []string{"--kubeconfig=/etc/kgc/kubeconfig"}, want: false},
		{name: "in cluster with $KUBECONFIG", inCluster: true, kubeconfig: "/etc/kgc/kubeconfig", want: false},
		{name: "in cluster, explicitly off", inCluster: true, args: []string{"--leader-elect=false"}, want: false},
		{name: "in cluster with --kubeconfig, explicitly on", inCluster: true, args: []string{"--kubeconfig=kc", "--leader-elect"}, want: true},
		{name: "outside", want: false},
		{name: "outside, explicitly on", args: []string{"--leader-elect=true"}, want: true},
		{name: "outside with $KUBECONFIG, explicitly on", kubeconfig: "kc", args: []string{"--leader-elect"}, want: true},
	}
	defer func(orig func() bool) { inCluster = orig }(inCluster)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tc.kubeconfig)
			inCluster = func() bool { return tc.inCluster }
			got, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if got.LeaderElection.LeaderElect != tc.want {
				t.Errorf("--leader-elect = %v, want %v", got.LeaderElection.LeaderElect, tc.want)
			}
		})
	}
}

func TestLeaderElectionFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // substrings of the error
		errs int      // from Validate
	}{
		{name: "not a duration", args: []string{"--leader-elect-retry-period=often"}, want: []string{"leader-elect-retry-period"}},
		{name: "not a bool", args: []string{"--leader-elect=maybe"}, want: []string{"leader-elect"}},
		{
			name: "lease zero",
			args: []string{"--leader-elect-lease-duration=0"},
			want: []string{"--leader-elect-lease-duration must be positive", "--leader-elect-lease-duration (0s, 0s in whole seconds) must be greater than --leader-elect-renew-deadline (10s)"},
			errs: 2,
		},
		{
			name: "renew negative",
			args: []string{"--leader-elect-renew-deadline=-1s"},
			want: []string{"--leader-elect-renew-deadline must be positive, got -1s"},
			errs: 1,
		},
		{
			name: "retry zero",
			args: []string{"--leader-elect-retry-period=0s"},
			want: []string{"--leader-elect-retry-period must be positive"},
			errs: 1,
		},
		{
			name: "renew equals lease",
			args: []string{"--leader-elect-lease-duration=10s"},
			want: []string{"--leader-elect-lease-duration (10s, 10s in whole seconds) must be greater than --leader-elect-renew-deadline (10s)"},
			errs: 1,
		},
		{
			name: "lease counted in whole seconds",
			args: []string{"--leader-elect-lease-duration=10.9s"},
			want: []string{"(10.9s, 10s in whole seconds)"},
			errs: 1,
		},
		{
			name: "retry too close to renew",
			args: []string{"--leader-elect-retry-period=9s"},
			want: []string{"--leader-elect-renew-deadline (10s) must be greater than 1.2 × --leader-elect-retry-period (9s)"},
			errs: 1,
		},
		{name: "name not DNS-1123", args: []string{"--leader-elect-resource-name=My_Lease"}, want: []string{`--leader-elect-resource-name "My_Lease"`}, errs: 1},
		{name: "name empty", args: []string{"--leader-elect-resource-name="}, want: []string{`--leader-elect-resource-name ""`}, errs: 1},
		{name: "namespace with a dot", args: []string{"--leader-elect-resource-namespace=kube.system"}, want: []string{`--leader-elect-resource-namespace "kube.system"`}, errs: 1},
		{name: "namespace too long", args: []string{"--leader-elect-resource-namespace=" + strings.Repeat("n", 64)}, want: []string{"--leader-elect-resource-namespace", "63"}, errs: 1},
		{
			name: "every problem is reported, with the others'",
			args: []string{
				"--leader-elect", "--leader-elect-lease-duration=1s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=-1s",
				"--leader-elect-resource-name=A", "--leader-elect-resource-namespace=", "--concurrent-gc-syncs=0",
			},
			want: []string{
				"--leader-elect-retry-period must be positive", "must be greater than --leader-elect-renew-deadline (2s)",
				`--leader-elect-resource-name "A"`, `--leader-elect-resource-namespace ""`, "--concurrent-gc-syncs must be positive",
			},
			errs: 5,
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
			if got := errors.Is(err, errValidation); got != (tc.errs > 0) {
				t.Errorf("errors.Is(err, errValidation) = %v, want %v", got, tc.errs > 0)
			}
			if got := countValidationErrors(err); tc.errs > 0 && got != tc.errs {
				t.Errorf("%d validation errors, want %d: %v", got, tc.errs, err)
			}
		})
	}
}

// countValidationErrors counts the errors NewRunCommand joined.
func countValidationErrors(err error) int {
	var wrapped interface{ Unwrap() []error }
	if !errors.As(err, &wrapped) {
		return 0
	}
	for _, e := range wrapped.Unwrap() {
		if joined, ok := e.(interface{ Unwrap() []error }); ok {
			return len(joined.Unwrap())
		}
	}
	return 1
}

func TestLeaderElectionValidateCountsEveryError(t *testing.T) {
	tests := []struct {
		name   string
		modify func(o *LeaderElectionOptions)
		errs   int
	}{
		{"defaults", func(*LeaderElectionOptions) {}, 0},
		{"defaults, on", func(o *LeaderElectionOptions) { o.LeaderElect = true }, 0},
		{"one second lease", func(o *LeaderElectionOptions) {
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = time.Second, 500*time.Millisecond, 100*time.Millisecond
		}, 0},
		{"all durations zero", func(o *LeaderElectionOptions) { o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 0, 0, 0 }, 3},
		{"lease too short, retry too long", func(o *LeaderElectionOptions) { o.LeaseDuration, o.RetryPeriod = 5*time.Second, 10*time.Second }, 2},
		{"both names", func(o *LeaderElectionOptions) { o.ResourceName, o.ResourceNamespace = "-x", "X" }, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewLeaderElectionOptions()
			tc.modify(&o)
			if errs := o.Validate(); len(errs) != tc.errs {
				t.Errorf("Validate = %v, want %d errors", errs, tc.errs)
			}
		})
	}
}

func TestNewIdentity(t *testing.T) {
	host := func() (string, error) { return "kgc-7d9f-abcde", nil }
	a, err := newIdentity(host)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newIdentity(host)
	if !strings.HasPrefix(a, "kgc-7d9f-abcde_") || len(a) <= len("kgc-7d9f-abcde_") {
		t.Errorf("identity %q is not hostname_suffix", a)
	}
	if a == b {
		t.Errorf("two identities on one host are equal: %q", a)
	}
	boom := errors.New("no hostname")
	if _, err := newIdentity(func() (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Errorf("newIdentity = %v, want the hostname error", err)
	}
}

func TestLeaderElectionOffRunsDirectly(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(t.Context(), key{}, "caller")
	var got any
	err := runWithLeaderElection(ctx, nil, LeaderElectionOptions{}, func(ctx context.Context) error {
		got = ctx.Value(key{})
		return errors.New("collector error")
	})
	if err == nil || err.Error() != "collector error" || got != "caller" {
		t.Errorf("runWithLeaderElection = %v with context value %v, want the collector's error and the caller's context", err, got)
	}
}

// Timings of the elector tests: the Lease counts whole seconds, so one
// second is the shortest lease there is.
var testTimings = LeaderElectionOptions{
	LeaderElect:   true,
	LeaseDuration: time.Second,
	RenewDeadline: 500 * time.Millisecond,
	RetryPeriod:   100 * time.Millisecond,
	ResourceName:  "kgc",
}

// waitTimeout bounds every wait of the elector tests.
const waitTimeout = 10 * time.Second

func TestElectedShutdownReleasesAfterCollectorStops(t *testing.T) {
	lease := newMemLease()
	var collecting atomic.Bool
	lease.onWrite = func(r resourcelock.LeaderElectionRecord) {
		if r.HolderIdentity == "" && collecting.Load() {
			t.Error("the Lease was released while the collector still ran")
		}
	}
	started := make(chan struct{})
	collect := func(ctx context.Context) error {
		collecting.Store(true)
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // draining workers
		collecting.Store(false)
		return nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := goRunElected(ctx, lease.lock("a"), collect)
	waitFor(t, started, "the collector to start")
	if r := lease.get(); r.HolderIdentity != "a" {
		t.Fatalf("Lease holder %q while a collects", r.HolderIdentity)
	}
	cancel()
	if err := waitResult(t, done); err != nil {
		t.Errorf("runElected after shutdown = %v, want nil", err)
	}
	if collecting.Load() {
		t.Error("runElected returned before the collector did")
	}
	if r := lease.get(); r.HolderIdentity != "" {
		t.Errorf("Lease holder %q after shutdown, want released", r.HolderIdentity)
	}
}

func TestElectedOneCollectorAtATimeAndHandOver(t *testing.T) {
	lease := newMemLease()
	var active, maxActive atomic.Int32
	leading := make(chan string, 2)
	collect := func(id string) func(context.Context) error {
		return func(ctx context.Context) error {
			n := active.Add(1)
			for m := maxActive.Load(); n > m && !maxActive.CompareAndSwap(m, n); m = maxActive.Load() {
			}
			leading <- id
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond)
			active.Add(-1)
			return nil
		}
	}
	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	done := map[string]<-chan error{
		"a": goRunElected(ctxA, lease.lock("a"), collect("a")),
		"b": goRunElected(ctxB, lease.lock("b"), collect("b")),
	}
	cancels := map[string]context.CancelFunc{"a": cancelA, "b": cancelB}

	first := waitValue(t, leading, "a leader")
	second := map[string]string{"a": "b", "b": "a"}[first]
	// The standby keeps trying (every retry period) and must keep failing.
	select {
	case id := <-leading:
		t.Fatalf("%s started collecting while %s leads", id, first)
	case <-time.After(5 * testTimings.RetryPeriod):
	}
	if r := lease.get(); r.HolderIdentity != first {
		t.Fatalf("Lease holder %q, but %s collects", r.HolderIdentity, first)
	}

	stoppedAt := time.Now()
	cancels[first]()
	if err := waitResult(t, done[first]); err != nil {
		t.Errorf("the first leader's runElected after shutdown = %v, want nil", err)
	}
	if id := waitValue(t, leading, "the standby to take over"); id != second {
		t.Fatalf("%s leads again", id)
	}
	// Released, so the standby need not wait for the Lease to expire.
	if took := time.Since(stoppedAt); took >= testTimings.LeaseDuration {
		t.Errorf("hand-over took %s, not less than the lease duration: the Lease was not released", took)
	}
	cancels[second]()
	if err := waitResult(t, done[second]); err != nil {
		t.Errorf("the second leader's runElected = %v", err)
	}
	if m := maxActive.Load(); m != 1 {
		t.Errorf("%d collectors ran at once", m)
	}
}

func TestElectedLostLeadership(t *testing.T) {
	lease := newMemLease()
	started := make(chan struct{})
	var returned atomic.Bool
	collect := func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		returned.Store(true)
		return nil
	}
	done := goRunElected(t.Context(), lease.lock("a"), collect)
	waitFor(t, started, "the collector to start")

	// Another replica takes the Lease (as after a long pause of ours).
	lease.steal("thief", time.Hour)
	stolenAt := time.Now()
	err := waitResult(t, done)
	if !errors.Is(err, errLostLeadership) {
		t.Fatalf("runElected = %v, want errLostLeadership", err)
	}
	if !returned.Load() {
		t.Error("runElected returned before the collector did")
	}
	if took := time.Since(stolenAt); took > testTimings.RenewDeadline+testTimings.RetryPeriod+500*time.Millisecond {
		t.Errorf("stopping took %s after the Lease was taken", took)
	}
	if r := lease.get(); r.HolderIdentity != "thief" {
		t.Errorf("Lease holder %q, want the thief's record left alone", r.HolderIdentity)
	}
}

// TestElectedFence: with the API server hanging, client-go's elector
// notices only after its renew deadline and then still tries to release
// the Lease before it cancels the leader's context; the fence stops the
// collector a renew deadline after the last successful renewal regardless.
func TestElectedFence(t *testing.T) {
	lease := newMemLease()
	started := make(chan struct{})
	var stoppedAt atomic.Int64
	collect := func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		stoppedAt.Store(time.Now().UnixNano())
		return nil
	}
	done := goRunElected(t.Context(), lease.lock("a"), collect)
	waitFor(t, started, "the collector to start")
	// Let it renew a few times, then hang every request.
	time.Sleep(3 * testTimings.RetryPeriod)
	lastRenew := lease.hangAll()

	err := waitResult(t, done)
	if !errors.Is(err, errLostLeadership) {
		t.Fatalf("runElected = %v, want errLostLeadership", err)
	}
	stopped := time.Unix(0, stoppedAt.Load())
	if after := stopped.Sub(lastRenew); after > testTimings.RenewDeadline+250*time.Millisecond {
		t.Errorf("collector stopped %s after the last renewal, want within the renew deadline (%s)", after, testTimings.RenewDeadline)
	}
}

func TestElectedCollectorError(t *testing.T) {
	lease := newMemLease()
	boom := errors.New("monitors did not sync")
	err := waitResult(t, goRunElected(t.Context(), lease.lock("a"), func(context.Context) error { return boom }))
	if !errors.Is(err, boom) {
		t.Fatalf("runElected = %v, want the collector's error", err)
	}
	if r := lease.get(); r.HolderIdentity != "" {
		t.Errorf("Lease holder %q after the collector failed, want released", r.HolderIdentity)
	}
}

func TestElectedStandbyNeverCollects(t *testing.T) {
	lease := newMemLease()
	lease.steal("other", time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), 5*testTimings.RetryPeriod)
	defer cancel()
	err := waitResult(t, goRunElected(ctx, lease.lock("a"), func(context.Context) error {
		t.Error("a standby collected")
		return nil
	}))
	if err != nil {
		t.Errorf("runElected of a standby at shutdown = %v, want nil", err)
	}
	if r := lease.get(); r.HolderIdentity != "other" {
		t.Errorf("Lease holder %q, want the leader's record left alone", r.HolderIdentity)
	}
}

func goRunElected(ctx context.Context, lock resourcelock.Interface, collect func(context.Context) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- runElected(ctx, lock, testTimings, collect) }()
	return done
}

func waitFor(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func waitValue[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	return waitValue(t, done, "runElected to return")
}

// memLease is a Lease in memory with the API server's optimistic
// concurrency, shared by the candidates of one test.
type memLease struct {
	mu      sync.Mutex
	record  *resourcelock.LeaderElectionRecord
	version int
	hang    bool // every request blocks until its context ends
	renewed time.Time
	onWrite func(resourcelock.LeaderElectionRecord)
}

func newMemLease() *memLease { return &memLease{} }

func (l *memLease) lock(id string) *memLock { return &memLock{lease: l, id: id} }

func (l *memLease) get() resourcelock.LeaderElectionRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return resourcelock.LeaderElectionRecord{}
	}
	return *l.record
}

// steal writes another holder's record, as a replica that took over would.
func (l *memLease) steal(holder string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	l.record = &resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: int(d / time.Second)}
	l.record.AcquireTime.Time, l.record.RenewTime.Time = now, now
	l.version++
}

// hangAll makes every later request hang and returns when the Lease was
// last renewed.
func (l *memLease) hangAll() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hang = true
	return l.renewed
}

var leasesResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// enter holds l.mu on success; a hanging request waits for ctx instead.
func (l *memLease) enter(ctx context.Context) error {
	l.mu.Lock()
	if l.hang {
		l.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

type memLock struct {
	lease *memLease
	id    string
	seen  int // version of the latest record read or written, like LeaseLock's resourceVersion
}

var _ resourcelock.Interface = &memLock{}

func (m *memLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l := m.lease
	if err := l.enter(ctx); err != nil {
		return nil, nil, err
	}
	defer l.mu.Unlock()
	if l.record == nil {
		return nil, nil, apierrors.NewNotFound(leasesResource, "kgc")
	}
	m.seen = l.version
	r := *l.record
	raw, err := json.Marshal(r)
	return &r, raw, err
}

func (m *memLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	l := m.lease
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	if l.record != nil {
		return apierrors.NewAlreadyExists(leasesResource, "kgc")
	}
	m.write(r)
	return nil
}

func (m *memLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	l := m.lease
	if err := l.enter(ctx); err != nil {
		return err
	}
	defer l.mu.Unlock()
	if l.record == nil {
		return apierrors.NewNotFound(leasesResource, "kgc")
	}
	if m.seen != l.version {
		return apierrors.NewConflict(leasesResource, "kgc", errors.New("the object has been modified"))
	}
	m.write(r)
	return nil
}

// write stores r; l.mu is held.
func (m *memLock) write(r resourcelock.LeaderElectionRecord) {
	l := m.lease
	if l.onWrite != nil {
		l.onWrite(r)
	}
	l.record = &r
	l.version++
	m.seen = l.version
	if r.HolderIdentity != "" {
		l.renewed = time.Now()
	}
}

func (m *memLock) RecordEvent(string) {}
func (m *memLock) Identity() string   { return m.id }
func (m *memLock) Describe() string   { return "test/kgc" }
