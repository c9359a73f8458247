package run

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// demoNamespace holds the demo's objects. It is never deleted: with no
	// controller manager, a deleted namespace would stay Terminating and
	// the next demo could not create anything in it.
	demoNamespace = "kgc-demo"
	// demoOwnerLabel marks dependents with their owner's name, so that one
	// List finds what is left of a cascade.
	demoOwnerLabel = "kgc-demo/owner"
	demoDependents = 3
	// cascadeTimeout is generous: kgc needs milliseconds, terminating Pods
	// about a second.
	cascadeTimeout = 30 * time.Second
	pollInterval   = 20 * time.Millisecond
)

func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kgc-sandbox demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", DefaultDir+"/kubeconfig", "kubeconfig of the cluster to run the demo on (kgc must be running there)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kgc-sandbox demo [flags]\n\nIn namespace %s, creates a Deployment of %d replicas, deletes it with\nbackground, foreground and orphan propagation in turn, and reports how\nfast its ReplicaSet and Pods go (or that they stay). On a sandbox without\ncontrollers (--controllers=none) it does the same with a ConfigMap owning\n%d ConfigMaps (background and foreground). Needs a running kgc-sandbox.\n\nFlags:\n", demoNamespace, demoReplicas, demoDependents)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kgc-sandbox demo: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig %s (is kgc-sandbox running?): %w", *kubeconfig, err)
	}
	return runDemo(ctx, cfg, stdout, "")
}

// runDemo shows the cascading policies: on Deployments when the sandbox
// runs its controllers and nodes (deploymentDemo), otherwise on plain
// ConfigMaps, which need no controller to exist: one owner, three
// dependents pointing at it by ownerReference. httpURL, when known, is kgc's HTTP address for the graph
// hint.
func runDemo(ctx context.Context, cfg *rest.Config, out io.Writer, httpURL string) error {
	// The demo times kgc, so its own client must not be throttled (client-go
	// defaults to 5 QPS, which would show up as 200 ms steps in the timings).
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", demoNamespace, err)
	}

	cluster, err := hasSimulatedNodes(ctx, client)
	if err != nil {
		return err
	}
	if cluster {
		if err := deploymentDemo(ctx, client, out, httpURL); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nAll three cascades completed: kgc is collecting garbage.\n")
		return nil
	}

	fmt.Fprintf(out, "\n== Demo 1: background cascade ==\n")
	if err := backgroundCascade(ctx, client, out, httpURL); err != nil {
		return fmt.Errorf("background cascade: %w", err)
	}
	fmt.Fprintf(out, "\n== Demo 2: foreground cascade ==\n")
	if err := foregroundCascade(ctx, client, out); err != nil {
		return fmt.Errorf("foreground cascade: %w", err)
	}
	fmt.Fprintf(out, "\nAll cascades completed: kgc is collecting garbage.\n")
	return nil
}

func backgroundCascade(ctx context.Context, client kubernetes.Interface, out io.Writer, httpURL string) error {
	owner, err := createFamily(ctx, client, out, false)
	if err != nil {
		return err
	}
	if httpURL != "" {
		fmt.Fprintf(out, "graph of this family: %s%s?uid=%s\n", httpURL, graphPath, owner.UID)
	}

	fmt.Fprintf(out, "deleting %s with propagationPolicy=Background: the API server removes it at once,\nkgc then finds its dependents orphaned and deletes them\n", owner.Name)
	began := time.Now()
	if err := deleteOwner(ctx, client, owner, metav1.DeletePropagationBackground); err != nil {
		return err
	}
	// The API server removes the owner first, kgc the dependents after.
	return awaitGone(ctx, out, began, append([]string{owner.Name}, dependentNames(owner)...), configMapFamily(client, owner))
}

func foregroundCascade(ctx context.Context, client kubernetes.Interface, out io.Writer) error {
	owner, err := createFamily(ctx, client, out, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "deleting %s with propagationPolicy=Foreground: the API server keeps it, marked, until\nkgc has deleted every dependent with blockOwnerDeletion=true\n", owner.Name)
	began := time.Now()
	if err := deleteOwner(ctx, client, owner, metav1.DeletePropagationForeground); err != nil {
		return err
	}
	// Usually still there at this point, unless kgc was faster than the
	// round trip.
	if got, err := client.CoreV1().ConfigMaps(demoNamespace).Get(ctx, owner.Name, metav1.GetOptions{}); err == nil && got.UID == owner.UID {
		fmt.Fprintf(out, "  %s is waiting: deletionTimestamp=%s finalizers=%v\n", owner.Name, got.DeletionTimestamp.Format(time.RFC3339), got.Finalizers)
	}
	// kgc deletes the dependents first, then releases the owner.
	return awaitGone(ctx, out, began, append(dependentNames(owner), owner.Name), configMapFamily(client, owner))
}

// createFamily creates an owner ConfigMap (with a generated name, so that
// leftovers from an interrupted run never collide) and its dependents.
func createFamily(ctx context.Context, client kubernetes.Interface, out io.Writer, blockOwnerDeletion bool) (*corev1.ConfigMap, error) {
	cms := client.CoreV1().ConfigMaps(demoNamespace)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "owner-", Namespace: demoNamespace},
		Data:       map[string]string{"role": "owner"},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating the owner: %w", err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	if blockOwnerDeletion {
		ref.BlockOwnerDeletion = &blockOwnerDeletion
	}
	names := dependentNames(owner)
	for _, name := range names {
		dep := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:            name,
				Namespace:       demoNamespace,
				Labels:          map[string]string{demoOwnerLabel: owner.Name},
				OwnerReferences: []metav1.OwnerReference{ref},
			},
			Data: map[string]string{"role": "dependent"},
		}
		if _, err := cms.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating dependent %s: %w", dep.Name, err)
		}
	}
	fmt.Fprintf(out, "created ConfigMap %s/%s (uid %s)\n  owning %s\n", demoNamespace, owner.Name, owner.UID, strings.Join(names, ", "))
	return owner, nil
}

func deleteOwner(ctx context.Context, client kubernetes.Interface, owner *corev1.ConfigMap, policy metav1.DeletionPropagation) error {
	err := client.CoreV1().ConfigMaps(demoNamespace).Delete(ctx, owner.Name, metav1.DeleteOptions{
		PropagationPolicy: &policy,
		Preconditions:     &metav1.Preconditions{UID: &owner.UID},
	})
	if err != nil {
		return fmt.Errorf("deleting %s: %w", owner.Name, err)
	}
	return nil
}

func dependentNames(owner *corev1.ConfigMap) []string {
	names := make([]string, demoDependents)
	for i := range names {
		names[i] = fmt.Sprintf("%s-dep-%d", owner.Name, i+1)
	}
	return names
}

// awaitGone polls until every object named in order is gone, printing
// each disappearance with the time since began. present says which still
// exist. Objects that vanish between two polls are printed in the given
// order, the order in which they are expected to go.
func awaitGone(ctx context.Context, out io.Writer, began time.Time, order []string, present func(context.Context) (map[string]bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, cascadeTimeout)
	defer cancel()

	remaining := slices.Clone(order)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		there, err := present(ctx)
		if err != nil {
			return err
		}
		elapsed := time.Since(began).Round(time.Millisecond)
		remaining = slices.DeleteFunc(remaining, func(name string) bool {
			if there[name] {
				return false
			}
			fmt.Fprintf(out, "  %-40s gone after %v\n", name, elapsed)
			return true
		})
		if len(remaining) == 0 {
			fmt.Fprintf(out, "cascade complete in %v\n", elapsed)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still present after %v: %s (is kgc running?): %w",
				cascadeTimeout, strings.Join(remaining, ", "), ctx.Err())
		case <-ticker.C:
		}
	}
}

// configMapFamily returns a function listing the names of the owner (same
// UID) and the dependents that still exist, including those being
// deleted.
func configMapFamily(client kubernetes.Interface, owner *corev1.ConfigMap) func(context.Context) (map[string]bool, error) {
	cms := client.CoreV1().ConfigMaps(demoNamespace)
	return func(ctx context.Context) (map[string]bool, error) {
		present := map[string]bool{}
		deps, err := cms.List(ctx, metav1.ListOptions{LabelSelector: demoOwnerLabel + "=" + owner.Name})
		if err != nil {
			return nil, fmt.Errorf("listing dependents: %w", err)
		}
		for _, d := range deps.Items {
			present[d.Name] = true
		}
		got, err := cms.Get(ctx, owner.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("getting the owner: %w", err)
		case got.UID == owner.UID:
			present[owner.Name] = true
		}
		return present, nil
	}
}
