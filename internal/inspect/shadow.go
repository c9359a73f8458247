package inspect

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kgc-dev/kgc/internal/history"
	"github.com/kgc-dev/kgc/internal/shadow"
)

// errNotShadow: the kgc asked does not serve shadow.Path as JSON.
var errNotShadow = errors.New("kgc is not in shadow mode")

// ShadowDisagreements asks a running kgc in shadow mode (kgc run
// --dry-run) for its latest disagreements with the cluster's own
// collector about the object uid, oldest first. A kgc not in shadow mode
// has none: nil, nil.
func (s *ServerView) ShadowDisagreements(ctx context.Context, uid types.UID) ([]shadow.Disagreement, error) {
	u, body, err := s.getJSON(ctx, shadow.Path, url.Values{"uid": {string(uid)}}, maxHistoryBytes, errNotShadow)
	if herr := (*httpError)(nil); (errors.As(err, &herr) && herr.code == http.StatusNotFound) || errors.Is(err, errNotShadow) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p shadow.Page
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", u, err)
	}
	return p.Disagreements, nil
}

// writeDisagreements renders shadow mode's disagreements about one object.
func writeDisagreements(b *strings.Builder, ds []shadow.Disagreement) {
	if len(ds) == 0 {
		return
	}
	b.WriteString("Shadow mode disagreements with the cluster's garbage collector:\n")
	for _, d := range ds {
		what := d.Operation
		switch {
		case d.Finalizer != "":
			what += " (finalizer " + d.Finalizer + ")"
		case d.Owner != "":
			what += " (owner " + string(d.Owner) + ")"
		}
		fmt.Fprintf(b, "  - %s: %s, since %s\n", d.Outcome, what, d.Since.UTC().Format(time.RFC3339))
		if d.Decision != nil {
			fmt.Fprintf(b, "      kgc decided it because %s\n", d.Decision.Because())
		}
		fmt.Fprintf(b, "      the cluster: %s\n", d.Observed)
	}
}

// shadowSummary is Gone's summary when kgc's last DELETE of the object
// was decided in shadow mode.
func shadowSummary(d *history.Record) string {
	return fmt.Sprintf("%s: kgc, in shadow mode, decided to delete it at %s (and did not) because %s", d.Object, d.Time.UTC().Format(time.RFC3339), d.Because())
}
