package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	kgcdiscovery "github.com/kgc-dev/kgc/internal/discovery"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/rules"
)

// InspectDeps lets embedders and tests adjust how the inspection commands
// reach the cluster.
type InspectDeps struct {
	// WrapConfig, when set, is applied to the client config before use
	// (tests wrap the transport to count requests).
	WrapConfig func(*rest.Config)
	// HTTPClient, when set, is the client of --kgc-url.
	HTTPClient *http.Client
	// Forward, when set, replaces the port-forward --ask-kgc opens to the
	// leader's Pod (tests: a control plane without kubelets).
	Forward ForwardFunc
}

// AddInspectCommands registers `kgc explain`, `kgc preview delete`,
// `kgc tree` and `kgc stuck` on root.
func AddInspectCommands(root *cobra.Command, deps InspectDeps) {
	root.AddCommand(newExplainCommand(deps), newPreviewCommand(deps), newTreeCommand(deps), newStuckCommand(deps))
}

// inspectOptions are the flags every inspection command shares
// (clientflags.go), and what they lead to.
type inspectOptions struct {
	*clientFlags
	// apiFlags: a kubeconfig flag was given, so the API server is asked
	// also when kgc is (kinds resolve like kubectl's).
	apiFlags bool
	// conn is the way to the running kgc, once dialled.
	conn *kgcConn
}

func newInspectOptions() *inspectOptions { return &inspectOptions{clientFlags: newClientFlags()} }

// kubeconfigFlags are ConfigFlags' flags that choose an API server or
// identity.
var kubeconfigFlags = []string{"kubeconfig", "context", "cluster", "user", "server", "token", "as", "as-group", "as-uid", "certificate-authority", "client-certificate", "client-key"}

func (o *inspectOptions) addFlags(cmd *cobra.Command) {
	o.clientFlags.addFlags(cmd)
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		for _, name := range kubeconfigFlags {
			if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
				o.apiFlags = true
			}
		}
		if err := o.validate(); err != nil {
			return err
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		defer o.close()
		return run(cmd, args)
	}
}

// close ends the way to kgc, if one was opened.
func (o *inspectOptions) close() {
	if o.conn != nil {
		o.conn.close()
		o.conn = nil
	}
}

// timeoutOrZero is --request-timeout, validated before the command runs.
func (o *inspectOptions) timeoutOrZero() time.Duration {
	d, _ := o.timeout()
	return d
}

// kgcConn reaches the running kgc (once per command).
func (o *inspectOptions) kgcConn(ctx context.Context, deps InspectDeps) (*kgcConn, error) {
	if o.conn != nil {
		return o.conn, nil
	}
	var cfg *rest.Config
	if o.kgc.ask || (o.kgc.url != "" && strings.HasPrefix(o.kgc.url, "https:")) {
		var err error
		if cfg, err = o.restConfig(deps); err != nil {
			return nil, err
		}
	}
	c, err := o.kgc.dial(ctx, cfg, deps, o.timeoutOrZero())
	if err != nil {
		return nil, err
	}
	o.conn = c
	return c, nil
}

// view builds the View the command reads from, and the namespace to use.
func (o *inspectOptions) view(ctx context.Context, deps InspectDeps) (inspect.View, string, error) {
	ns, _ := o.namespace()
	if o.kgc.asking() {
		conn, err := o.kgcConn(ctx, deps)
		if err != nil {
			return nil, "", err
		}
		sv, err := inspect.NewServerView(conn.base, conn.client)
		if err != nil {
			return nil, "", err
		}
		if o.apiFlags || o.kgc.ask {
			// With the API server at hand, short names and resource names
			// resolve like kubectl's (and kinds no API serves are
			// recognized as such).
			if cfg, err := o.restConfig(deps); err == nil {
				if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
					sv.Mapper = mapperFor(dc)
				}
			}
		}
		return sv, ns, nil
	}
	cfg, err := o.restConfig(deps)
	if err != nil {
		return nil, "", err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	ignored := map[schema.GroupResource]struct{}{}
	for _, gr := range kgcdiscovery.DefaultIgnored() {
		ignored[gr] = struct{}{}
	}
	// Groups that fail discovery are left out; what they hold cannot be
	// read anyway.
	found, _, err := kgcdiscovery.Deletable(dc, ignored)
	if err != nil && len(found) == 0 {
		return nil, "", fmt.Errorf("discovering resources: %w", err)
	}
	rs := make([]kgcdiscovery.Resource, 0, len(found))
	for _, r := range found {
		rs = append(rs, r)
	}
	return inspect.NewLiveView(mapperFor(dc), mc, rs), ns, nil
}

func mapperFor(dc discovery.DiscoveryInterface) meta.RESTMapper {
	cached := memory.NewMemCacheClient(dc)
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
}

// lookup resolves the command's object argument(s). When the object
// cannot be found, it still returns the view it asked.
func (o *inspectOptions) lookup(ctx context.Context, deps InspectDeps, args []string) (inspect.View, *inspect.Object, error) {
	kind, name, err := inspect.ParseTarget(args)
	if err != nil {
		return nil, nil, err
	}
	v, ns, err := o.view(ctx, deps)
	if err != nil {
		return nil, nil, err
	}
	obj, err := v.Lookup(ctx, kind, ns, name)
	if err != nil {
		return v, nil, err // the view, for explainGone
	}
	return v, obj, nil
}

func notSyncedWarning(cmd *cobra.Command, v inspect.View) {
	if lv, ok := v.(*inspect.LiveView); ok {
		for _, w := range lv.Warnings {
			fmt.Fprintln(cmd.ErrOrStderr(), "Warning: the answer may be incomplete:", w)
		}
	}
	if sv, ok := v.(*inspect.ServerView); ok && !sv.Synced {
		fmt.Fprintln(cmd.ErrOrStderr(), "Warning: kgc had not synced its monitors yet; its graph may be missing objects")
	}
}

func newExplainCommand(deps InspectDeps) *cobra.Command {
	o := newInspectOptions()
	cmd := &cobra.Command{
		Use:   "explain KIND/NAME",
		Short: "Why is this object not deleted (or why will it be)?",
		Long: "Explain classifies each ownerReference of an object (solid, waiting for a foreground deletion, dangling, unresolvable, invalid) " +
			"and says whether kgc will delete it, remove references, orphan its dependents or leave it, and why. For an object in " +
			"Foreground deletion it lists the blocking dependents it waits for, recursively, with their finalizers. " +
			"It reads object metadata from the API server, or asks the running kgc with --ask-kgc (or --kgc-url). It never writes. " +
			"Asking kgc, for an object that no longer exists it answers from kgc's record of its writes: when kgc deleted it, " +
			"and why (which owner was gone and how kgc knew, the policy, the preconditions).",
		Example: "  kgc explain deployment/web -n shop\n  kgc explain rs web-5d4f -n shop --ask-kgc\n  kgc explain pod/web-5d4f-x2x9z -n shop --ask-kgc   # deleted: when and why\n  kgc explain cm/web-cfg -n shop --kgc-url http://127.0.0.1:10258 -o jsonpath='{.decision.verdict}'",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, obj, err := o.lookup(cmd.Context(), deps, args)
			if errors.Is(err, inspect.ErrNotFound) && o.kgc.asking() {
				// Gone: what did kgc write to it, and why?
				return o.explainGone(cmd, v, args, err)
			}
			if err != nil {
				return err
			}
			e, err := inspect.Explain(cmd.Context(), rules.Policy{}, v, obj)
			if err != nil {
				return err
			}
			if o.kgc.asking() && e.Decision.Verdict == inspect.VerdictDelete {
				// Decided for deletion: does the running kgc hold it?
				if r, err := o.fetchHolds(cmd.Context(), deps); err == nil {
					e.Hold = inspect.HoldOf(r, obj.UID)
				}
			}
			if sv, ok := v.(*inspect.ServerView); ok {
				// A kgc in shadow mode: its disagreements about it.
				if e.Shadow, err = sv.ShadowDisagreements(cmd.Context(), obj.UID); err != nil {
					return err
				}
			}
			notSyncedWarning(cmd, v)
			return o.write(cmd.OutOrStdout(), answer{kind: "Explanation", value: e, names: names(e.Object),
				text: func(w io.Writer) error { return inspect.WriteExplanation(w, e) }})
		},
	}
	o.addFlags(cmd)
	return cmd
}

// explainGone answers explain for an object kgc's graph does not hold,
// from the kgc's record of its writes; notFound is the lookup's error,
// returned when kgc has no record either.
func (o *inspectOptions) explainGone(cmd *cobra.Command, v inspect.View, args []string, notFound error) error {
	sv, ok := v.(*inspect.ServerView)
	if !ok {
		return notFound
	}
	kind, name, err := inspect.ParseTarget(args)
	if err != nil {
		return err
	}
	ns, _ := o.namespace()
	g, err := inspect.ExplainGone(cmd.Context(), sv, kind, ns, name)
	switch {
	case errors.Is(err, inspect.ErrNoHistory):
		return fmt.Errorf("%w; and %w", notFound, err)
	case err != nil:
		return err
	case g.Object == nil:
		return fmt.Errorf("%w; %s", notFound, g.Summary)
	}
	gone := objectName{APIVersion: g.Object.APIVersion, Kind: g.Object.Kind, Namespace: g.Object.Namespace, Name: g.Object.Name}
	return o.write(cmd.OutOrStdout(), answer{kind: "GoneExplanation", value: g, names: []objectName{gone},
		text: func(w io.Writer) error { return inspect.WriteGone(w, g) }})
}

func parseCascade(s string) (metav1.DeletionPropagation, error) {
	switch strings.ToLower(s) {
	case "background", "true":
		return metav1.DeletePropagationBackground, nil
	case "foreground":
		return metav1.DeletePropagationForeground, nil
	case "orphan", "false":
		return metav1.DeletePropagationOrphan, nil
	}
	return "", fmt.Errorf("--cascade %q: want background, foreground or orphan", s)
}

func newPreviewCommand(deps InspectDeps) *cobra.Command {
	parent := &cobra.Command{
		Use:   "preview",
		Short: "Dry runs of what an operation would do",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("preview what? try: kgc preview delete KIND/NAME")
		},
	}
	o := newInspectOptions()
	var cascade string
	cmd := &cobra.Command{
		Use:   "delete KIND/NAME",
		Short: "What will deleting this object remove? (dry run; changes nothing)",
		Long: "Preview simulates deleting an object with the apiserver's and kgc's semantics from the current state: every object " +
			"that would be deleted or orphaned, level by level in the order it would happen, and what would block (finalizers no " +
			"collector handles, objects kept by another live owner, blockOwnerDeletion waits). It only reads. Without --cascade it " +
			"assumes background, like kubectl (note that the apiserver defaults some kinds, e.g. a v1 Job or ReplicationController " +
			"deleted without options, to orphan).",
		Example: "  kgc preview delete deployment/web -n shop --cascade=foreground\n  kgc preview delete namespace/shop -o name",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			policy, err := parseCascade(cascade)
			if err != nil {
				return err
			}
			v, obj, err := o.lookup(cmd.Context(), deps, args)
			if err != nil {
				return err
			}
			p, err := inspect.PreviewDelete(cmd.Context(), rules.Policy{}, v, obj, policy)
			if err != nil {
				return err
			}
			notSyncedWarning(cmd, v)
			// -o name: what the deletion would remove, as kubectl delete
			// --dry-run -o name names it.
			return o.write(cmd.OutOrStdout(), answer{kind: "DeletionPreview", value: p, names: names(p.Deleted...),
				text: func(w io.Writer) error { return inspect.WritePreview(w, p) }})
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&cascade, "cascade", "background", "Deletion propagation to simulate: background, foreground or orphan.")
	parent.AddCommand(cmd)
	return parent
}

func newTreeCommand(deps InspectDeps) *cobra.Command {
	o := newInspectOptions()
	cmd := &cobra.Command{
		Use:     "tree KIND/NAME",
		Short:   "What owns what? The object's owners above, its dependents below",
		Long:    "Tree prints the ownership tree around an object: its owners (recursively) above, the object, and its dependents (recursively) below, with state markers (DELETING, WAITING(foreground), ORPHANING, PLACEHOLDER, DANGLING, FINALIZERS=...). It never writes.",
		Example: "  kgc tree deployment/web -n shop\n  kgc tree namespace/shop -o json\n  kgc tree deployment/web -n shop -o name --ask-kgc",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, obj, err := o.lookup(cmd.Context(), deps, args)
			if err != nil {
				return err
			}
			t, err := inspect.BuildTree(cmd.Context(), v, obj)
			if err != nil {
				return err
			}
			notSyncedWarning(cmd, v)
			return o.write(cmd.OutOrStdout(), answer{kind: "OwnershipTree", value: t, names: treeNames(t),
				text: func(w io.Writer) error { return inspect.WriteTree(w, t) }})
		},
	}
	o.addFlags(cmd)
	return cmd
}

// names are objects' names for -o name.
func names(objs ...*inspect.Object) []objectName {
	out := make([]objectName, 0, len(objs))
	for _, o := range objs {
		if o != nil {
			out = append(out, objectName{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
		}
	}
	return out
}

// treeNames names a tree's objects: its owners, itself, its dependents.
func treeNames(t *inspect.TreeNode) []objectName {
	var out []objectName
	var walk func(n *inspect.TreeNode)
	walk = func(n *inspect.TreeNode) {
		if n == nil {
			return
		}
		for _, o := range n.Owners {
			walk(o)
		}
		out = append(out, names(n.Object)...)
		for _, d := range n.Dependents {
			walk(d)
		}
	}
	walk(t)
	return out
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ExecuteInspect runs one inspection command (args as on the command line,
// e.g. "tree", "cm/x") with deps, writing to stdout and stderr. It is the
// in-process entry point for embedders and tests.
func ExecuteInspect(ctx context.Context, deps InspectDeps, args []string, stdout, stderr io.Writer) error {
	root := &cobra.Command{Use: "kgc", SilenceUsage: true, SilenceErrors: true}
	AddInspectCommands(root, deps)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}
