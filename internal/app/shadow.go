package app

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// ShadowOptions are the flags of shadow mode (`kgc run --dry-run`).
type ShadowOptions struct {
	DryRun bool
	Window time.Duration
}

const flagDryRun = "dry-run"

// AddFlags registers the options on fs.
func (o *ShadowOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.DryRun, flagDryRun, o.DryRun, "Shadow mode: decide everything as usual and make no write (no DELETE, no patch, no Event). Each write kgc would have made is logged (\"Garbage collector write\" with outcome=shadow), counted (kgc_shadow_decisions_total) and kept in the write history, and compared with what the cluster's own garbage collector does within --shadow-window (kgc_shadow_agreement_total; the latest disagreements at /debug/controllers/garbage-collector-controller/shadow and in kgc explain --ask-kgc). For running beside kube-controller-manager's collector before switching to kgc; see docs/operator/migration.md. With leader election, the Lease is named after --leader-elect-resource-name plus \"-shadow\" unless that flag is given, so that a shadow kgc never holds a collecting kgc's Lease.")
	fs.DurationVar(&o.Window, "shadow-window", o.Window, "With --dry-run: how long a decision waits for the cluster to show its effect (the object deleting or gone, the references or the finalizer removed) before it counts as kgc_only, and how long a change only a garbage collector would make waits for a matching kgc decision before it counts as other_only.")
}

// shadowLeaseSuffix is appended to the default Lease name in shadow mode.
const shadowLeaseSuffix = "-shadow"

// Complete gives a shadow kgc its own Lease unless the Lease name was
// given: a shadow replica holding the Lease of the kgc that collects would
// stop that one from collecting. It also turns the deletion breaker and
// the restore hold off unless they were asked for (Validate then refuses
// them): their trips are writes (the Lease annotation, an Event), and the
// collector shadow mode is compared with holds nothing.
func (o *ShadowOptions) Complete(fs *pflag.FlagSet, le *LeaderElectionOptions, b *BreakerRunOptions) {
	if !o.DryRun {
		return
	}
	if !fs.Changed(flagLeaseName) {
		le.ResourceName += shadowLeaseSuffix
	}
	if !fs.Changed(flagDeletionBreaker) {
		b.Enabled = false
	}
	if !fs.Changed(flagHoldRestored) {
		b.HoldRestored = false
	}
}

// Validate returns every problem with the options.
func (o *ShadowOptions) Validate(namespaceLifecycle bool, b BreakerRunOptions) []error {
	var errs []error
	if o.DryRun && (b.Enabled || b.HoldRestored) {
		errs = append(errs, errors.New("--dry-run excludes --deletion-breaker and --hold-restored-references: shadow mode makes no write (a trip is recorded on the Lease), and the collector it is compared with holds nothing"))
	}
	if o.Window <= 0 {
		errs = append(errs, fmt.Errorf("--shadow-window must be positive, got %s", o.Window))
	}
	if o.DryRun && namespaceLifecycle {
		errs = append(errs, errors.New("--dry-run and --namespace-lifecycle exclude each other: shadow mode makes no write, and the namespace lifecycle is nothing but writes"))
	}
	return errs
}
