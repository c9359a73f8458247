package inspect

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

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/shadow"
)

// ErrNoHistory is returned (wrapped) when the kgc asked keeps no write
// history (--write-history-size=0, or a kgc without one).
var ErrNoHistory = errors.New("kgc keeps no write history")

// maxHistoryBytes bounds one history response.
const maxHistoryBytes = 64 << 20

// History reads the records of a running kgc's writes that f selects
// (history.Path), oldest first.
func (s *ServerView) History(ctx context.Context, f history.Filter) (*history.Page, error) {
	q := url.Values{}
	for k, v := range map[string]string{"uid": string(f.UID), "namespace": f.Namespace, "name": f.Name} {
		if v != "" {
			q.Set(k, v)
		}
	}
	u, body, err := s.getJSON(ctx, history.Path, q, maxHistoryBytes, ErrNoHistory)
	if herr := (*httpError)(nil); errors.As(err, &herr) && herr.code == http.StatusNotFound {
		return nil, fmt.Errorf("%w: GET %s: %s", ErrNoHistory, herr.url, herr.body)
	}
	if err != nil {
		return nil, err
	}
	var p history.Page
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", u, err)
	}
	return &p, nil
}

// Gone answers "what happened to this object?" for one that no longer
// exists, from kgc's record of its writes.
type Gone struct {
	// Object as kgc recorded it (nil: kgc has no record of it).
	Object *history.Object `json:"object,omitempty"`
	// DeletedByKGC: kgc's last DELETE of it succeeded.
	DeletedByKGC bool `json:"deletedByKGC"`
	// Deletion is that DELETE's record.
	Deletion *history.Record `json:"deletion,omitempty"`
	// Records: every write kgc remembers making to it, oldest first.
	Records []history.Record `json:"records"`
	// Summary says it in a sentence.
	Summary string `json:"summary"`
	// Shadow: a kgc in shadow mode's latest disagreements with the
	// cluster's collector about the object.
	Shadow []shadow.Disagreement `json:"shadowDisagreements,omitempty"`
}

// ExplainGone asks the kgc at s what it wrote to the object that kind,
// namespace and name named (a cluster-scoped kind's objects match in any
// namespace asked for).
func ExplainGone(ctx context.Context, s *ServerView, kind, namespace, name string) (*Gone, error) {
	match, err := s.kindMatcher(kind)
	if err != nil {
		return nil, err
	}
	p, err := s.History(ctx, history.Filter{Name: name})
	if err != nil {
		return nil, err
	}
	g := &Gone{Records: []history.Record{}}
	var uid string
	deletion := -1 // index in g.Records of the last DELETE
	for i := range p.Records {
		r := p.Records[i]
		o := r.Object
		if !match(o.APIVersion, o.Kind) || (o.Namespace != "" && o.Namespace != namespace) {
			continue
		}
		// Several objects may have had the name over time: the newest
		// one's records.
		if string(o.UID) != uid {
			uid, g.Records, deletion = string(o.UID), g.Records[:0], -1
		}
		g.Records = append(g.Records, r)
		if r.Operation == history.OpDelete {
			deletion = len(g.Records) - 1
		}
	}
	if len(g.Records) == 0 {
		g.Summary = fmt.Sprintf("kgc has no record of writing to %s %q%s", kind, name, inNamespace(namespace))
		if p.Dropped > 0 {
			g.Summary += fmt.Sprintf(" (its history keeps the last %d writes; %d older ones are gone)", p.Size, p.Dropped)
		}
		return g, nil
	}
	if deletion >= 0 {
		d := g.Records[deletion]
		g.Deletion, g.DeletedByKGC = &d, d.Outcome == history.OutcomeSuccess
	}
	last := g.Records[len(g.Records)-1]
	g.Object = &last.Object
	if g.Shadow, err = s.ShadowDisagreements(ctx, last.Object.UID); err != nil {
		return nil, err
	}
	switch {
	case g.Deletion != nil && g.Deletion.Outcome == history.OutcomeShadow:
		g.Summary = shadowSummary(g.Deletion)
	case g.DeletedByKGC:
		g.Summary = fmt.Sprintf("%s deleted by kgc at %s because %s", last.Object, g.Deletion.Time.UTC().Format(time.RFC3339), g.Deletion.Because())
	case g.Deletion != nil:
		g.Summary = fmt.Sprintf("%s: kgc's last DELETE of it, at %s, answered %s; something else finished it", last.Object, g.Deletion.Time.UTC().Format(time.RFC3339), g.Deletion.Outcome)
	default:
		g.Summary = fmt.Sprintf("%s was not deleted by kgc; kgc's last write to it (%s at %s) was because %s", last.Object, last.Operation, last.Time.UTC().Format(time.RFC3339), last.Because())
	}
	return g, nil
}

// WriteGone renders g for a terminal.
func WriteGone(w io.Writer, g *Gone) error {
	var b strings.Builder
	b.WriteString(g.Summary)
	b.WriteString("\n")
	if len(g.Records) > 0 {
		b.WriteString("\nkgc's writes to it:\n")
	}
	for _, r := range g.Records {
		fmt.Fprintf(&b, "  %s  %s", r.Time.UTC().Format(time.RFC3339Nano), r.Operation)
		if r.Policy != "" {
			fmt.Fprintf(&b, " (policy %s)", r.Policy)
		}
		if r.Finalizer != "" {
			fmt.Fprintf(&b, " (finalizer %s)", r.Finalizer)
		}
		fmt.Fprintf(&b, " → %s", r.Outcome)
		if r.Error != "" {
			fmt.Fprintf(&b, ": %s", r.Error)
		}
		fmt.Fprintf(&b, "\n    why: %s\n    preconditions: %s\n", r.Reason, r.Preconditions)
		for _, o := range r.Owners {
			fmt.Fprintf(&b, "    owner %s\n", o)
		}
	}
	writeDisagreements(&b, g.Shadow)
	_, err := io.WriteString(w, b.String())
	return err
}
