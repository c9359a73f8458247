package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/internal/apiops"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/rules"
)

// relinkTarget is one dependent to relink: where it is, and optionally
// which reference (ownerUID) and to which object (foundUID, when kgc held
// it for that one).
type relinkTarget struct {
	mapping         *meta.RESTMapping
	namespace, name string
	ownerUID        types.UID
	foundUID        types.UID
}

// relinkChange is one reference rewritten.
type relinkChange struct {
	Index    int                   `json:"index"`
	Owner    metav1.OwnerReference `json:"owner"`
	NewOwner types.UID             `json:"newUID"`
}

// relinkResult is what relink did to one dependent.
type relinkResult struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Resource   string         `json:"resource"`
	Namespace  string         `json:"namespace,omitempty"`
	Name       string         `json:"name"`
	UID        types.UID      `json:"uid"`
	Changes    []relinkChange `json:"changes"`
	Written    bool           `json:"written"`
}

// relinker rewrites the ownerReferences of dependents from gone UIDs to
// the UIDs of the objects now at those references' kind, namespace and
// name.
type relinker struct {
	mapper meta.RESTMapper
	md     metadata.Interface
	ops    *apiops.Ops
}

// errNothingToRelink: the dependent names no gone UID whose kind and name
// hold another object.
var errNothingToRelink = errors.New("nothing to relink")

// relink plans and (unless dryRun) writes one dependent's relink.
//
// What the write rests on: the dependent's ownerReferences and UID as just
// read (the JSON patch tests both, as kgc's own reference writes do, so a
// dependent changed meanwhile fails with a conflict and nothing is
// written), and for each rewritten reference a quorum GET just before,
// which found exactly one object at the reference's coordinates, with
// another UID, not being deleted. The operator asked for the rewrite; kgc
// never makes it on its own.
func (r *relinker) relink(ctx context.Context, t relinkTarget, dryRun bool) (relinkResult, error) {
	res := relinkResult{APIVersion: t.mapping.GroupVersionKind.GroupVersion().String(), Kind: t.mapping.GroupVersionKind.Kind,
		Resource: t.mapping.Resource.GroupResource().String(), Namespace: t.namespace, Name: t.name}
	dep, err := r.get(ctx, t.mapping.Resource, t.namespace, t.name)
	if err != nil {
		return res, err
	}
	res.UID = dep.UID
	id := rules.Identity{APIVersion: t.mapping.GroupVersionKind.GroupVersion().String(), Kind: t.mapping.GroupVersionKind.Kind,
		Namespace: dep.Namespace, Name: dep.Name, UID: dep.UID}
	if t.ownerUID != "" && !slices.ContainsFunc(dep.OwnerReferences, func(ref metav1.OwnerReference) bool { return ref.UID == t.ownerUID }) {
		return res, fmt.Errorf("%s %s has no owner reference with uid %s: %w", res.Resource, nsName(t.namespace, t.name), t.ownerUID, errNothingToRelink)
	}
	refs := slices.Clone(dep.OwnerReferences)
	for i := range refs {
		ref := &refs[i]
		if t.ownerUID != "" && ref.UID != t.ownerUID {
			continue
		}
		named := t.ownerUID != ""
		m, merr := rules.OwnerMapping(r.mapper, ref.APIVersion, ref.Kind)
		c, _, why, done := rules.Locate(id, ref, m, merr)
		if done {
			if named {
				return res, fmt.Errorf("owner reference %s %s cannot be resolved (%s): nothing to relink it to", ref.Kind, ref.Name, why)
			}
			continue
		}
		owner, err := r.get(ctx, m.Resource, c.Namespace, ref.Name)
		switch {
		case apierrors.IsNotFound(err):
			if named {
				return res, fmt.Errorf("no %s %s exists: nothing to relink the reference to (restore its owner first, or delete the dependent)", ref.Kind, nsName(c.Namespace, ref.Name))
			}
			continue
		case err != nil:
			return res, err
		case owner.UID == ref.UID:
			if named {
				return res, fmt.Errorf("%s %s still has uid %s: the reference is not dangling", ref.Kind, nsName(c.Namespace, ref.Name), ref.UID)
			}
			continue
		case owner.DeletionTimestamp != nil:
			return res, fmt.Errorf("%s %s (uid %s) is being deleted: refusing to relink to it", ref.Kind, nsName(c.Namespace, ref.Name), owner.UID)
		case t.foundUID != "" && owner.UID != t.foundUID:
			return res, fmt.Errorf("%s %s is now uid %s, not %s as kgc found it: check it and relink it by name", ref.Kind, nsName(c.Namespace, ref.Name), owner.UID, t.foundUID)
		case slices.ContainsFunc(dep.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == owner.UID }):
			return res, fmt.Errorf("%s %s already references %s %s (uid %s): refusing to name it twice", res.Resource, nsName(t.namespace, t.name), ref.Kind, ref.Name, owner.UID)
		}
		res.Changes = append(res.Changes, relinkChange{Index: i, Owner: *ref, NewOwner: owner.UID})
		ref.UID = owner.UID
	}
	if len(res.Changes) == 0 {
		return res, fmt.Errorf("%s %s: %w: no owner reference names a gone UID whose kind and name hold another object", res.Resource, nsName(t.namespace, t.name), errNothingToRelink)
	}
	if dryRun {
		return res, nil
	}
	_, err = r.ops.ReplaceOwnerReferences(ctx, apiops.Target{Resource: t.mapping.Resource, Namespace: dep.Namespace, Name: dep.Name,
		UID: dep.UID, ResourceVersion: dep.ResourceVersion}, dep.OwnerReferences, refs)
	if err != nil {
		if apiops.IsStale(err) {
			return res, fmt.Errorf("%s %s changed while relinking (nothing written): run again: %w", res.Resource, nsName(t.namespace, t.name), err)
		}
		return res, err
	}
	res.Written = true
	return res, nil
}

func (r *relinker) get(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*metav1.PartialObjectMetadata, error) {
	if ns == "" {
		return r.md.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	}
	return r.md.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

func (res relinkResult) write(w io.Writer) {
	for _, c := range res.Changes {
		fmt.Fprintf(w, "%s %s (uid %s): ownerReferences[%d] %s %s: uid %s -> %s", res.Resource, nsName(res.Namespace, res.Name), res.UID,
			c.Index, c.Owner.Kind, c.Owner.Name, c.Owner.UID, c.NewOwner)
		if res.Written {
			fmt.Fprintln(w, " (relinked)")
		} else {
			fmt.Fprintln(w, " (dry run: not written)")
		}
	}
}

func newRelinkCommand(deps InspectDeps) *cobra.Command {
	o := newInspectOptions()
	var ownerUID string
	var dryRun, allHeld bool
	cmd := &cobra.Command{
		Use:   "relink [-n NAMESPACE] (KIND/NAME [--owner-uid UID] | --all-held --ask-kgc)",
		Short: "Rewrite owner references from gone UIDs to the objects now at the same kind and name (after a restore)",
		Long: "A restore recreates owners with new UIDs while their dependents still name the old ones; kgc holds such dependents instead of deleting them (kgc run --hold-restored-references). " +
			"kgc relink rewrites such a reference, on your request only, to the UID of the object now at the reference's kind, namespace and name, with a JSON patch that tests the dependent's UID and ownerReferences as read. " +
			"It refuses when the kind and name do not resolve to exactly one object, or to one being deleted. --all-held relinks every object a running kgc holds for the restore signature.",
		Example: `  kgc relink -n shop replicaset/web-7d9c --dry-run
  kgc relink -n shop replicaset/web-7d9c --owner-uid 2f1e…
  kgc relink --all-held --ask-kgc`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if allHeld == (len(args) > 0) {
				return errors.New("give either KIND/NAME or --all-held")
			}
			if allHeld && !o.kgc.asking() {
				return errors.New("--all-held reads the held objects from the running kgc: give --ask-kgc (or --kgc-url)")
			}
			cfg, err := o.restConfig(deps)
			if err != nil {
				return err
			}
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return err
			}
			md, err := metadata.NewForConfig(cfg)
			if err != nil {
				return err
			}
			r := &relinker{mapper: mapperFor(dc), md: md, ops: &apiops.Ops{Client: md}}
			ctx := cmd.Context()
			var targets []relinkTarget
			if allHeld {
				rep, err := o.fetchHolds(ctx, deps)
				if err != nil {
					return err
				}
				for _, h := range rep.Restored {
					gv, err := schema.ParseGroupVersion(h.APIVersion)
					if err != nil {
						return err
					}
					m, err := r.mapper.RESTMapping(gv.WithKind(h.Kind).GroupKind(), gv.Version)
					if err != nil {
						return fmt.Errorf("mapping %s %s: %w", h.APIVersion, h.Kind, err)
					}
					targets = append(targets, relinkTarget{mapping: m, namespace: h.Namespace, name: h.Name, ownerUID: h.Owner.UID, foundUID: h.FoundUID})
				}
				if len(targets) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "kgc holds nothing for the restore signature.")
					return nil
				}
			} else {
				kind, name, err := inspect.ParseTarget(args)
				if err != nil {
					return err
				}
				m, err := inspect.KindMapping(r.mapper, kind)
				if err != nil {
					return err
				}
				ns, _ := o.namespace()
				if m.Scope.Name() != meta.RESTScopeNameNamespace {
					ns = ""
				}
				targets = append(targets, relinkTarget{mapping: m, namespace: ns, name: name, ownerUID: types.UID(ownerUID)})
			}
			var results []relinkResult
			var errs []error
			for _, t := range targets {
				res, err := r.relink(ctx, t, dryRun)
				if allHeld && errors.Is(err, errNothingToRelink) {
					// Relinked (or changed) since kgc reported it.
					fmt.Fprintf(cmd.ErrOrStderr(), "skipped: %v\n", err)
					continue
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				results = append(results, res)
				if o.outputText() {
					res.write(cmd.OutOrStdout())
				}
			}
			if !o.outputText() {
				relinked := make([]objectName, 0, len(results))
				for _, r := range results {
					relinked = append(relinked, objectName{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name})
				}
				if results == nil {
					results = []relinkResult{}
				}
				if err := o.write(cmd.OutOrStdout(), answer{kind: "RelinkResultList", value: results, names: relinked}); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&ownerUID, "owner-uid", "", "Relink only the reference with this (gone) UID. Default: every reference whose UID is gone while its kind and name hold another object.")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "Print what would change; write nothing.")
	cmd.Flags().BoolVar(&allHeld, "all-held", false, "Relink every object the running kgc (--ask-kgc, --kgc-url) holds for the restore signature (each checked again before it is written).")
	return cmd
}
