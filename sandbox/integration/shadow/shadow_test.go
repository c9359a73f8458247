package shadow

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// seedEnv replays a run: its seed is logged.
	seedEnv = "KGC_SHADOW_SEED"
	// roundsEnv sets how many randomized rounds the test runs (default 2).
	roundsEnv = "KGC_SHADOW_ROUNDS"

	waitTimeout  = 3 * time.Minute
	pollInterval = 250 * time.Millisecond

	shadowPath  = "/debug/controllers/garbage-collector-controller/shadow"
	historyPath = "/debug/controllers/garbage-collector-controller/history"
	graphPath   = "/debug/controllers/garbage-collector-controller/graph"
)

var policies = []metav1.DeletionPropagation{
	metav1.DeletePropagationBackground,
	metav1.DeletePropagationForeground,
	metav1.DeletePropagationOrphan,
}

// TestShadowAgreesWithUpstreamCollector runs randomized workloads of
// ConfigMaps — owners deleted with each policy, dependents in chains,
// dependents of two deleted owners, dependents an owner that stays
// keeps, dependents whose owner never existed — and a Deployment per
// policy, while kube-controller-manager's collector collects and kgc
// watches in shadow mode. Every write kgc decides must show in the
// cluster (agree), and every change upstream's collector makes must be
// one kgc decided — with one exception per round, on purpose: a
// ConfigMap that references itself with blockOwnerDeletion, deleted in
// the foreground, which upstream never finishes and kgc does (documented
// difference 3 of docs/semantics.md): exactly one kgc_only per round,
// kgc's removal of its foregroundDeletion finalizer. kgc must send no
// write.
func TestShadowAgreesWithUpstreamCollector(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(seedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", seedEnv, s, err)
		}
	}
	t.Logf("seed %d (replay with %s=%d)", seed, seedEnv, seed)
	rounds := 2
	if s := os.Getenv(roundsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", roundsEnv, s)
		}
		rounds = n
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	totalMin := 0
	var selfs []types.UID
	for r := range rounds {
		w := newWorkload(t, rng, r)
		began := time.Now()
		w.create()
		w.waitObserved()
		w.deleteRoots()
		w.waitCascades()
		t.Logf("round %d: %d ConfigMaps, %d Deployments; upstream finished the cascades in %s", r, len(w.cms), len(w.deployments), time.Since(began).Round(time.Millisecond))
		totalMin += w.minAgreements()
		selfs = append(selfs, w.self.uid)
	}
	p := waitSettled(t)
	t.Logf("agreement: agree=%d kgc_only=%d other_only=%d (kgc decided at least %d writes on the ConfigMaps alone); kgc_shadow_decisions_total %v",
		p.Counts.Agree, p.Counts.KGCOnly, p.Counts.OtherOnly, totalMin, counterValues(t, "kgc_shadow_decisions_total"))
	for _, raw := range p.Disagreements {
		var d struct {
			Outcome, Operation, Finalizer string
			Object                        struct{ UID types.UID }
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(raw, "  ", "  ")
		if d.Outcome == "kgc_only" && d.Operation == "remove_finalizer" && d.Finalizer == metav1.FinalizerDeleteDependents && slices.Contains(selfs, d.Object.UID) {
			t.Logf("disagreement explained by docs/semantics.md, difference 3 (a reference to oneself never blocks):\n  %s", b)
			continue
		}
		t.Errorf("unexplained disagreement:\n  %s", b)
	}
	if p.Counts.KGCOnly != uint64(len(selfs)) || p.Counts.OtherOnly > 0 {
		t.Errorf("kgc_only=%d other_only=%d, want kgc_only=%d (the self-referencing ConfigMaps) and other_only=0", p.Counts.KGCOnly, p.Counts.OtherOnly, len(selfs))
	}
	if int(p.Counts.Agree) < totalMin {
		t.Errorf("agree=%d, want at least %d (one per write upstream's collector had to make on the ConfigMaps)", p.Counts.Agree, totalMin)
	}
	if w := requests.writes(); len(w) > 0 {
		t.Errorf("kgc in shadow mode sent writes: %v", w)
	}
	if ops := counterValues(t, "kgc_operations_total"); sum(ops) != 0 {
		t.Errorf("kgc_operations_total %v in shadow mode, want 0", ops)
	}
	var h struct {
		Records []struct {
			Operation, Outcome string
		} `json:"records"`
	}
	getJSON(t, historyPath, &h)
	for _, r := range h.Records {
		if r.Outcome != "shadow" {
			t.Errorf("history record %s with outcome %q, want shadow", r.Operation, r.Outcome)
		}
	}
	if len(h.Records) == 0 {
		t.Error("no shadow decision in the write history")
	}
}

// cm is one ConfigMap of a workload.
type cm struct {
	name string
	uid  types.UID
	// owners are workload ConfigMaps it references (created before it).
	owners []*cm
	block  []bool
	// anchored: it also references the anchor, which stays.
	anchored bool
	// ghost: it references an owner that never existed.
	ghost bool
	// root: deleted by the test with policy.
	root   bool
	policy metav1.DeletionPropagation
	// self: it references itself, blocking, and is deleted Foreground.
	self bool
}

type workload struct {
	t           *testing.T
	ctx         context.Context
	ns          string
	rng         *rand.Rand
	anchor      *cm
	self        *cm
	cms         []*cm
	deployments map[metav1.DeletionPropagation]types.UID
}

// newWorkload plans a round: per policy 2–4 roots, each with 1–5
// dependents, some with dependents of their own (depth up to 3), some
// also kept by the anchor, some shared with another root of the same
// policy; plus 0–2 ConfigMaps whose owner never existed.
func newWorkload(t *testing.T, rng *rand.Rand, round int) *workload {
	t.Helper()
	ctx := t.Context()
	w := &workload{t: t, ctx: ctx, ns: testenv.NamespaceName(fmt.Sprintf("%s-%d", t.Name(), round)), rng: rng,
		deployments: map[metav1.DeletionPropagation]types.UID{}}
	if _, err := kubeClient.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = kubeClient.CoreV1().Namespaces().Delete(cctx, w.ns, metav1.DeleteOptions{})
	})
	w.anchor = w.add(&cm{name: "anchor"})
	for _, p := range policies {
		var roots []*cm
		for i := range 2 + rng.IntN(3) {
			root := w.add(&cm{name: fmt.Sprintf("%s-root-%d", strings.ToLower(string(p)), i), root: true, policy: p})
			roots = append(roots, root)
			for j := range 1 + rng.IntN(5) {
				d := &cm{name: fmt.Sprintf("%s-d%d", root.name, j), owners: []*cm{root}, block: []bool{rng.IntN(2) == 0}}
				switch x := rng.IntN(100); {
				case x < 15:
					d.anchored = true
				case x < 25 && len(roots) > 1:
					other := roots[rng.IntN(len(roots)-1)]
					d.owners = append(d.owners, other)
					d.block = append(d.block, rng.IntN(2) == 0)
				}
				w.add(d)
				if !d.anchored && rng.IntN(100) < 35 {
					w.children(d, 1)
				}
			}
		}
	}
	for i := range rng.IntN(3) {
		w.add(&cm{name: fmt.Sprintf("ghost-%d", i), ghost: true})
	}
	w.self = &cm{name: "self", self: true}
	t.Cleanup(func() {
		// Nothing removes its finalizer: let the namespace go.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = kubeClient.CoreV1().ConfigMaps(w.ns).Patch(cctx, "self", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	return w
}

// children gives parent 1–3 dependents, and some of those their own.
func (w *workload) children(parent *cm, depth int) {
	for k := range 1 + w.rng.IntN(3) {
		c := w.add(&cm{name: fmt.Sprintf("%s-c%d", parent.name, k), owners: []*cm{parent}, block: []bool{w.rng.IntN(2) == 0}})
		if depth < 2 && w.rng.IntN(100) < 30 {
			w.children(c, depth+1)
		}
	}
}

func (w *workload) add(c *cm) *cm {
	w.cms = append(w.cms, c)
	return c
}

// create creates the ConfigMaps, owners first, and a Deployment of two
// replicas per policy.
func (w *workload) create() {
	for _, c := range w.cms {
		m := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.name}}
		for i, o := range c.owners {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: o.name, UID: o.uid, BlockOwnerDeletion: ptr.To(c.block[i])})
		}
		if c.anchored {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: w.anchor.name, UID: w.anchor.uid})
		}
		if c.ghost {
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "never-existed", UID: testenv.RandomUID()})
		}
		got, err := kubeClient.CoreV1().ConfigMaps(w.ns).Create(w.ctx, m, metav1.CreateOptions{})
		if err != nil {
			w.t.Fatalf("create %s: %v", c.name, err)
		}
		c.uid = got.UID
	}
	// The self-referencing ConfigMap: created, then made its own owner.
	got, err := kubeClient.CoreV1().ConfigMaps(w.ns).Create(w.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.self.name}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	w.self.uid = got.UID
	got.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: w.self.name, UID: got.UID, BlockOwnerDeletion: ptr.To(true)}}
	if _, err := kubeClient.CoreV1().ConfigMaps(w.ns).Update(w.ctx, got, metav1.UpdateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	for _, p := range policies {
		name := "web-" + strings.ToLower(string(p))
		labels := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](2),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/c"}}},
				},
			},
		}
		got, err := kubeClient.AppsV1().Deployments(w.ns).Create(w.ctx, d, metav1.CreateOptions{})
		if err != nil {
			w.t.Fatal(err)
		}
		w.deployments[p] = got.UID
	}
}

// graphNode is what the tests read of kgc's graph.
type graphNode struct {
	UID             types.UID               `json:"uid"`
	Kind            string                  `json:"kind"`
	State           string                  `json:"state"`
	OwnerReferences []metav1.OwnerReference `json:"ownerReferences"`
}

// kgcGraph returns kgc's graph of the workload's namespace.
func (w *workload) kgcGraph() map[types.UID]graphNode {
	var g struct {
		Nodes []graphNode `json:"nodes"`
	}
	getJSON(w.t, graphPath+"?format=json&namespace="+w.ns, &g)
	out := map[types.UID]graphNode{}
	for _, n := range g.Nodes {
		out[n.UID] = n
	}
	return out
}

// waitObserved waits until kgc's graph holds every ConfigMap, each
// Deployment's ReplicaSet and two Pods per Deployment: a decision about
// an object kgc never observed cannot be compared.
func (w *workload) waitObserved() {
	err := wait.PollUntilContextTimeout(w.ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		g := w.kgcGraph()
		for _, c := range append([]*cm{w.self}, w.cms...) {
			if c.ghost {
				continue // upstream's collector may have deleted it already
			}
			if n, ok := g[c.uid]; !ok || n.State != "live" || (c.self && len(n.OwnerReferences) == 0) {
				return false, nil
			}
		}
		rs, pods := 0, 0
		for _, n := range g {
			switch n.Kind {
			case "ReplicaSet":
				rs++
			case "Pod":
				pods++
			}
		}
		return rs == len(policies) && pods == 2*len(policies), nil
	})
	if err != nil {
		w.t.Fatalf("kgc did not observe the workload: %v", err)
	}
}

// deleteRoots deletes the roots and the Deployments, each with its
// policy, in a random order.
func (w *workload) deleteRoots() {
	type del struct {
		name   string
		cm     bool
		policy metav1.DeletionPropagation
	}
	var dels []del
	for _, c := range w.cms {
		if c.root {
			dels = append(dels, del{c.name, true, c.policy})
		}
	}
	for p := range w.deployments {
		dels = append(dels, del{"web-" + strings.ToLower(string(p)), false, p})
	}
	dels = append(dels, del{w.self.name, true, metav1.DeletePropagationForeground})
	w.rng.Shuffle(len(dels), func(i, j int) { dels[i], dels[j] = dels[j], dels[i] })
	for _, d := range dels {
		opts := metav1.DeleteOptions{PropagationPolicy: ptr.To(d.policy)}
		var err error
		if d.cm {
			err = kubeClient.CoreV1().ConfigMaps(w.ns).Delete(w.ctx, d.name, opts)
		} else {
			err = kubeClient.AppsV1().Deployments(w.ns).Delete(w.ctx, d.name, opts)
		}
		if err != nil {
			w.t.Fatalf("delete %s: %v", d.name, err)
		}
	}
}

// fate is what upstream's collector must do to one ConfigMap: delete it
// (gone), or leave it with the references refs; went reports whether one
// of its owners was deleted in the Background or the Foreground (and the
// reference to it removed, when the object stays).
func (w *workload) fate(c *cm) (gone bool, refs []types.UID, went bool) {
	switch {
	case c == w.anchor:
		return false, nil, false
	case c.root, c.ghost:
		return true, nil, false
	}
	var kept []types.UID
	for _, o := range c.owners {
		og, _, _ := w.fate(o)
		switch {
		case o.root && o.policy == metav1.DeletePropagationOrphan:
			// orphaned: the reference goes, it stays
		case og:
			went = true
		default:
			kept = append(kept, o.uid)
		}
	}
	if c.anchored {
		kept = append(kept, w.anchor.uid)
	}
	if len(kept) > 0 {
		return false, kept, went
	}
	return went, nil, went
}

// waitCascades waits until the cluster shows every cascade finished as
// each policy asks.
func (w *workload) waitCascades() {
	var last string
	err := wait.PollUntilContextTimeout(w.ctx, pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		for _, c := range w.cms {
			gone, refs, _ := w.fate(c)
			got, err := kubeClient.CoreV1().ConfigMaps(w.ns).Get(ctx, c.name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				if !gone {
					return false, fmt.Errorf("%s was deleted; it must stay", c.name)
				}
				continue
			case err != nil:
				return false, err
			case gone:
				last = c.name + " still exists"
				return false, nil
			}
			var have []types.UID
			for _, r := range got.OwnerReferences {
				have = append(have, r.UID)
			}
			if !slices.Equal(have, refs) {
				last = fmt.Sprintf("%s references %v, want %v", c.name, have, refs)
				return false, nil
			}
		}
		for p, uid := range w.deployments {
			rss, err := kubeClient.AppsV1().ReplicaSets(w.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web-" + strings.ToLower(string(p))})
			if err != nil {
				return false, err
			}
			if _, err := kubeClient.AppsV1().Deployments(w.ns).Get(ctx, "web-"+strings.ToLower(string(p)), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				last = "Deployment of " + string(p) + " still exists"
				return false, nil
			}
			want := 0
			if p == metav1.DeletePropagationOrphan {
				want = 1
			}
			if len(rss.Items) != want {
				last = fmt.Sprintf("%d ReplicaSets of the %s Deployment, want %d", len(rss.Items), p, want)
				return false, nil
			}
			for _, rs := range rss.Items {
				for _, r := range rs.OwnerReferences {
					if r.UID == uid {
						last = "the orphaned ReplicaSet still references its Deployment"
						return false, nil
					}
				}
			}
		}
		return true, nil
	})
	if err != nil {
		w.t.Fatalf("upstream's collector did not finish the cascades: %v (last: %s)", err, last)
	}
}

// minAgreements is the number of writes upstream's collector had to make
// on the workload's ConfigMaps, each of which kgc must have decided too:
// a DELETE per collected ConfigMap, a reference removal per ConfigMap an
// owner that stays keeps while another was deleted Background or
// Foreground, an orphaning per reference to an orphaned root, and the
// finalizer of every ConfigMap deleted in the foreground (roots deleted
// Foreground, and collected dependents with dependents of their own that
// a Foreground-deleting owner waits for through a blocking reference) and
// of every root deleted Orphan. A lower bound: a dependent with
// dependents whose Foreground owner does not wait for it may be deleted
// in the foreground or, once that owner is gone, in the background.
func (w *workload) minAgreements() int {
	hasDependents := map[*cm]bool{}
	for _, c := range w.cms {
		for _, o := range c.owners {
			hasDependents[o] = true
		}
	}
	var foreground func(c *cm) bool
	foreground = func(c *cm) bool {
		if c.root {
			return c.policy == metav1.DeletePropagationForeground
		}
		if gone, _, _ := w.fate(c); !gone || !hasDependents[c] {
			return false
		}
		for i, o := range c.owners {
			if c.block[i] && foreground(o) {
				return true
			}
		}
		return false
	}
	n := 0
	for _, c := range w.cms {
		if c == w.anchor {
			continue
		}
		gone, _, went := w.fate(c)
		switch {
		case c.root:
			if c.policy != metav1.DeletePropagationBackground {
				n++ // its finalizer
			}
		case gone:
			n++
			if foreground(c) {
				n++
			}
		default:
			for _, o := range c.owners {
				if o.root && o.policy == metav1.DeletePropagationOrphan {
					n++
				}
			}
			if went {
				n++
			}
		}
	}
	return n
}

// shadowPage is what kgc serves at shadowPath.
type shadowPage struct {
	Window string `json:"window"`
	Counts struct {
		Agree     uint64 `json:"agree"`
		KGCOnly   uint64 `json:"kgcOnly"`
		OtherOnly uint64 `json:"otherOnly"`
	} `json:"counts"`
	Pending       int               `json:"pending"`
	Unmatched     int               `json:"unmatched"`
	Disagreements []json.RawMessage `json:"disagreements"`
}

// waitSettled waits until no decision waits for its effect and no change
// for a decision (those that wait longer than the window are counted as
// disagreements), and returns the comparison.
func waitSettled(t *testing.T) shadowPage {
	t.Helper()
	var p shadowPage
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, window+time.Minute, true, func(context.Context) (bool, error) {
		p = shadowPage{}
		getJSON(t, shadowPath, &p)
		return p.Pending == 0 && p.Unmatched == 0, nil
	})
	if err != nil {
		t.Fatalf("the comparison did not settle: %d decisions pending, %d changes unmatched", p.Pending, p.Unmatched)
	}
	return p
}

// getJSON reads one of kgc's endpoints (in-process).
func getJSON(t *testing.T, path string, v any) {
	t.Helper()
	rec := httptest.NewRecorder()
	collector.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body.String())
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// counterValues returns a counter's values by their labels.
func counterValues(t *testing.T, name string) map[string]float64 {
	t.Helper()
	mfs, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetValue())
			}
			if v := m.GetCounter().GetValue(); v > 0 {
				out[strings.Join(ls, ",")] = v
			}
		}
	}
	return out
}

func sum(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}
