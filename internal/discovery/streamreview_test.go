package discovery

import (
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// A streaming list whose response never starts (no status line, no
// headers: an aggregated API whose backend accepted the connection and
// hangs; kube-aggregator proxies a watch without a timeout, as it is a
// long-running request) sends nothing before its end bookmark just as a
// stream that stalls after its headers does: it is given up after
// streamStall and the resource listed by pages. Before, the watchdog ran
// only once the headers had arrived, and such a monitor stayed neither
// synced nor failing for as long as the backend hung (RestartFailing
// never restarts it, Settled never holds), where the paged LIST it
// replaced got a 504 from the apiserver's request timeout.
func TestStreamListStallBeforeHeadersGivesUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	var cancelled atomic.Bool
	s := &streamServer{
		stream: func(w http.ResponseWriter, r *http.Request, n int) {
			if n > 1 {
				sw := startStream(w)
				sw.end("60")
				<-r.Context().Done()
				return
			}
			<-r.Context().Done() // never answers
			cancelled.Store(true)
		},
		list: func(w http.ResponseWriter, r *http.Request, n int) {
			answerPage(w, "42", cm("a", "7"))
		},
	}
	m, rec := streamMonitor(t, s, streamMonitorOptions{clock: clk})
	waitRequests(t, s, reqStream, 1)
	deadline := time.Now().Add(monitorTimeout)
	stepped := time.Duration(0)
	for len(s.requests(reqList)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no paged list %s after a streaming list that never answered (stepped the clock %s): requests %q, status %+v",
				monitorTimeout, stepped, s.kinds(), m.Status()[configMaps.GVR])
		}
		if clk.HasWaiters() {
			clk.Step(streamStall)
			stepped += streamStall
		}
		time.Sleep(10 * time.Millisecond)
	}
	if stepped < streamStall {
		t.Errorf("given up after %s, before streamStall", stepped)
	}
	waitUntil(t, "the hung request to be cancelled", cancelled.Load)
	waitRequests(t, s, reqWatch, 1)
	waitTrace(t, rec, "Upsert a@7 g1", "Listed g1")
	if k := s.kinds(); !slices.Equal(k, []string{reqStream, reqList, reqWatch}) {
		t.Fatalf("requests %q, want a streaming list given up, a paged list, a watch", k)
	}
}
