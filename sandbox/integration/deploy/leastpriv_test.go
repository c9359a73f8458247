package deploy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/kgc-dev/kgc/internal/metrics"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// grant names one grant of deploy/'s roles: a verb, or an API group, of one
// rule of kgc's ClusterRole or of its leader-election Role.
type grant struct {
	role  string // "ClusterRole" or "Role"
	rule  int
	verb  string // the verb removed, or
	group string // the API group removed
}

func (g grant) String() string {
	if g.verb != "" {
		return fmt.Sprintf("%s rule %d verb %s", g.role, g.rule, g.verb)
	}
	return fmt.Sprintf("%s rule %d group %q", g.role, g.rule, g.group)
}

// without returns rules with g's verb or group removed from its rule (the
// rule removed when nothing is left of it).
func (g grant) without(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	for i, r := range rules {
		r = *r.DeepCopy()
		if i == g.rule {
			if g.verb != "" {
				r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == g.verb })
			} else {
				r.APIGroups = slices.DeleteFunc(r.APIGroups, func(v string) bool { return v == g.group })
			}
			if len(r.Verbs) == 0 || len(r.APIGroups) == 0 {
				continue // the API server refuses an empty rule: the rule goes
			}
		}
		out = append(out, r)
	}
	return out
}

// need is what a grant is for: probe runs kgc (or its leader election) as
// the identity without it and returns what broke ("" when nothing did);
// forbidden is the request ("verb code", as kgc_api_requests_total counts)
// that must have been refused for the breakage to be the grant's.
type need struct {
	lost      *authorizationv1.ResourceAttributes // what the identity loses
	probe     func(t *testing.T, cfg *rest.Config) string
	forbidden string
}

// grantNeeds covers every verb and API group of deploy/'s two roles:
// TestRBACEachRuleIsNeeded fails on a grant missing here.
var grantNeeds = map[grant]need{
	{role: "ClusterRole", rule: 0, verb: "get"}: {
		lost: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "default"},
		// Not a cascade: the owner's deletion observed is proof enough
		// that it is gone. An owner kgc never observed must be read.
		probe: probeDanglingOwner, forbidden: "get 403",
	},
	{role: "ClusterRole", rule: 0, verb: "list"}: {
		lost: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "default"},
		// Not a cascade: kgc's monitors list by a streaming WATCH
		// (sendInitialEvents) where the API server serves it (1.34 on),
		// as the sandbox's does; they LIST where it does not, and after
		// a watch reconnects. --namespace-lifecycle lists a deleted
		// namespace's objects to delete them.
		probe: probeNamespaceLifecycle, forbidden: "list 403",
	},
	{role: "ClusterRole", rule: 0, verb: "watch"}: {
		lost:  &authorizationv1.ResourceAttributes{Verb: "watch", Resource: "configmaps", Namespace: "default"},
		probe: probeCascade(metav1.DeletePropagationBackground), forbidden: "watch 403",
	},
	{role: "ClusterRole", rule: 0, verb: "patch"}: {
		lost:  &authorizationv1.ResourceAttributes{Verb: "patch", Resource: "configmaps", Namespace: "default"},
		probe: probeCascade(metav1.DeletePropagationOrphan), forbidden: "patch 403",
	},
	{role: "ClusterRole", rule: 0, verb: "update"}: {
		lost: &authorizationv1.ResourceAttributes{Verb: "update", Resource: "namespaces", Subresource: "finalize", Name: "any"},
		// Not a cascade: kgc writes objects with PATCH. Its PUTs are on
		// its Leases (leader election, the breaker, the orphan journal) and, with
		// --namespace-lifecycle, on namespaces/status and /finalize, which
		// deploy/ alone grants through this wildcard (deploy/optional
		// grants them again, by name).
		probe: probeNamespaceLifecycle, forbidden: "update 403",
	},
	{role: "ClusterRole", rule: 0, verb: "delete"}: {
		lost:  &authorizationv1.ResourceAttributes{Verb: "delete", Resource: "configmaps", Namespace: "default"},
		probe: probeCascade(metav1.DeletePropagationBackground), forbidden: "delete 403",
	},
	{role: "ClusterRole", rule: 1, verb: "create"}: {
		lost:  &authorizationv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: "default"},
		probe: probeEvent, forbidden: "create 403",
	},
	{role: "Role", rule: 0, verb: "create"}: {
		lost:  &authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: kgcNamespace},
		probe: probeLeaderElection, forbidden: "create 403",
	},
}

// TestRBACEachRuleIsNeeded removes, one at a time, each verb of each rule
// of kgc's ClusterRole and leader-election Role (and each API group of a
// rule naming several), binds what is left to a fresh service account, and
// shows something kgc needs break as that account: a cascade left undone,
// kgc not syncing, a warning event not recorded, the Lease not acquired or
// renewed — and the request kgc was refused. A grant kgc works without
// fails the test: it should not be in deploy/.
func TestRBACEachRuleIsNeeded(t *testing.T) {
	in := applyRBAC(t)
	var grants []grant
	for role, rules := range map[string][]rbacv1.PolicyRule{"ClusterRole": in.clusterRole.Rules, "Role": in.role.Rules} {
		for i, r := range rules {
			for _, v := range r.Verbs {
				grants = append(grants, grant{role: role, rule: i, verb: v})
			}
			if len(r.APIGroups) > 1 {
				for _, g := range r.APIGroups {
					grants = append(grants, grant{role: role, rule: i, group: g})
				}
			}
		}
	}
	slices.SortFunc(grants, func(a, b grant) int { return strings.Compare(a.String(), b.String()) })
	for i, g := range grants {
		t.Run(g.String(), func(t *testing.T) {
			n, ok := grantNeeds[g]
			if !ok {
				t.Fatalf("%s has no entry in grantNeeds: say what breaks without it", g)
			}
			clusterRules, roleRules := in.clusterRole.Rules, in.role.Rules
			if g.role == "ClusterRole" {
				clusterRules = g.without(clusterRules)
			} else {
				roleRules = g.without(roleRules)
			}
			cfg := grantAs(t, fmt.Sprintf("kgc-test-without-%d", i), clusterRules, roleRules)
			// The bindings are in the authorizer's cache once the
			// remaining grants are; the lost one must be refused.
			waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "default"}, g.verb != "list")
			waitForAccess(t, cfg, authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: kgcNamespace},
				g != grant{role: "Role", rule: 0, verb: "create"})
			if n.lost != nil {
				waitForAccess(t, cfg, *n.lost, false)
			}
			calls := recordRequests(cfg)
			began := time.Now()
			broke := n.probe(t, cfg)
			got := calls()
			t.Logf("%s (%s): requests %v", g, time.Since(began).Round(time.Millisecond), got)
			switch {
			case broke == "":
				t.Fatalf("kgc worked without %s: the grant looks unneeded", g)
			case got[n.forbidden] == 0:
				t.Fatalf("without %s: %s, but no %s request: the breakage is not the grant's", g, broke, n.forbidden)
			}
			t.Logf("without %s: %s", g, broke)
		})
	}
}

// recordRequests makes cfg count its requests as "verb code" (what
// kgc_api_requests_total counts, also for the leader-election client, which
// has no metrics), and returns a snapshot function.
func recordRequests(cfg *rest.Config) func() map[string]float64 {
	var mu sync.Mutex
	counts := map[string]float64{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			res, err := rt.RoundTrip(req)
			if err == nil {
				mu.Lock()
				counts[fmt.Sprintf("%s %d", metrics.Verb(req), res.StatusCode)]++
				mu.Unlock()
			}
			return res, err
		})
	})
	return func() map[string]float64 {
		mu.Lock()
		defer mu.Unlock()
		out := make(map[string]float64, len(counts))
		for k, v := range counts {
			out[k] = v
		}
		return out
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// startWithin starts kgc as cfg's identity and waits at most negativeWindow
// for its monitors to sync; nil (and what it saw) when they did not. The
// collector runs until t ends.
func startWithin(t *testing.T, cfg *rest.Config, opts kgc.Options) (*kgc.Collector, string) {
	t.Helper()
	opts.Workers, opts.Logger = 2, testenv.Logger("kgc")
	c, err := kgc.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	syncCtx, stop := context.WithTimeout(ctx, negativeWindow)
	defer stop()
	if err := c.WaitForSync(syncCtx); err != nil {
		return nil, fmt.Sprintf("kgc did not sync within %s: %v", negativeWindow, err)
	}
	return c, ""
}

// within polls cond for at most negativeWindow; whether it held.
func within(t *testing.T, cond func() bool) bool {
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, negativeWindow, true, func(context.Context) (bool, error) { return cond(), nil })
	return err == nil
}

// probeCascade runs one cascade of policy (a Background one, or an Orphan
// one) with kgc as cfg's identity, allowing negativeWindow — far more than
// kgc with its real roles needs (TestRBACSufficient).
func probeCascade(policy metav1.DeletionPropagation) func(t *testing.T, cfg *rest.Config) string {
	return func(t *testing.T, cfg *rest.Config) string {
		ns := createNamespace(t)
		owner := createConfigMap(t, ns, "owner")
		deps := createDependents(t, ns, owner, 2, policy == metav1.DeletePropagationOrphan)
		if _, broke := startWithin(t, cfg, kgc.Options{}); broke != "" {
			return broke
		}
		deleteConfigMap(t, owner, policy)
		if policy == metav1.DeletePropagationOrphan {
			if !within(t, func() bool {
				if get(t, owner) != nil {
					return false
				}
				for _, d := range deps {
					if cm := get(t, d); cm == nil || len(cm.OwnerReferences) > 0 {
						return false
					}
				}
				return true
			}) {
				return fmt.Sprintf("the Orphan cascade of %s was not done within %s (owner left: %v)", owner, negativeWindow, get(t, owner) != nil)
			}
			return ""
		}
		if !within(t, func() bool { return !slices.ContainsFunc(deps, func(d ref) bool { return get(t, d) != nil }) }) {
			return fmt.Sprintf("the Background cascade of %s was not done within %s", owner, negativeWindow)
		}
		return ""
	}
}

// probeDanglingOwner gives kgc a dependent whose owner never existed: kgc,
// which never observed the owner, reads it (a quorum GET, 404) before it
// deletes the dependent.
func probeDanglingOwner(t *testing.T, cfg *rest.Config) string {
	ns := createNamespace(t)
	dep := createConfigMap(t, ns, "dependent", ownerRef(ref{namespace: ns, name: "never", uid: testenv.RandomUID()}, false))
	if _, broke := startWithin(t, cfg, kgc.Options{}); broke != "" {
		return broke
	}
	if !within(t, func() bool { return get(t, dep) == nil }) {
		return fmt.Sprintf("%s, whose owner never existed, was not deleted within %s", dep, negativeWindow)
	}
	return ""
}

// probeNamespaceLifecycle runs kgc --namespace-lifecycle (deploy/'s roles
// alone: one DELETE per object, each resource listed) on a deleted
// namespace.
func probeNamespaceLifecycle(t *testing.T, cfg *rest.Config) string {
	if _, broke := startWithin(t, cfg, lifecycleOptions); broke != "" {
		return broke
	}
	ns := doomedNamespace(t)
	if !within(t, func() bool {
		_, err := kubeClient.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		return fmt.Sprintf("the deleted namespace %s was not emptied and gone within %s", ns, negativeWindow)
	}
	return ""
}

// probeEvent gives kgc a dependent whose owner reference names an owner in
// another namespace: kgc deletes it and records an OwnerRefInvalidNamespace
// warning on it.
func probeEvent(t *testing.T, cfg *rest.Config) string {
	gc, broke := startWithin(t, cfg, kgc.Options{})
	if broke != "" {
		return broke
	}
	nsA, nsB := createNamespace(t), createNamespace(t)
	owner := createConfigMap(t, nsA, "owner")
	waitInGraph(t, gc, owner)
	dep := createConfigMap(t, nsB, "dependent", ownerRef(owner, false))
	waitGone(t, dep)
	var seen []string
	if !within(t, func() bool {
		found, s, err := hasEvent(t.Context(), dep, "Warning", "OwnerRefInvalidNamespace")
		seen = s
		return err == nil && found
	}) {
		return fmt.Sprintf("no OwnerRefInvalidNamespace event on %s within %s (events on it: %q)", dep, negativeWindow, seen)
	}
	return ""
}

// probeLeaderElection acquires, renews and releases a Lease of its own in
// kgc's namespace, as kgc --leader-elect does (and the breaker, on the same
// Lease), allowing negativeWindow.
func probeLeaderElection(t *testing.T, cfg *rest.Config) string {
	ctx, cancel := context.WithTimeout(t.Context(), negativeWindow)
	defer cancel()
	lease := testenv.NamespaceName(t.Name())
	if err := electLeader(ctx, cfg, lease); err != nil {
		return err.Error()
	}
	return ""
}
