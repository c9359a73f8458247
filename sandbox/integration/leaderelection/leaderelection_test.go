package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// The election timings the processes run with: short, so that a
	// takeover after SIGKILL takes seconds.
	leaseDuration = 3 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
	leaseName     = "kgc" // --leader-elect-resource-name's default

	// waitTimeout bounds every wait; pollInterval is how often waits re-check.
	waitTimeout  = 60 * time.Second
	pollInterval = 50 * time.Millisecond

	// bigCascade is the number of dependents of the cascade the leader is
	// killed in. kgc runs at 20 QPS (burst 30), so it needs about 14 s for
	// them: the test sees the cascade half done with room to spare.
	bigCascade = 300

	// Log lines that show who acts. "Deleting garbage" is logged at -v=2
	// for every DELETE kgc issues.
	logDeleting = "Deleting garbage"
	logLeading  = "Started leading"
	logWaiting  = "Waiting to lead before collecting"
	logLost     = "lost leadership"
)

func TestLeaderElection(t *testing.T) {
	ctx := t.Context()
	ns := createNamespace(t)

	a, b := startKGC(t, "a", ns), startKGC(t, "b", ns)
	procs := []*proc{a, b}

	// Exactly one process holds the Lease.
	holder := waitLeaseHolder(t, ns, func(h string) bool { return h != "" })
	leader, standby := whoIs(t, holder, procs)
	t.Logf("%s leads (%s); %s stands by", leader.Name, holder, standby.Name)

	// Only the leader acts: a small background cascade.
	small := createCascade(t, ns, "small", 5, false)
	deleteOwner(t, ns, small, metav1.DeletePropagationBackground)
	waitCascadeGone(t, ns, small)
	if h := leaseHolder(t, ns); h != holder {
		t.Fatalf("Lease holder changed from %s to %s during a quiet cascade", holder, h)
	}
	if n := leader.Count(t, logDeleting); n < 5 {
		t.Errorf("the leader logged %d %q lines for 5 dependents", n, logDeleting)
	}
	for _, line := range []string{logDeleting, logLeading} {
		if n := standby.Count(t, line); n != 0 {
			t.Errorf("the standby logged %q %d times", line, n)
		}
	}

	// A Foreground cascade with many blocking dependents; the leader is
	// killed (no release) as soon as some but not all are gone.
	big := createCascade(t, ns, "big", bigCascade, true)
	deleteOwner(t, ns, big, metav1.DeletePropagationForeground)
	var left int
	poll(t, "the cascade to start", func(ctx context.Context) (bool, error) {
		n, err := dependentsLeft(ctx, ns, big)
		if n == 0 && err == nil {
			return false, errors.New("the leader finished the cascade before it could be killed")
		}
		left = n
		return n < bigCascade, err
	})
	leader.Kill(t)
	killedAt := time.Now()
	t.Logf("killed %s with %d of %d dependents left", leader.Name, left, bigCascade)

	// The standby takes over once the Lease expires, and finishes.
	waitLeaseHolder(t, ns, func(h string) bool { return h == standby.identity })
	takeover := time.Since(killedAt)
	waitCascadeGone(t, ns, big)
	finished := time.Since(killedAt)
	t.Logf("%s took the Lease %s after the kill and finished the cascade %s after it", standby.Name, takeover.Round(time.Millisecond), finished.Round(time.Millisecond))
	// The Lease cannot be taken before it expires; after that, a standby
	// tries every retry period (plus jitter).
	if takeover > leaseDuration+5*retryPeriod+5*time.Second {
		t.Errorf("takeover took %s with a %s lease", takeover, leaseDuration)
	}
	if n := standby.Count(t, logDeleting); n == 0 {
		t.Errorf("the new leader logged no %q line", logDeleting)
	}

	// A graceful shutdown releases the Lease at once and exits 0.
	standby.Signal(t, syscall.SIGTERM)
	if code := standby.Wait(t); code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", standby.Name, code)
	}
	if h := leaseHolder(t, ns); h != "" {
		t.Errorf("Lease holder %q after the leader's graceful shutdown, want released", h)
	}

	// A leader that loses its Lease stops and exits non-zero.
	c := startKGC(t, "c", ns)
	waitLeaseHolder(t, ns, func(h string) bool { return h == c.identity })
	poll(t, "c to start collecting", func(context.Context) (bool, error) { return c.Count(t, logLeading) > 0, nil })
	stealLease(ctx, t, ns, "intruder")
	stolenAt := time.Now()
	code := c.Wait(t)
	t.Logf("c exited %d, %s after its Lease was taken", code, time.Since(stolenAt).Round(time.Millisecond))
	if code == 0 {
		t.Errorf("c exited 0 after losing its Lease")
	}
	if n := c.Count(t, logLost); n == 0 {
		t.Errorf("c's log does not say %q", logLost)
	}
	if h := leaseHolder(t, ns); h != "intruder" {
		t.Errorf("Lease holder %q after c lost it, want the intruder's record untouched", h)
	}
}

// proc is one `kgc run` process.
type proc struct {
	*testenv.Proc
	identity string // its Lease holder identity, from its log
}

// startKGC starts `kgc run` with leader election on the Lease in ns, and
// returns once the process has logged its identity. A cleanup kills it.
func startKGC(t *testing.T, name, ns string) *proc {
	t.Helper()
	p := &proc{Proc: testenv.StartProc(t, name, waitTimeout, kgcBinary, "run",
		"--kubeconfig", kubeconfigPath,
		"--leader-elect",
		"--leader-elect-lease-duration="+leaseDuration.String(),
		"--leader-elect-renew-deadline="+renewDeadline.String(),
		"--leader-elect-retry-period="+retryPeriod.String(),
		"--leader-elect-resource-namespace="+ns,
		"--http-address=127.0.0.1:0", "--secure-port=0",
		// The budget the big cascade's timing relies on, pinned.
		"--kube-api-qps=20", "--kube-api-burst=30",
		"-v=2",
	)}
	poll(t, "kgc "+name+" to log its identity", func(context.Context) (bool, error) {
		if m := identityRE.FindStringSubmatch(p.Line(t, logWaiting)); m != nil {
			p.identity = m[1]
			p.Note = p.identity // shown with its log
			return true, nil
		}
		if code, ok := p.Exited(); ok {
			return false, fmt.Errorf("kgc %s exited %d", name, code)
		}
		return false, nil
	})
	return p
}

// identityRE finds the identity in a log line, text or JSON format.
var identityRE = regexp.MustCompile(`identity"?[=:]"([^"]+)"`)

// whoIs returns the process holding identity, and the other one.
func whoIs(t *testing.T, identity string, procs []*proc) (holder, other *proc) {
	t.Helper()
	if len(procs) != 2 {
		t.Fatalf("whoIs takes two processes")
	}
	switch identity {
	case procs[0].identity:
		return procs[0], procs[1]
	case procs[1].identity:
		return procs[1], procs[0]
	}
	t.Fatalf("Lease holder %q is neither %s (%s) nor %s (%s)", identity, procs[0].Name, procs[0].identity, procs[1].Name, procs[1].identity)
	return nil, nil
}

func poll(t *testing.T, what string, cond wait.ConditionWithContextFunc) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func createNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kgc-le-" + utilrand.String(5)}}
	if _, err := client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// leaseHolder returns the Lease's holderIdentity ("" when released or
// not created yet).
func leaseHolder(t *testing.T, ns string) string {
	t.Helper()
	h, err := getLeaseHolder(t.Context(), ns)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func getLeaseHolder(ctx context.Context, ns string) (string, error) {
	lease, err := client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
}

// waitLeaseHolder waits until the holder satisfies ok, and returns it.
func waitLeaseHolder(t *testing.T, ns string, ok func(string) bool) string {
	t.Helper()
	var holder string
	poll(t, "the Lease holder", func(ctx context.Context) (bool, error) {
		h, err := getLeaseHolder(ctx, ns)
		holder = h
		return err == nil && ok(h), err
	})
	return holder
}

// stealLease makes holder the Lease's holder for an hour, as a replica
// that took over would.
func stealLease(ctx context.Context, t *testing.T, ns, holder string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec = coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1),
		}
		_, err = client.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("taking the Lease: %v", err)
	}
}

// cascade is an owner ConfigMap and its dependent ConfigMaps, labelled
// with the cascade's name.
type cascade struct {
	name  string
	owner *corev1.ConfigMap
}

const labelCascade = "kgc.test/cascade"

func createCascade(t *testing.T, ns, name string, dependents int, block bool) cascade {
	t.Helper()
	ctx := t.Context()
	owner, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-owner"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{
		APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		BlockOwnerDeletion: ptr.To(block),
	}
	for i := range dependents {
		_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:            fmt.Sprintf("%s-%03d", name, i),
				Labels:          map[string]string{labelCascade: name},
				OwnerReferences: []metav1.OwnerReference{ref},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	return cascade{name: name, owner: owner}
}

func deleteOwner(t *testing.T, ns string, c cascade, policy metav1.DeletionPropagation) {
	t.Helper()
	err := client.CoreV1().ConfigMaps(ns).Delete(t.Context(), c.owner.Name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &c.owner.UID},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func dependentsLeft(ctx context.Context, ns string, c cascade) (int, error) {
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: labelCascade + "=" + c.name})
	if err != nil {
		return 0, err
	}
	return len(list.Items), nil
}

// waitCascadeGone waits until the owner and every dependent are gone.
func waitCascadeGone(t *testing.T, ns string, c cascade) {
	t.Helper()
	poll(t, "cascade "+c.name+" to complete", func(ctx context.Context) (bool, error) {
		n, err := dependentsLeft(ctx, ns, c)
		if err != nil || n > 0 {
			return false, err
		}
		_, err = client.CoreV1().ConfigMaps(ns).Get(ctx, c.owner.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// A new leader takes over a backlog: the leader dies, its dependents'
// owners are deleted while no replica leads, and the next leader (a
// `kgc run` with the default flags: the deletion breaker on its Lease,
// the restore hold, the orphan journal) collects every dependent at
// start-up, as kube-controller-manager's collector would, without
// tripping anything. (CI size; KGC_BULK_FULL=1 runs 5,000.)
func TestBacklogAfterLeaderChange(t *testing.T) {
	n := 500
	if ok, _ := strconv.ParseBool(os.Getenv("KGC_BULK_FULL")); ok {
		n = 5000
	}
	ctx := t.Context()
	ns := createNamespace(t)
	a := startKGC(t, "a", ns)
	waitLeaseHolder(t, ns, func(h string) bool { return h == a.identity })
	owners := make([]types.UID, n)
	for i := range n {
		o, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("owner-%d", i), Labels: map[string]string{labelCascade: "backlog-owner"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owners[i] = o.UID
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("dep-%d", i), Labels: map[string]string{labelCascade: "backlog"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: o.Name, UID: o.UID, BlockOwnerDeletion: ptr.To(true)}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a.Kill(t)
	bg := metav1.DeletePropagationBackground
	if err := client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg},
		metav1.ListOptions{LabelSelector: labelCascade + "=backlog-owner"}); err != nil {
		t.Fatal(err)
	}
	b := startKGC(t, "b", ns)
	waitLeaseHolder(t, ns, func(h string) bool { return h == b.identity })
	began := time.Now()
	backlog := cascade{name: "backlog"}
	err := wait.PollUntilContextTimeout(ctx, pollInterval, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		left, err := dependentsLeft(ctx, ns, backlog)
		return left == 0, err
	})
	if err != nil {
		left, _ := dependentsLeft(ctx, ns, backlog)
		t.Fatalf("the new leader left %d of %d dependents: %v", left, n, err)
	}
	t.Logf("BULK backlog (leader change): %d dependents collected %s after the new leader took the Lease", n, time.Since(began).Round(time.Millisecond))
	if c := b.Count(t, "Deletion circuit breaker tripped"); c != 0 {
		t.Errorf("the new leader's breaker tripped %d times on an ordinary backlog", c)
	}
	lease, err := client.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := lease.Annotations["kgc.dev/deletions-held"]; v != "" {
		t.Errorf("a trip recorded on the Lease: %s", v)
	}
}
