package inspect

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
)

// WriteExplanation renders an explanation for people.
func WriteExplanation(w io.Writer, e *Explanation) error {
	b := &strings.Builder{}
	o := e.Object
	fmt.Fprintf(b, "%s (uid %s)\n", o, o.UID)
	fmt.Fprintf(b, "State:   %s\n", strings.Join(markers(o), " "))
	fmt.Fprintf(b, "Verdict: %s", e.Decision.Verdict)
	if e.Decision.Policy != "" {
		fmt.Fprintf(b, " (policy %s)", e.Decision.Policy)
	}
	b.WriteString("\n")
	if h := e.Hold; h != nil {
		fmt.Fprintf(b, "Held:    since %s, %s.\n         To let it go: %s.\n", h.Since.UTC().Format(time.RFC3339), h.Why, h.Action)
	}
	if len(e.Owners) == 0 {
		b.WriteString("Owners:  none\n")
	} else {
		b.WriteString("Owners:\n")
		for _, ow := range e.Owners {
			ref := ow.Reference
			block := ""
			if ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion {
				block = ", blockOwnerDeletion"
			}
			fmt.Fprintf(b, "  - %s/%s (uid %s%s): %s\n      %s\n", kindGroup(ref.APIVersion, ref.Kind), ref.Name, ref.UID, block, strings.ToUpper(ow.State), ow.Reason)
		}
	}
	b.WriteString("Why:\n")
	for _, why := range e.Decision.Why {
		fmt.Fprintf(b, "  - %s\n", why)
	}
	if len(e.UnhandledFinalizers) > 0 {
		fmt.Fprintf(b, "Pending finalizers no collector handles: %s (%s)\n", strings.Join(e.UnhandledFinalizers, ", "), unhandledNote)
	}
	if len(e.WaitingFor) > 0 {
		b.WriteString("Waiting for blocking dependents (blockOwnerDeletion=true):\n")
		for _, wt := range e.WaitingFor {
			writeWait(b, wt, 1)
		}
	}
	if len(e.StuckOn) > 0 {
		b.WriteString("Stuck on:\n")
		for _, h := range e.StuckOn {
			fmt.Fprintf(b, "  - %s: %s\n", h.Object, h.Why)
		}
	}
	if len(e.NonBlocking) > 0 {
		b.WriteString("Non-blocking dependents (kgc deletes them too, without waiting):\n")
		for _, d := range e.NonBlocking {
			fmt.Fprintf(b, "  - %s  %s\n", d, strings.Join(markers(d), " "))
		}
	}
	if len(e.Orphaning) > 0 {
		b.WriteString("Dependents that still reference it (kgc removes these references, then the orphan finalizer):\n")
		for _, d := range e.Orphaning {
			fmt.Fprintf(b, "  - %s  %s\n", d, strings.Join(markers(d), " "))
		}
	}
	writeDisagreements(b, e.Shadow)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeWait(b *strings.Builder, wt *Wait, depth int) {
	ind := strings.Repeat("  ", depth)
	fmt.Fprintf(b, "%s- %s  %s\n", ind, wt.Object, strings.Join(markers(wt.Object), " "))
	if wt.Cycle {
		fmt.Fprintf(b, "%s    (already listed above)\n", ind)
		return
	}
	verdict := wt.Decision.Verdict
	if wt.Decision.Policy != "" {
		verdict += " (policy " + wt.Decision.Policy + ")"
	}
	fmt.Fprintf(b, "%s    kgc: %s", ind, verdict)
	if len(wt.Decision.Why) > 0 {
		fmt.Fprintf(b, ": %s", strings.Join(wt.Decision.Why, "; "))
	}
	b.WriteString("\n")
	if len(wt.UnhandledFinalizers) > 0 && wt.Decision.Verdict != VerdictWaitForFinalizers {
		fmt.Fprintf(b, "%s    held by finalizer(s) %s: %s\n", ind, strings.Join(wt.UnhandledFinalizers, ", "), unhandledNote)
	}
	for _, c := range wt.WaitingFor {
		writeWait(b, c, depth+1)
	}
}

// WritePreview renders a preview for people.
func WritePreview(w io.Writer, p *Preview) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "Preview: delete %s with --cascade=%s (dry run; nothing was changed)\n\n", p.Target, strings.ToLower(p.Policy))
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEVEL\tACTION\tNAMESPACE\tOBJECT\tDETAIL")
	for _, s := range p.Steps {
		act := s.Op
		if s.Policy != "" {
			act += " (" + strings.ToLower(s.Policy) + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", s.Level, act, dash(s.Object.Namespace), s.Object.Ref(), s.Detail)
	}
	_ = tw.Flush()
	fmt.Fprintf(b, "\nDeleted (%d):\n", len(p.Deleted))
	for _, o := range p.Deleted {
		fmt.Fprintf(b, "  - %s\n", o)
	}
	fmt.Fprintf(b, "Orphaned (stay, lose their reference) (%d):\n", len(p.Orphaned))
	for _, o := range p.Orphaned {
		fmt.Fprintf(b, "  - %s\n", o)
	}
	if len(p.Blocked) > 0 {
		fmt.Fprintf(b, "Blocked (stay in deletion) (%d):\n", len(p.Blocked))
		for _, h := range p.Blocked {
			fmt.Fprintf(b, "  - %s: %s\n", h.Object, h.Why)
		}
	}
	if len(p.Kept) > 0 {
		fmt.Fprintf(b, "Kept (%d):\n", len(p.Kept))
		for _, h := range p.Kept {
			fmt.Fprintf(b, "  - %s: %s\n", h.Object, h.Why)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteTree renders a tree kubectl-style: owners above (marked ↑, their
// own owners further in), the object, its dependents below.
func WriteTree(w io.Writer, root *TreeNode) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tSTATUS\tREF")
	var up func(ns []*TreeNode, depth int)
	up = func(ns []*TreeNode, depth int) {
		for _, n := range ns {
			// Higher owners first, further indented.
			up(n.Owners, depth+1)
			writeRow(tw, n, strings.Repeat("  ", depth-1)+"↑ ")
		}
	}
	up(root.Owners, 1)
	writeRow(tw, root, "")
	var down func(ns []*TreeNode, prefix string)
	down = func(ns []*TreeNode, prefix string) {
		for i, n := range ns {
			branch, next := "├─", "│ "
			if i == len(ns)-1 {
				branch, next = "└─", "  "
			}
			writeRow(tw, n, prefix+branch)
			down(n.Dependents, prefix+next)
		}
	}
	down(root.Dependents, "")
	return tw.Flush()
}

func writeRow(tw io.Writer, n *TreeNode, prefix string) {
	ref := n.Ref
	if n.Blocking {
		if ref == "" {
			ref = "blocking"
		} else {
			ref += ",blocking"
		}
	}
	if n.Repeated {
		ref += " (shown above)"
	}
	fmt.Fprintf(tw, "%s\t%s%s\t%s\t%s\n", dash(n.Object.Namespace), prefix, n.Object.Ref(), strings.Join(n.Markers, " "), dash(ref))
}

// WriteStuck renders a stuck report for people: one table per root cause.
func WriteStuck(w io.Writer, r *StuckReport) error {
	b := &strings.Builder{}
	if r.Total == 0 {
		fmt.Fprintf(b, "No deletion has been stuck for longer than %s.\n", r.OlderThan)
	} else {
		fmt.Fprintf(b, "%d deletion(s) stuck for longer than %s, by root cause:\n", r.Total, r.OlderThan)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(b, "\n%s (%d): %s\n", strings.ToUpper(g.Reason), len(g.Objects), g.Description)
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tOBJECT\tAGE\tROOT CAUSE")
		for _, s := range g.Objects {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", dash(s.Object.Namespace), s.Object.Ref(), age(s.AgeSeconds), stuckCause(&s))
		}
		_ = tw.Flush()
	}
	if len(r.Unlisted) > 0 {
		b.WriteString("\nResources that cannot be listed (objects stuck in them are not shown):\n")
		for _, u := range r.Unlisted {
			fmt.Fprintf(b, "  - %s", u.Resource)
			if u.Error != "" {
				fmt.Fprintf(b, ": %s", u.Error)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// stuckCause is the ROOT CAUSE column: what holds it, and the chain.
func stuckCause(s *StuckObject) string {
	var what string
	switch {
	case len(s.Finalizers) > 0:
		what = "finalizer " + strings.Join(s.Finalizers, ", ")
	case len(s.Resources) > 0:
		what = "unlisted " + strings.Join(s.Resources, ", ")
	}
	if len(s.Chain) > 1 {
		refs := make([]string, len(s.Chain))
		for i, o := range s.Chain {
			refs[i] = o.Ref()
		}
		chain := strings.Join(refs, " → ")
		switch s.Reason {
		case StuckUnresolvableOwner:
			what = "owner kind not served"
		case StuckInvalidReference:
			what = "invalid owner reference"
		case StuckKeepRule:
			what = "keep-rule"
		case StuckCycle:
			what = "cycle"
		case StuckGraceful:
			what = "graceful deletion"
		case StuckPending:
			what = "kgc pending"
		}
		if what != "" {
			chain += " (" + what + ")"
		}
		what = chain
	}
	if s.OtherRoots > 0 {
		what += fmt.Sprintf(" (+%d more; see kgc explain)", s.OtherRoots)
	}
	if what == "" {
		return s.Detail
	}
	return what
}

// age renders seconds as kubectl's AGE column does.
func age(sec int64) string { return duration.HumanDuration(time.Duration(sec) * time.Second) }
