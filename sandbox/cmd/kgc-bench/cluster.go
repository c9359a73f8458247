package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/ptr"
)

// The real-cluster scenarios run on a sandbox with the rest of a cluster
// (controlplane.Options.Cluster): kube-controller-manager with every
// controller but its garbage collector, kube-scheduler and simulated nodes
// (kwok) on which Pods run and terminate gracefully, about a second after
// their deletion. The workloads are made by the real controllers
// (Deployment → ReplicaSet → Pods, Job → Pod); the collector under test is
// the only garbage collector. kube-controller-manager, the scheduler and
// kwok talk to the apiserver directly, not through the counting proxy:
// the proxy's counts are the collector's alone.
const (
	scDeploymentBackground = "deployment-background"
	scDeploymentForeground = "deployment-foreground"
	scCronJob              = "cronjob"
	scCronJobDelete        = "cronjob-delete"
	scRollout              = "rollout"
)

// clusterScenarios are the real-cluster scenarios, in the order they run.
var clusterScenarios = []string{scDeploymentBackground, scDeploymentForeground, scCronJob, scCronJobDelete, scRollout}

// scenarioAliases name groups of scenarios for --scenarios.
var scenarioAliases = map[string][]string{
	"cluster":    clusterScenarios,
	"deployment": {scDeploymentBackground, scDeploymentForeground},
	"bulk":       bulkScenarios,
}

// isClusterScenario: sc runs on a real cluster (clusterRun): the
// real-cluster scenarios, and the namespace deletion (bulk.go), which
// needs kube-controller-manager's namespace controller.
func isClusterScenario(sc string) bool {
	return slices.Contains(clusterScenarios, sc) || sc == scNamespace
}

var (
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	jobsGVR        = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}
	cronJobsGVR    = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}

	// clusterGVRs are what a real-cluster cell watches and cleans up.
	clusterGVRs = []schema.GroupVersionResource{podsGVR, replicaSetsGVR, deploymentsGVR, jobsGVR, cronJobsGVR}
)

const (
	// rollLabel is the Pod template label a rollout changes; the
	// Deployment controller copies it to the ReplicaSet it makes, so the
	// watcher can tell old ReplicaSets and Pods from the newest.
	rollLabel = "kgc.dev/roll"
	// pollEvery is how often setup polls the status of workloads.
	pollEvery = 500 * time.Millisecond
)

// clusterRun runs every real-cluster scenario of one run on one fresh
// cluster: every collector × budget cell in its own namespace, which is
// empty before the next cell starts (emptyNamespace).
func clusterRun(ctx context.Context, o *options, scenarios []string, run int, logDir string, out io.Writer) ([]result, error) {
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	began := time.Now()
	cp, err := startRunControlPlane(sctx, o, out, true)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	defer func() { _ = cp.Stop() }()
	fmt.Fprintf(out, "# cluster run %d: control plane, kube-controller-manager, kube-scheduler and %d simulated nodes ready in %s\n", run, max(o.nodes, 1), time.Since(began).Round(100*time.Millisecond))
	e, closeEnv, err := newEnv(cp, o, logDir)
	if err != nil {
		return nil, err
	}
	defer closeEnv()

	colls := slices.Clone(o.collectors)
	if run%2 == 1 {
		slices.Reverse(colls)
	}
	var results []result
	var errs []error
	for _, sc := range scenarios {
		for _, b := range o.budgetList {
			for _, coll := range colls {
				if ctx.Err() != nil {
					return results, errors.Join(append(errs, ctx.Err())...)
				}
				s := cellSpec{scenario: sc, collector: coll, budget: b, run: run}
				cellStart := time.Now()
				r, err := runClusterCell(ctx, e, s)
				if err == nil {
					err = tripError(r)
				}
				switch {
				case err == nil:
					results = append(results, r)
					printCell(out, r)
				case errors.Is(err, errIncomplete):
					results = append(results, r)
					printCell(out, r)
					errs = append(errs, fmt.Errorf("%s/%s/%s: %w", sc, coll, b, err))
				default:
					errs = append(errs, fmt.Errorf("%s/%s/%s: %w", sc, coll, b, err))
					fmt.Fprintf(out, "# %-10s %-9s %-11s run %d: FAILED: %v\n", sc, coll, b, run, err)
				}
				cleaning := time.Now()
				if err := emptyNamespace(ctx, e.md, s.namespace(), o.timeout); err != nil {
					return results, errors.Join(append(errs, err)...)
				}
				if err := resetKGCLeases(ctx, e.client, o.kgcOptions); err != nil {
					return results, errors.Join(append(errs, err)...)
				}
				if o.verbose {
					fmt.Fprintf(out, "# cell took %s, of which setup %s; emptying its namespace %s\n",
						time.Since(cellStart).Round(100*time.Millisecond), r.Setup.Round(100*time.Millisecond), time.Since(cleaning).Round(100*time.Millisecond))
				}
			}
		}
	}
	return results, errors.Join(errs...)
}

// clusterPhase is a real-cluster scenario's measured phase.
type clusterPhase struct {
	start     func(ctx context.Context) error // what the user does
	ownerGone func() bool                     // the owner (see the scenario) is gone
	done      func() bool                     // the end of the phase (implies ownerGone)
	objects   func() int                      // what the collector acted on, evaluated at the end
	// left, when set, is what is left to collect: the phase may then end
	// incomplete (waitCollected). stop, when set, is called after the cell.
	left func() int
	stop func()
}

// runClusterCell: the collector starts on an empty namespace and syncs;
// the workload is made by the cluster's controllers and runs; once the
// collector is quiet the measured phase does what a user does (delete a
// Deployment, lower a CronJob's history limit, roll a Deployment) and waits
// for the watcher to see the end state.
func runClusterCell(ctx context.Context, e *env, s cellSpec) (result, error) {
	o := e.opts
	ns := s.namespace()
	res := result{Scenario: s.scenario, Collector: s.collector, Budget: s.budget, Run: s.run}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	if err := waitServiceAccount(ctx, e.client, ns, time.Minute); err != nil {
		return res, err
	}
	gvrs := clusterGVRs
	if s.scenario == scNamespace {
		gvrs = []schema.GroupVersionResource{configMapsGVR}
	}
	w, err := newWatcher(e.md, ns, gvrs...)
	if err != nil {
		return res, err
	}
	defer w.stop()
	atStart := e.proxy.snapshot()
	c, err := startChild(s.flags(e), e.logDir)
	if err != nil {
		return res, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = c.stop()
		}
	}()
	if _, err := c.waitSynced(ctx, o.timeout); err != nil {
		return res, err
	}

	setupStart := time.Now()
	var ph clusterPhase
	switch s.scenario {
	case scDeploymentBackground, scDeploymentForeground:
		ph, err = setupDeploymentDelete(ctx, e, ns, w, s.scenario == scDeploymentForeground)
	case scCronJob, scCronJobDelete:
		ph, err = setupCronJob(ctx, e, ns, w, s.scenario == scCronJobDelete)
	case scRollout:
		ph, err = setupRollout(ctx, e, ns, w)
	case scNamespace:
		ph, err = setupNamespaceDelete(ctx, e, ns, w)
	default:
		err = fmt.Errorf("unknown scenario %q", s.scenario)
	}
	if ph.stop != nil {
		defer ph.stop()
	}
	if err != nil {
		return res, err
	}
	// Let the collector digest the workload before measuring.
	quiet := time.Now()
	_ = e.proxy.waitQuiet(time.Second, time.Minute)
	res.Setup = time.Since(setupStart)
	res.Note = fmt.Sprintf("setup %s, then quiet after %s; during setup: %s", res.Setup.Round(100*time.Millisecond), time.Since(quiet).Round(100*time.Millisecond), e.proxy.snapshot().sub(atStart).resourceSummary())

	before := e.proxy.snapshot()
	e.proxy.mark()
	w.resetDeleted()
	start := time.Now()
	if err := ph.start(ctx); err != nil {
		return res, err
	}
	ownerGone := false
	done := func() bool {
		if !ownerGone && ph.ownerGone() {
			ownerGone = true
			res.OwnerGone = time.Since(start)
		}
		return ownerGone && ph.done()
	}
	var werr error
	if ph.left != nil {
		werr = waitCollected(ctx, e, w, c, start, s.scenario, &res, done, ph.left)
		if werr != nil && !errors.Is(werr, errIncomplete) {
			return res, werr
		}
	} else {
		if err := w.waitUntil(ctx, o.timeout, s.scenario, done); err != nil {
			return res, err
		}
		res.Elapsed = time.Since(start)
	}
	res.Objects = ph.objects()
	res.FirstCall, res.LastCall = e.proxy.firstLast(start)
	res.InFlight = e.proxy.meanInFlight(start, start.Add(res.Elapsed))
	res.Calls = e.proxy.snapshot().sub(before)
	res.Trips = c.breakerTrips()
	stopped = true
	res.Usage, err = c.stop()
	if foreign := foreignRequests(e.proxy.snapshot().sub(atStart), s.collector == collectorKGC); len(foreign) > 0 {
		return res, fmt.Errorf("requests of other clients reached the collector's proxy: %s", strings.Join(foreign, ", "))
	}
	return res, errors.Join(werr, err)
}

// foreignRequests returns what in c no garbage collector sends and the
// cluster's other clients do: kube-controller-manager's, kube-scheduler's
// or kwok's requests (by User-Agent, or by what they write: objects
// created (other than Events), status and binding subresources, leases).
// They use connections of their own, straight to the apiserver; a request
// of theirs at the proxy would be counted as the collector's. ownLeases:
// the collector writes Leases of its own (kgc records its breaker's trips
// and its orphan journal on Leases), so Lease writes are not foreign.
func foreignRequests(c counts, ownLeases bool) []string {
	var out []string
	for agent, n := range c.ByAgent {
		if slices.Contains([]string{"kube-controller-manager", "kube-scheduler", "kwok"}, agent) {
			out = append(out, fmt.Sprintf("%d from %s", n, agent))
		}
	}
	for k, n := range c.ByResource {
		verb, res, _ := strings.Cut(k, " ")
		write := verb != verbGet && verb != verbList && verb != verbListNamespaced && verb != verbWatch && verb != verbDiscovery && verb != verbOther
		lease := res == "coordination.k8s.io/leases"
		switch {
		case lease && ownLeases:
		case verb == verbCreate && res != "events" && res != "events.k8s.io/events",
			write && (strings.HasSuffix(res, "/status") || strings.HasSuffix(res, "/binding") || lease):
			out = append(out, fmt.Sprintf("%s=%d", k, n))
		}
	}
	slices.Sort(out)
	return out
}

// podTemplate is a Pod that runs (on a simulated node) until deleted, or
// for a Job completes.
func podTemplate(labels map[string]string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: restart,
			Containers:    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// createDeployment creates a Deployment of replicas Pods labelled
// app=name and rollLabel=0, and waits until they are all available and
// the watcher sees them and their ReplicaSet.
func createDeployment(ctx context.Context, e *env, ns, name string, replicas int, historyLimit *int32, w *watcher) error {
	labels := map[string]string{"app": name}
	tmplLabels := map[string]string{"app": name, rollLabel: "0"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr.To(int32(replicas)),
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			Template:             podTemplate(tmplLabels, corev1.RestartPolicyAlways),
			RevisionHistoryLimit: historyLimit,
		},
	}
	if _, err := e.client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := waitDeploymentAvailable(ctx, e.client, ns, name, int32(replicas), e.opts.timeout); err != nil {
		return err
	}
	return w.waitUntil(ctx, e.opts.timeout, "the watcher to see the Deployment's Pods", func() bool {
		return len(w.of(podsGVR)) == replicas && len(w.of(replicaSetsGVR)) == 1
	})
}

// waitDeploymentAvailable polls until every replica of the Deployment's
// current template is available and no other replica is left.
func waitDeploymentAvailable(ctx context.Context, client kubernetes.Interface, ns, name string, replicas int32, timeout time.Duration) error {
	var last appsv1.DeploymentStatus
	err := wait.PollUntilContextTimeout(ctx, pollEvery, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d.Status
		st := d.Status
		return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == replicas && st.AvailableReplicas == replicas && st.Replicas == replicas, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for Deployment %s/%s to have %d available Pods (status %+v): %w", ns, name, replicas, last, err)
	}
	return nil
}

// setupDeploymentDelete: a Deployment of --deployment-pods Pods; the
// phase deletes it Background or Foreground (what `kubectl delete
// deployment --cascade=background|foreground` does) and ends when it, its
// ReplicaSet and every Pod are gone (Pods terminate gracefully: the
// simulated kubelet removes a deleted Pod about a second after its
// deletion). The owner is the Deployment; objects: the Pods and the
// ReplicaSet deleted, plus with Foreground the Deployment's finalizer
// removed.
func setupDeploymentDelete(ctx context.Context, e *env, ns string, w *watcher, foreground bool) (clusterPhase, error) {
	n := e.opts.deploymentPods
	if err := createDeployment(ctx, e, ns, "web", n, nil, w); err != nil {
		return clusterPhase{}, err
	}
	policy := metav1.DeletePropagationBackground
	objects := n + 1
	if foreground {
		policy = metav1.DeletePropagationForeground
		objects = n + 2
	}
	gone := func() bool { return len(w.of(deploymentsGVR)) == 0 }
	return clusterPhase{
		start: func(ctx context.Context) error {
			return e.client.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{PropagationPolicy: &policy})
		},
		ownerGone: gone,
		done: func() bool {
			return gone() && len(w.of(replicaSetsGVR)) == 0 && len(w.of(podsGVR)) == 0
		},
		objects: func() int { return objects },
	}, nil
}

// setupCronJob: a (suspended) CronJob with a history of --cronjob-jobs
// completed Jobs, each with its completed Pod: the Jobs are created with
// the CronJob as their controller, as the CronJob controller creates them
// (waiting for 500 schedules would take 500 minutes), and run by the Job
// controller. The phase either lowers the CronJob's
// successfulJobsHistoryLimit to 0 (cronjob: the CronJob controller deletes
// the Jobs, Background, and the collector their Pods; the owners are the
// Jobs, objects the Pods) or deletes the CronJob Background (cronjob-delete:
// the collector deletes the Jobs and their Pods; the owner is the CronJob,
// objects the Jobs and the Pods). It ends when no Job and no Pod is left.
func setupCronJob(ctx context.Context, e *env, ns string, w *watcher, deleteCronJob bool) (clusterPhase, error) {
	n := e.opts.cronJobJobs
	jobSpec := batchv1.JobSpec{
		BackoffLimit: ptr.To[int32](0),
		Template:     podTemplate(nil, corev1.RestartPolicyNever),
	}
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly"},
		Spec: batchv1.CronJobSpec{
			Schedule:                   "0 0 1 1 *",
			Suspend:                    ptr.To(true),
			SuccessfulJobsHistoryLimit: ptr.To(int32(n)),
			FailedJobsHistoryLimit:     ptr.To(int32(n)),
			JobTemplate:                batchv1.JobTemplateSpec{Spec: jobSpec},
		},
	}
	cj, err := e.client.BatchV1().CronJobs(ns).Create(ctx, cj, metav1.CreateOptions{})
	if err != nil {
		return clusterPhase{}, err
	}
	ref := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	if err := inParallel(n, func(i int) error {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nightly-%05d", i), OwnerReferences: []metav1.OwnerReference{ref}},
			Spec:       jobSpec,
		}
		_, err := e.client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
		return err
	}); err != nil {
		return clusterPhase{}, err
	}
	complete := 0
	if err := wait.PollUntilContextTimeout(ctx, pollEvery, e.opts.timeout, true, func(ctx context.Context) (bool, error) {
		l, err := e.client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		complete = 0
		for _, j := range l.Items {
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					complete++
				}
			}
		}
		return complete == n, nil
	}); err != nil {
		return clusterPhase{}, fmt.Errorf("waiting for %d Jobs to complete (%d are): %w", n, complete, err)
	}
	if err := w.waitUntil(ctx, e.opts.timeout, "the watcher to see the Jobs' Pods", func() bool {
		return len(w.of(podsGVR)) == n && len(w.of(jobsGVR)) == n && len(w.of(cronJobsGVR)) == 1
	}); err != nil {
		return clusterPhase{}, err
	}
	noJobs := func() bool { return len(w.of(jobsGVR)) == 0 }
	if deleteCronJob {
		gone := func() bool { return len(w.of(cronJobsGVR)) == 0 }
		return clusterPhase{
			start: func(ctx context.Context) error {
				return e.client.BatchV1().CronJobs(ns).Delete(ctx, cj.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
			},
			ownerGone: gone,
			done:      func() bool { return gone() && noJobs() && len(w.of(podsGVR)) == 0 },
			objects:   func() int { return 2 * n },
		}, nil
	}
	return clusterPhase{
		start: func(ctx context.Context) error {
			_, err := e.client.BatchV1().CronJobs(ns).Patch(ctx, cj.Name, types.MergePatchType, []byte(`{"spec":{"successfulJobsHistoryLimit":0}}`), metav1.PatchOptions{})
			return err
		},
		ownerGone: noJobs,
		done:      func() bool { return noJobs() && len(w.of(podsGVR)) == 0 },
		objects:   func() int { return n },
	}, nil
}

// setupRollout: a Deployment of --rollout-replicas Pods with
// revisionHistoryLimit 0 (the Deployment controller deletes every old
// ReplicaSet, Background, once scaled down); the phase rolls it --rollouts
// times, --rollout-interval apart (a new Pod template label each time),
// and ends when no old ReplicaSet and no Pod of one is left. The owners are
// the old ReplicaSets; objects: the Pods and ReplicaSets deleted during
// the phase, by anyone: the ReplicaSet controller deletes most Pods as it
// scales old ReplicaSets down, the Deployment controller the ReplicaSets,
// and the collector what an old ReplicaSet still owns when it goes. It
// measures what the collector costs (calls, CPU) in a storm of changes
// more than its throughput.
func setupRollout(ctx context.Context, e *env, ns string, w *watcher) (clusterPhase, error) {
	o := e.opts
	if err := createDeployment(ctx, e, ns, "storm", o.rolloutReplicas, ptr.To[int32](0), w); err != nil {
		return clusterPhase{}, err
	}
	last := strconv.Itoa(o.rollouts)
	oldGone := func(gvr schema.GroupVersionResource) bool {
		for _, ob := range w.of(gvr) {
			if ob.Labels[rollLabel] != last {
				return false
			}
		}
		return true
	}
	return clusterPhase{
		start: func(ctx context.Context) error {
			for i := 1; i <= o.rollouts; i++ {
				if i > 1 {
					select {
					case <-ctx.Done():
						return ctx.Err()
					case <-time.After(o.rolloutInterval):
					}
				}
				patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"labels":{%q:%q}}}}}`, rollLabel, strconv.Itoa(i))
				if _, err := e.client.AppsV1().Deployments(ns).Patch(ctx, "storm", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("rollout %d: %w", i, err)
				}
			}
			return nil
		},
		ownerGone: func() bool { return len(w.of(replicaSetsGVR)) > 0 && oldGone(replicaSetsGVR) },
		done:      func() bool { return oldGone(replicaSetsGVR) && oldGone(podsGVR) },
		objects:   func() int { return w.deletedSince(podsGVR) + w.deletedSince(replicaSetsGVR) },
	}, nil
}

// emptyNamespace deletes every workload and Pod left in ns (by a
// rollout, or by a failed cell) while no collector runs: the workloads
// first, so that no controller makes more, then the Pods, at once (grace
// period 0), and strips the finalizers a failed cell left behind (a
// Foreground deletion no collector finished). It returns once ns has none
// of them, so that the next cell's collector, which watches every
// namespace, has nothing of this cell's to see or collect. The namespace
// stays: deleting it (kube-controller-manager's namespace controller)
// takes 5-15 s, and the cluster goes at the end of the run.
func emptyNamespace(ctx context.Context, md metadata.Interface, ns string, timeout time.Duration) error {
	order := []schema.GroupVersionResource{cronJobsGVR, deploymentsGVR, jobsGVR, replicaSetsGVR, podsGVR}
	left := map[string]int{}
	err := wait.PollUntilContextTimeout(ctx, pollEvery, timeout, true, func(ctx context.Context) (bool, error) {
		clear(left)
		for _, gvr := range order {
			r := md.Resource(gvr).Namespace(ns)
			l, err := r.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, ob := range l.Items {
				left[gvr.Resource]++
				if len(ob.Finalizers) > 0 {
					_, _ = r.Patch(ctx, ob.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				}
			}
			if len(l.Items) > 0 {
				if err := r.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return false, err
				}
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("emptying namespace %s (left: %v): %w", ns, left, err)
	}
	return nil
}

// waitServiceAccount waits for the default ServiceAccount of a new
// namespace: the apiserver rejects Pods until kube-controller-manager has
// made it, and the ReplicaSet and Job controllers back off for seconds
// after such a rejection.
func waitServiceAccount(ctx context.Context, client kubernetes.Interface, ns string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount of %s: %w", ns, err)
	}
	return nil
}
