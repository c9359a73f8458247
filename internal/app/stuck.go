package app

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/internal/rules"
)

// DefaultOlderThan is `kgc stuck --older-than`'s default.
const DefaultOlderThan = 5 * time.Minute

func newStuckCommand(deps InspectDeps) *cobra.Command {
	o := newInspectOptions()
	var olderThan time.Duration
	var allNamespaces bool
	cmd := &cobra.Command{
		Use:   "stuck",
		Short: "Which deletions have not finished, and why? Cluster-wide, grouped by root cause",
		Long: "Stuck lists every object whose deletion (deletionTimestamp) has not finished after --older-than, grouped by root cause " +
			"as kgc's rules find it: a finalizer no collector removes (named); a Foreground deletion waiting for a chain of blocking " +
			"dependents that ends in one (the chain shown), or in a dependent kgc keeps because an owner kind is not served, an " +
			"owner reference is invalid, or a keep-rule; an orphan or foregroundDeletion finalizer kgc holds because a resource " +
			"cannot be listed (a failing monitor); a graceful deletion the apiserver has not finished; or work kgc would do now. " +
			"It lists every deletable resource from the API server (all namespaces, and cluster-scoped objects, unless -n is given), or asks the " +
			"running kgc with --ask-kgc or --kgc-url (one request for the stuck objects' part of its graph). It never writes.",
		Example: "  kgc stuck\n  kgc stuck --older-than=1h -o json\n  kgc stuck -n shop --ask-kgc\n  kubectl kgc stuck --context prod -o name",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan < 0 {
				return fmt.Errorf("--older-than must not be negative, got %s", olderThan)
			}
			ns, explicit := o.namespace()
			if allNamespaces && explicit {
				return errors.New("-A/--all-namespaces and -n/--namespace exclude each other")
			}
			// Cluster-wide unless a namespace is asked for.
			if !explicit {
				ns = ""
			}
			v, _, err := o.view(cmd.Context(), deps)
			if err != nil {
				return err
			}
			src, ok := v.(inspect.StuckSource)
			if !ok {
				return errors.New("this view cannot list deleting objects")
			}
			r, err := inspect.Stuck(cmd.Context(), rules.Policy{}, src, inspect.StuckOptions{OlderThan: olderThan, Namespace: ns})
			if err != nil {
				return err
			}
			notSyncedWarning(cmd, v)
			var stuck []objectName
			for _, g := range r.Groups {
				for _, so := range g.Objects {
					stuck = append(stuck, names(so.Object)...)
				}
			}
			return o.write(cmd.OutOrStdout(), answer{kind: "StuckReport", value: r, names: stuck,
				text: func(w io.Writer) error { return inspect.WriteStuck(w, r) }})
		},
	}
	o.addFlags(cmd)
	cmd.Flags().Lookup("namespace").Usage = "Only objects in this namespace. Default: every namespace, and cluster-scoped objects."
	cmd.Flags().DurationVar(&olderThan, "older-than", DefaultOlderThan, "Report deletions asked for at least this long ago.")
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Every namespace and cluster-scoped objects (the default without -n).")
	return cmd
}
