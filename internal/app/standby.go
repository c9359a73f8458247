package app

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
)

// standby tracks whether this replica collects or stands by for the Lease.
// A standby is healthy and ready to take over, so it reports ready: were it
// not, a Deployment could never roll out (the new Pod starts as a standby
// while the old leader holds the Lease).
type standby struct {
	enabled    bool // leader election is on
	collecting atomic.Bool
}

// collect wraps the collector's run to record that this replica leads.
func (s *standby) collect(run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		s.collecting.Store(true)
		defer s.collecting.Store(false)
		return run(ctx)
	}
}

// standingBy reports whether this replica waits for the Lease.
func (s *standby) standingBy() bool { return s.enabled && !s.collecting.Load() }

// readiness answers /readyz for a standby; everything else, and /readyz on
// the leader (ready once its monitors synced), goes to next.
func (s *standby) readiness(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !s.standingBy() {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprint(w, "[+]leader-election ok (standby: another replica holds the lease)\nreadyz check passed\n")
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
