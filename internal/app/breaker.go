package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/pkg/kgc"
)

// The flags shadow mode turns off unless they are given.
const (
	flagDeletionBreaker = "deletion-breaker"
	flagHoldRestored    = "hold-restored-references"
)

// BreakerRunOptions are the flags of `kgc run` for the circuit breaker
// and the restore-signature hold.
type BreakerRunOptions struct {
	Enabled          bool
	Window           time.Duration
	UnobservedOwners int
	VanishedMinimum  int
	Rollback         bool
	DanglingFraction float64
	DanglingMinimum  int
	HoldRestored     bool
}

// NewBreakerRunOptions returns `kgc run`'s defaults: the breaker and the
// restore hold on (docs/operator/breaker.md: why, and why these thresholds).
func NewBreakerRunOptions() BreakerRunOptions {
	d := kgc.DefaultBreakerOptions()
	return BreakerRunOptions{Enabled: true, Window: d.Window, UnobservedOwners: d.UnobservedOwners, VanishedMinimum: d.VanishedMinimum,
		Rollback: d.Rollback, DanglingFraction: d.DanglingFraction, DanglingMinimum: d.DanglingMinimum, HoldRestored: true}
}

// AddFlags registers the options on fs.
func (o *BreakerRunOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, flagDeletionBreaker, o.Enabled, "Stop deleting objects whose owners are gone, until an operator resumes (kgc breaker resume), on evidence of a fault: a restore, an API answering wrongly, a rollback of the API's storage (see --breaker-*). Never on the volume of ordinary deletions. A trip is recorded on the leader-election Lease (--leader-elect-resource-*), so a restart does not resume it.")
	fs.DurationVar(&o.Window, "breaker-window", o.Window, "The sliding window over which the deletion breaker counts owners (--breaker-unobserved-owners, --breaker-dangling-fraction).")
	fs.IntVar(&o.UnobservedOwners, "breaker-unobserved-owners", o.UnobservedOwners, "The restore signature: how many distinct owners kgc never observed alive (a quorum read found nothing, or another object, at a UID its graph never held) the deletions of objects that appeared while kgc watched (created or restored after kgc listed their resource) may rest on in one window; one more trips the breaker, which then holds every deletion resting on an owner never observed alive. Objects already there when kgc started (a backlog whose owners went while no collector ran), or found by a relist after kgc's watch lost the storage's history, are not counted, nor owners of a kind whose watch is down or was relisted after a lost history within the window (kgc could not have seen them). 0 turns the signal off.")
	fs.IntVar(&o.VanishedMinimum, "breaker-vanished-minimum", o.VanishedMinimum, "An API answering wrongly: when a complete list of a resource finds none of its objects (an empty list, or 404 while discovery serves it) and at least this many of them went without kgc seeing their deletion coming (no DELETED event, no deletionTimestamp, no terminating namespace, no CRD being deleted), hold the deletions resting on owners of that resource. 0 turns the signal off.")
	fs.BoolVar(&o.Rollback, "breaker-rollback", o.Rollback, "A rollback of the API's storage (an etcd restore under a running kgc): hold every deletion resting on a gone owner once an object is observed in a state its own history cannot reach (its resourceVersion went back, its deletionTimestamp went away, it came back after kgc saw it deleted).")
	fs.Float64Var(&o.DanglingFraction, "breaker-dangling-fraction", o.DanglingFraction, "Trip the breaker, holding every deletion resting on a gone owner, when the owners found gone in one window whose deletion kgc did not observe (distinct owners, each with a dependent to delete) exceed this fraction of the graph and --breaker-dangling-minimum. Volume is no evidence of a fault: 0 (off) by default.")
	fs.IntVar(&o.DanglingMinimum, "breaker-dangling-minimum", o.DanglingMinimum, "The fewest owners found gone in one window that can trip --breaker-dangling-fraction.")
	fs.BoolVar(&o.HoldRestored, flagHoldRestored, o.HoldRestored, "Hold, instead of deleting, a dependent whose owner reference names a UID kgc never observed while an object of that kind and name exists with another UID (the restore signature); kgc relink rewrites such references on request.")
}

// Validate returns every problem with the options.
func (o *BreakerRunOptions) Validate() []error {
	var errs []error
	if b := o.lib(LeaderElectionOptions{}); b != nil {
		if err := b.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--breaker-*: %w", err))
		}
	}
	return errs
}

// lib returns the library's options: the breaker keeps its state on the
// leader-election Lease (also without leader election: see
// kgc.BreakerOptions). nil when the breaker is off.
func (o *BreakerRunOptions) lib(le LeaderElectionOptions) *kgc.BreakerOptions {
	if !o.Enabled {
		return nil
	}
	return &kgc.BreakerOptions{Window: o.Window, UnobservedOwners: o.UnobservedOwners, VanishedMinimum: o.VanishedMinimum,
		Rollback: o.Rollback, DanglingFraction: o.DanglingFraction, DanglingMinimum: o.DanglingMinimum,
		LeaseNamespace: le.ResourceNamespace, LeaseName: le.ResourceName}
}

// leaseStore is the breaker's state on kgc's Lease: --lease-name in
// --lease-namespace, or in the first of leaseNamespaces that has it. found
// is false when no namespace has it; ns is then where it was looked for.
func (o *inspectOptions) leaseStore(ctx context.Context, deps InspectDeps) (st *breaker.LeaseStore, ns string, found bool, err error) {
	cfg, err := o.restConfig(deps)
	if err != nil {
		return nil, "", false, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", false, err
	}
	ns, _, lerr := o.kgc.lease(ctx, cs)
	switch {
	case lerr == nil:
		found = true
	case o.kgc.leaseNamespace != "":
		ns = o.kgc.leaseNamespace
	default:
		ns = strings.Join(leaseNamespaces, " or ")
	}
	if lerr != nil && !allNotFound(lerr) {
		return nil, ns, false, lerr
	}
	return &breaker.LeaseStore{Client: cs.CoordinationV1(), Namespace: ns, Name: o.kgc.leaseName}, ns, found, nil
}

// allNotFound reports whether every error joined in err is a NotFound.
func allNotFound(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !apierrors.IsNotFound(e) {
				return false
			}
		}
		return true
	}
	return apierrors.IsNotFound(err)
}

// newBreakerCommand returns `kgc breaker status|resume`.
func newBreakerCommand(deps InspectDeps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "breaker",
		Short: "Show or resume kgc's circuit breaker for mass deletions",
		Long: "kgc's circuit breaker stops deletions resting on gone owners when they look like a restore or a broken API (kgc run --deletion-breaker). " +
			"Its trips are recorded on kgc's Lease (annotation " + breaker.AnnotationTrips + "); an operator resumes them by writing the annotation " + breaker.AnnotationResume + " there, which `kgc breaker resume` does.",
	}
	cmd.AddCommand(newBreakerStatusCommand(deps), newBreakerResumeCommand(deps))
	return cmd
}

func newBreakerStatusCommand(deps InspectDeps) *cobra.Command {
	o := newInspectOptions()
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the breaker's trips (from kgc's Lease) and, with --ask-kgc, what the running kgc holds",
		Example: `  kgc breaker status
  kgc breaker status --ask-kgc -o json
  kgc breaker status --kgc-url http://127.0.0.1:10258 --lease-namespace kube-system`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := contextWithTimeout(cmd.Context(), o.timeoutOrZero())
			defer cancel()
			out := breakerStatus{Lease: o.kgc.leaseNamespace + "/" + o.kgc.leaseName}
			var errs []error
			if !o.kgc.asking() || o.apiFlags || o.kgc.ask {
				st, ns, found, err := o.leaseStore(ctx, deps)
				out.Lease = ns + "/" + o.kgc.leaseName
				if err == nil && found {
					s, lease, lerr := st.Load(ctx)
					if err = lerr; err == nil {
						out.LeaseFound = lease != nil
						out.Trips, out.Resumed, out.Active = s.Trips, s.Resumed, s.Active()
					}
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("reading the Lease %s: %w", out.Lease, err))
				}
			}
			if o.kgc.asking() {
				r, err := o.fetchHolds(ctx, deps)
				if err != nil {
					errs = append(errs, err)
				} else {
					out.Running = r
				}
			}
			if len(errs) > 0 && out.Running == nil && !out.LeaseFound {
				return errors.Join(errs...)
			}
			for _, err := range errs {
				fmt.Fprintln(cmd.ErrOrStderr(), "Warning:", err)
			}
			var held []objectName
			if out.Running != nil {
				for _, h := range out.Running.Restored {
					held = append(held, objectName{APIVersion: h.APIVersion, Kind: h.Kind, Namespace: h.Namespace, Name: h.Name})
				}
			}
			return o.write(cmd.OutOrStdout(), answer{kind: "BreakerStatus", value: out, names: held, text: out.write})
		},
	}
	o.addFlags(cmd)
	return cmd
}

// contextWithTimeout bounds ctx by d, unless d is 0 (no timeout).
func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// breakerStatus is `kgc breaker status`'s answer.
type breakerStatus struct {
	Lease      string          `json:"lease"`
	LeaseFound bool            `json:"leaseFound"`
	Trips      []breaker.Trip  `json:"trips,omitempty"`
	Active     []breaker.Trip  `json:"active,omitempty"`
	Resumed    time.Time       `json:"resumed,omitzero"`
	Running    *breaker.Report `json:"running,omitempty"`
}

func (s breakerStatus) write(w io.Writer) error {
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case !s.LeaseFound && s.Running == nil:
	case !s.LeaseFound:
	case len(s.Active) == 0:
		fmt.Fprintf(w, "Lease %s: no trip held", s.Lease)
		if !s.Resumed.IsZero() {
			fmt.Fprintf(w, " (last resumed at %s)", ts(s.Resumed))
		}
		fmt.Fprintln(w)
	default:
		for _, t := range s.Active {
			fmt.Fprintf(w, "TRIPPED %s at %s: %s.\n", signalName(t), ts(t.At), t.Because())
			if t.Object != "" {
				fmt.Fprintf(w, "  It tripped on %s.\n", t.Object)
			}
		}
		ns, name, _ := strings.Cut(s.Lease, "/")
		fmt.Fprintf(w, "Resume with: kgc breaker resume --lease-namespace %s --lease-name %s\n", ns, name)
	}
	if r := s.Running; r != nil {
		if r.Breaker == nil {
			fmt.Fprintln(w, "The running kgc has no deletion breaker (--deletion-breaker=false).")
		} else {
			b := r.Breaker
			fmt.Fprintf(w, "Running kgc (window %s):\n", b.Window)
			tripped := map[breaker.Signal][]breaker.Trip{}
			for _, t := range b.Trips {
				tripped[t.Signal] = append(tripped[t.Signal], t)
			}
			for _, sig := range breaker.Signals {
				state := "ok"
				var on []string
				for _, t := range tripped[sig] {
					on = append(on, signalName(t)+" at "+ts(t.At))
				}
				if len(on) > 0 {
					state = "TRIPPED (" + strings.Join(on, ", ") + ")"
				}
				fmt.Fprintf(w, "  %-18s %-30s %s\n", sig, state, signalLimit(sig, b))
			}
			if b.Unrecorded {
				fmt.Fprintln(w, "  a trip is not recorded on the Lease yet: a restart now would forget it")
			}
			fmt.Fprintf(w, "  held: %d", b.HeldTotal)
			if b.Overflowed {
				fmt.Fprint(w, " (and more, not remembered: all re-checked on resume)")
			}
			fmt.Fprintln(w)
			for i, h := range b.Held {
				if i == statusListed {
					fmt.Fprintf(w, "    … and %d more (-o json lists them all)\n", b.HeldTotal-i)
					break
				}
				by := string(h.Signal)
				if h.Resource != "" {
					by += " (" + h.Resource + ")"
				}
				fmt.Fprintf(w, "    %s held since %s by %s\n", h.Object, ts(h.Since), by)
			}
		}
		if !r.HoldRestored {
			fmt.Fprintln(w, "Restore-signature hold: off (--hold-restored-references=false).")
		} else {
			fmt.Fprintf(w, "Held for the restore signature: %d\n", len(r.Restored))
			for i, h := range r.Restored {
				if i == statusListed {
					fmt.Fprintf(w, "    … and %d more (-o json lists them all)\n", len(r.Restored)-i)
					break
				}
				fmt.Fprintf(w, "    %s %s (uid %s): owner %s %s uid %s is gone; %s %s is now uid %s — kgc relink %s/%s -n %s\n",
					h.Kind, nsName(h.Namespace, h.Name), h.UID, h.Owner.Kind, h.Owner.Name, h.Owner.UID, h.Owner.Kind, h.Owner.Name, h.FoundUID,
					strings.ToLower(h.Kind), h.Name, h.Namespace)
			}
		}
	}
	if !s.LeaseFound && s.Running == nil {
		fmt.Fprintf(w, "Lease %s not found: no trip recorded.\n", s.Lease)
	}
	return nil
}

// signalName names a trip's signal, with its resource if it has one.
func signalName(t breaker.Trip) string {
	if t.Resource != "" {
		return string(t.Signal) + " " + t.Resource
	}
	return string(t.Signal)
}

// signalLimit says what a signal of the running kgc counts against.
func signalLimit(sig breaker.Signal, b *breaker.Status) string {
	limit := b.Limits[sig]
	switch {
	case limit == 0:
		return "off"
	case sig == breaker.Rollback:
		return "on (one piece of evidence trips it)"
	case sig == breaker.Vanished:
		return fmt.Sprintf("on (a resource's objects gone unexplained, at least %d)", limit)
	}
	return fmt.Sprintf("%d counted in the window, limit %d", b.Counts[sig], limit)
}

// statusListed is how many held objects the text of kgc breaker status
// lists (of each kind).
const statusListed = 10

func nsName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// fetchHolds reads the running kgc's holds (breaker.Path).
func (o *inspectOptions) fetchHolds(ctx context.Context, deps InspectDeps) (*breaker.Report, error) {
	conn, err := o.kgcConn(ctx, deps)
	if err != nil {
		return nil, err
	}
	u, err := url.JoinPath(strings.TrimSuffix(conn.base, "/"), breaker.Path)
	if err != nil {
		return nil, fmt.Errorf("kgc URL %q: %w", conn.base, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?limit=100000", nil)
	if err != nil {
		return nil, err
	}
	res, err := conn.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking kgc at %s: %w", conn.base, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return nil, fmt.Errorf("asking kgc at %s: %s: %s", conn.base, res.Status, strings.TrimSpace(string(body)))
	}
	var r breaker.Report
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("reading kgc's holds from %s: %w", conn.base, err)
	}
	return &r, nil
}

func newBreakerResumeCommand(deps InspectDeps) *cobra.Command {
	o := newInspectOptions()
	var at string
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume the breaker's trips: the deletions it held go, and it counts afresh",
		Long: "Writes the annotation " + breaker.AnnotationResume + " on kgc's Lease: the time of the latest trip recorded there (kgc's own clock), or --at. " +
			"Every trip at or before it is resumed; the running kgc applies it within seconds and decides the held objects again (they go without being counted again). " +
			"Needs get and update on the Lease.",
		Example: `  kgc breaker resume
  kgc breaker resume --lease-namespace kube-system --lease-name kgc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var when time.Time
			if at != "" {
				t, err := time.Parse(time.RFC3339Nano, at)
				if err != nil {
					return fmt.Errorf("--at %q: want an RFC 3339 time: %w", at, err)
				}
				when = t
			}
			ctx, cancel := contextWithTimeout(cmd.Context(), o.timeoutOrZero())
			defer cancel()
			st, ns, found, err := o.leaseStore(ctx, deps)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if !found {
				fmt.Fprintf(w, "Lease %s/%s not found: no trip to resume.\n", ns, o.kgc.leaseName)
				return nil
			}
			before, resumed, err := st.Resume(ctx, when)
			if err != nil {
				return fmt.Errorf("resuming on the Lease %s/%s: %w", ns, o.kgc.leaseName, err)
			}
			if resumed.IsZero() {
				fmt.Fprintf(w, "Lease %s/%s: no trip to resume.\n", ns, o.kgc.leaseName)
				return nil
			}
			for _, t := range before.Active() {
				if !t.At.After(resumed) {
					fmt.Fprintf(w, "Resumed %s (tripped at %s).\n", t.Signal, t.At.UTC().Format(time.RFC3339))
				}
			}
			fmt.Fprintf(w, "Wrote %s=%s on Lease %s/%s; kgc applies it within seconds.\n", breaker.AnnotationResume, resumed.UTC().Format(time.RFC3339Nano), ns, o.kgc.leaseName)
			return nil
		},
	}
	o.addFlags(cmd)
	cmd.Flags().StringVar(&at, "at", "", "Resume the trips at or before this RFC 3339 time instead of the latest one recorded.")
	return cmd
}
