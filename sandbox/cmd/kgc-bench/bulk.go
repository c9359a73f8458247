package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The bulk deletions: people (or the apiserver, or the namespace
// controller) delete many owners at once, and the collector deletes what
// they owned. Each is legitimate and must be collected in full, and at
// least as fast as kube-controller-manager's collector does at the same
// budget; with `kgc run`'s defaults (--kgc-options=run) the cells show
// whether kgc's deletion breaker lets it.
//
//	crd-delete  a CRD (namespaced kind Widget) with --crd-instances instances, each owning a ConfigMap
//	            (controller: true, blockOwnerDeletion: true, as controller-runtime's
//	            SetControllerReference writes them); the CRD deleted: the apiserver deletes its
//	            instances, the collector the ConfigMaps; until the CRD and every ConfigMap are gone
//	            ("owner gone": the CRD). The objects exist before the collector starts: a CRD made
//	            while it runs is found by its next discovery (up to 30 s later for both), which
//	            would measure the discovery period rather than the deletion.
//	collection  --collection-owners ConfigMaps labelled app=x, each owning a Secret; one DeleteCollection
//	            with the label selector app=x (kubectl delete configmaps -l app=x); until every Secret is gone
//	namespace   on a real cluster: a namespace with --namespace-owners ConfigMaps a-owner-N, each owning
//	            a ConfigMap b-dep-N, deleted; kube-controller-manager's namespace controller empties it
//	            beside the collector under test (as where kgc replaces only the garbage collector); until
//	            the namespace is gone. The namespace controller deletes each resource's objects with one
//	            DeleteCollection, which kube-apiserver (one --delete-collection-workers) works through in
//	            name order: every owner first, then the dependents the collector has not deleted by then.
//	            Dependents of another resource would be deleted before or after their owners as Go's map
//	            order has it (the controller's order of resources, Pods aside).
//	backlog     --backlog ConfigMap owners, each with a dependent ConfigMap, deleted Background while no
//	            collector runs (a first start, a restart, a change of leader); from the collector's start
//	            until every dependent is gone
//
// objects is the dependents in each. A kgc cell whose breaker tripped (its
// log says so) and which has collected nothing for --stall ends there:
// the result is incomplete, with what it left.
const (
	scCRDDelete  = "crd-delete"
	scCollection = "collection"
	scNamespace  = "namespace"
	scBacklog    = "backlog"
)

// bulkScenarios are the bulk deletions (the group "bulk" of --scenarios).
var bulkScenarios = []string{scCRDDelete, scCollection, scNamespace, scBacklog}

func isBulkScenario(sc string) bool { return slices.Contains(bulkScenarios, sc) }

var (
	secretsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	crdsGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// errIncomplete: the collector did not finish the phase. A finished bulk
// deletion in which kgc's breaker tripped is one too (tripError): the
// trip, recorded on its Lease, would hold later deletions.
var errIncomplete = errors.New("the collector did not finish")

// tripError returns an error wrapping errIncomplete for a bulk deletion
// in which kgc's deletion breaker tripped, nil otherwise: these
// deletions are legitimate, and none may trip it.
func tripError(r result) error {
	if !isBulkScenario(r.Scenario) || len(r.Trips) == 0 {
		return nil
	}
	return fmt.Errorf("%w without a trip: the deletion breaker tripped (%s)", errIncomplete, strings.Join(r.Trips, "; "))
}

// minPhaseRate bounds how slowly a phase that waitCollected waits for may
// collect before it times out: its timeout is the larger of --timeout and
// what is left at its start at this rate. kube-controller-manager's
// collector takes about 3 calls per object, at its budget of 40 QPS
// about 13 objects/s: 10,000 objects take it about 12 minutes.
const minPhaseRate = 5 // objects/s

// waitCollected waits, as waitUntil does, until done holds, from start.
// It gives up early on a collector that has stopped: its log says its
// deletion breaker tripped and left has not changed for --stall, or left
// has not changed for --idle whatever the collector (upstream's collector
// retries forever, with back-off, dependents whose owner's kind it can no
// longer map to a resource). Giving up, or the timeout (minPhaseRate),
// makes res incomplete (res.Left is left() then) and returns an error
// wrapping errIncomplete; res.Elapsed is set either way.
func waitCollected(ctx context.Context, e *env, w *watcher, c *child, start time.Time, what string, res *result, done func() bool, left func() int) error {
	stall, idle := e.opts.stall, e.opts.idle
	timeout := max(e.opts.timeout, time.Duration(left())*time.Second/minPhaseRate)
	lastLeft, lastChange, lastCheck := -1, time.Now(), time.Time{}
	stalled, idled := false, false
	err := w.waitUntil(ctx, timeout, what, func() bool {
		if done() {
			return true
		}
		now := time.Now()
		if now.Sub(lastCheck) < time.Second {
			return false
		}
		lastCheck = now
		if n := left(); n != lastLeft {
			lastLeft, lastChange = n, now
			return false
		}
		if idle > 0 && now.Sub(lastChange) >= idle {
			idled = true
			return true
		}
		if stall > 0 && now.Sub(lastChange) >= stall && len(c.breakerTrips()) > 0 {
			stalled = true
			return true
		}
		return false
	})
	res.Elapsed = time.Since(start)
	if err != nil && ctx.Err() != nil {
		return err
	}
	if err == nil && !stalled && !idled {
		return nil
	}
	res.Incomplete, res.Left = true, left()
	switch {
	case stalled:
		return fmt.Errorf("%w: %d left, none collected for %s after the deletion breaker tripped", errIncomplete, res.Left, stall)
	case idled:
		return fmt.Errorf("%w: %d left, none collected for %s", errIncomplete, res.Left, idle)
	}
	return fmt.Errorf("%w: %d left: %w", errIncomplete, res.Left, err)
}

// finishCell records the measured phase's calls, the breaker's trips and
// the child's usage in res, and stops the child.
func finishCell(e *env, c *child, before counts, start time.Time, res *result) error {
	if res.FirstCall == 0 && res.LastCall == 0 && !start.IsZero() {
		res.FirstCall, res.LastCall = e.proxy.firstLast(start)
		res.InFlight = e.proxy.meanInFlight(start, start.Add(res.Elapsed))
	}
	res.Calls = e.proxy.snapshot().sub(before)
	res.Trips = c.breakerTrips()
	var err error
	res.Usage, err = c.stop()
	return err
}

// newObjectWatcher mirrors one cluster-scoped object of gvr by name (a
// CRD, a Namespace): its objects() are empty once it is gone.
func newObjectWatcher(e *env, gvr schema.GroupVersionResource, name string) (*watcher, error) {
	return newWatcherWith(e.md, "", func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }, gvr)
}

// runCRDDelete: see the bulk deletions. The watcher w mirrors the
// namespace's ConfigMaps.
func runCRDDelete(ctx context.Context, e *env, s cellSpec, ns string, w *watcher, res *result) error {
	o := e.opts
	n := o.crdInstances
	dyn, err := dynamic.NewForConfig(e.cfg)
	if err != nil {
		return err
	}
	group := ns + ".kgc-bench.dev"
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	crdName := gvr.Resource + "." + group
	if err := createCRD(ctx, dyn, gvr, "Widget", o.timeout); err != nil {
		return err
	}
	// Whatever happens, the next cell's collectors must not find this
	// CRD's instances.
	defer func() {
		_ = dyn.Resource(crdsGVR).Delete(context.Background(), crdName, metav1.DeleteOptions{})
	}()
	var (
		mu   sync.Mutex
		uids = make(map[string]types.UID, n)
	)
	if err := inParallel(n, func(i int) error {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(gvr.GroupVersion().String())
		u.SetKind("Widget")
		u.SetName(fmt.Sprintf("w-%05d", i))
		var got *unstructured.Unstructured
		// Right after the CRD is established its endpoint may still
		// answer 404 for a moment.
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("create Widget %s/%s: %w", ns, u.GetName(), err)
		}
		mu.Lock()
		uids[got.GetName()] = got.GetUID()
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	specs := make([]cmSpec, n)
	for i := range n {
		owner := fmt.Sprintf("w-%05d", i)
		specs[i] = cmSpec{name: fmt.Sprintf("dep-%05d", i), owners: []metav1.OwnerReference{{
			APIVersion: gvr.GroupVersion().String(), Kind: "Widget", Name: owner, UID: uids[owner],
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}}
	}
	if _, err := createAll(ctx, e.client, ns, specs); err != nil {
		return err
	}
	if err := w.waitFor(ctx, o.timeout, "the watcher to see every ConfigMap", func(objs []*metav1.PartialObjectMetadata) bool { return countPrefix(objs, "dep-") >= n }); err != nil {
		return err
	}
	cw, err := newObjectWatcher(e, crdsGVR, crdName)
	if err != nil {
		return err
	}
	defer cw.stop()
	res.Objects = n

	c, err := startChild(s.flags(e), e.logDir)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if _, err := c.waitSynced(ctx, o.timeout); err != nil {
		return err
	}
	// Let the collector digest the objects before measuring.
	_ = e.proxy.waitQuiet(time.Second, time.Minute)

	before := e.proxy.snapshot()
	e.proxy.mark()
	start := time.Now()
	if err := dyn.Resource(crdsGVR).Delete(ctx, crdName, metav1.DeleteOptions{}); err != nil {
		return err
	}
	left := func() int { return countPrefix(w.objects(), "dep-") }
	crdGone := func() bool {
		if len(cw.objects()) > 0 {
			return false
		}
		if res.OwnerGone == 0 {
			res.OwnerGone = time.Since(start)
		}
		return true
	}
	werr := waitCollected(ctx, e, w, c, start, "the CRD and its instances' ConfigMaps to be gone", res,
		func() bool { return crdGone() && left() == 0 }, left)
	if werr != nil && !errors.Is(werr, errIncomplete) {
		return werr
	}
	stopped = true
	return errors.Join(werr, finishCell(e, c, before, start, res))
}

// createCRD creates a CRD serving kind as gvr (namespaced, any fields)
// and waits until it is established.
func createCRD(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, kind string, timeout time.Duration) error {
	name := gvr.Resource + "." + gvr.Group
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group": gvr.Group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": gvr.Resource, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{
				"name": gvr.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
			}},
		},
	}}
	if _, err := dyn.Resource(crdsGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create CRD %s: %w", name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(crdsGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", name, err)
	}
	return nil
}

// ownersWithSecrets creates n ConfigMaps owner-NNNNN with labels, and a
// Secret dep-NNNNN owned by each (a plain reference: no controller, no
// blockOwnerDeletion), and waits until w has seen them all.
func ownersWithSecrets(ctx context.Context, e *env, ns string, n int, labels map[string]string, w *watcher) error {
	specs := make([]cmSpec, n)
	for i := range n {
		specs[i] = cmSpec{name: fmt.Sprintf("owner-%05d", i), labels: labels}
	}
	uids, err := createAll(ctx, e.client, ns, specs)
	if err != nil {
		return err
	}
	if err := inParallel(n, func(i int) error {
		owner := fmt.Sprintf("owner-%05d", i)
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("dep-%05d", i), OwnerReferences: []metav1.OwnerReference{ownerRef(owner, uids[owner], false)}}}
		if _, err := e.client.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s/%s: %w", ns, sec.Name, err)
		}
		return nil
	}); err != nil {
		return err
	}
	return w.waitUntil(ctx, e.opts.timeout, "the watcher to see every owner and Secret", func() bool {
		return countPrefix(w.of(configMapsGVR), "owner-") >= n && countPrefix(w.of(secretsGVR), "dep-") >= n
	})
}

// runCollection: see the bulk deletions. The collector runs while the
// objects are made, as in the fan-outs; the watcher w mirrors the
// namespace's ConfigMaps and Secrets.
func runCollection(ctx context.Context, e *env, s cellSpec, ns string, w *watcher, res *result) error {
	o := e.opts
	n := o.collectionOwners
	c, err := startChild(s.flags(e), e.logDir)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if _, err := c.waitSynced(ctx, o.timeout); err != nil {
		return err
	}
	if err := ownersWithSecrets(ctx, e, ns, n, map[string]string{"app": "x"}, w); err != nil {
		return err
	}
	res.Objects = n
	_ = e.proxy.waitQuiet(time.Second, time.Minute)

	before := e.proxy.snapshot()
	e.proxy.mark()
	start := time.Now()
	if err := e.client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=x"}); err != nil {
		return fmt.Errorf("DeleteCollection of the owners: %w", err)
	}
	left := func() int { return countPrefix(w.of(secretsGVR), "dep-") }
	ownersGone := func() bool {
		if countPrefix(w.of(configMapsGVR), "owner-") > 0 {
			return false
		}
		if res.OwnerGone == 0 {
			res.OwnerGone = time.Since(start)
		}
		return true
	}
	werr := waitCollected(ctx, e, w, c, start, "the owners' Secrets to be gone", res, func() bool { return ownersGone() && left() == 0 }, left)
	if werr != nil && !errors.Is(werr, errIncomplete) {
		return werr
	}
	stopped = true
	return errors.Join(werr, finishCell(e, c, before, start, res))
}

// runBacklog: see the bulk deletions; measured as the startup sweep is,
// from the collector's start.
func runBacklog(ctx context.Context, e *env, s cellSpec, ns string, w *watcher, res *result) error {
	o := e.opts
	n := o.backlog
	owners := make([]cmSpec, n)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("owner-%05d", i)
		owners[i] = cmSpec{name: names[i]}
	}
	uids, err := createAll(ctx, e.client, ns, owners)
	if err != nil {
		return err
	}
	deps := make([]cmSpec, n)
	for i := range n {
		deps[i] = cmSpec{name: fmt.Sprintf("dep-%05d", i), owners: []metav1.OwnerReference{ownerRef(names[i], uids[names[i]], false)}}
	}
	if _, err := createAll(ctx, e.client, ns, deps); err != nil {
		return err
	}
	bg := metav1.DeletePropagationBackground
	if err := deleteAll(ctx, e.client, ns, names, &bg); err != nil {
		return err
	}
	if err := w.waitFor(ctx, o.timeout, "the watcher to see the dependents and no owner", func(objs []*metav1.PartialObjectMetadata) bool {
		return countPrefix(objs, "dep-") >= n && countPrefix(objs, "owner-") == 0
	}); err != nil {
		return err
	}
	res.Objects = n
	return collectAtStart(ctx, e, s, w, res, "the backlog")
}

// collectAtStart starts the cell's collector on a cluster whose garbage
// (the objects named dep-…) is already there, and measures from its start
// until every dependent is collected; what names the work in errors. A
// breaker trip that holds what is left ends the cell incomplete.
func collectAtStart(ctx context.Context, e *env, s cellSpec, w *watcher, res *result, what string) error {
	before := e.proxy.snapshot()
	c, err := startChild(s.flags(e), e.logDir)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if res.Ready, err = c.waitSynced(ctx, e.opts.timeout); err != nil {
		return err
	}
	left := func() int { return countPrefix(w.objects(), "dep-") }
	werr := waitCollected(ctx, e, w, c, c.start, what, res, func() bool { return left() == 0 }, left)
	if werr != nil && !errors.Is(werr, errIncomplete) {
		return werr
	}
	stopped = true
	return errors.Join(werr, finishCell(e, c, before, time.Time{}, res))
}

// setupNamespaceDelete: the namespace deletion on a real cluster (see the
// bulk deletions); w mirrors the namespace's ConfigMaps.
func setupNamespaceDelete(ctx context.Context, e *env, ns string, w *watcher) (clusterPhase, error) {
	n := e.opts.namespaceOwners
	owners := make([]cmSpec, n)
	for i := range n {
		owners[i] = cmSpec{name: fmt.Sprintf("a-owner-%05d", i)}
	}
	uids, err := createAll(ctx, e.client, ns, owners)
	if err != nil {
		return clusterPhase{}, err
	}
	deps := make([]cmSpec, n)
	for i := range n {
		deps[i] = cmSpec{name: fmt.Sprintf("b-dep-%05d", i), owners: []metav1.OwnerReference{ownerRef(owners[i].name, uids[owners[i].name], false)}}
	}
	if _, err := createAll(ctx, e.client, ns, deps); err != nil {
		return clusterPhase{}, err
	}
	if err := w.waitFor(ctx, e.opts.timeout, "the watcher to see every owner and dependent", func(objs []*metav1.PartialObjectMetadata) bool {
		return countPrefix(objs, "a-owner-") >= n && countPrefix(objs, "b-dep-") >= n
	}); err != nil {
		return clusterPhase{}, err
	}
	nw, err := newObjectWatcher(e, namespacesGVR, ns)
	if err != nil {
		return clusterPhase{}, err
	}
	ownersGone := func() bool { return countPrefix(w.objects(), "a-owner-") == 0 }
	left := func() int { return countPrefix(w.objects(), "a-owner-") + countPrefix(w.objects(), "b-dep-") }
	return clusterPhase{
		start: func(ctx context.Context) error {
			return e.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		},
		ownerGone: ownersGone,
		done:      func() bool { return len(nw.objects()) == 0 && left() == 0 },
		objects:   func() int { return n },
		left:      left,
		stop:      nw.stop,
	}, nil
}

// resetKGCLeases deletes the Leases a kgc collector writes (kgcLeases),
// so that the next cell's collector starts as on a fresh cluster: without
// the trips the breaker recorded there, or the owners the orphan journal
// remembers.
func resetKGCLeases(ctx context.Context, client kubernetes.Interface, mode string) error {
	var errs []error
	for _, l := range kgcLeases(mode) {
		err := client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Lease %s: %w", l, err))
		}
	}
	return errors.Join(errs...)
}
