package gc

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/internal/history"
)

// A record of every write: an owner is deleted, kgc collects its
// dependent, and both the history endpoint and `kgc explain --server` for
// the gone dependent say that kgc deleted it, and why: the owner's
// deletion, observed at a resourceVersion after the owner's last one.
func TestHistoryOfACollectedDependent(t *testing.T) {
	t.Parallel()
	tc := newTestCase(t)
	rc := tc.rc("owner")
	cm := tc.configMap("dependent", withOwners(rc.ref(false)))
	owner, err := tc.get(tc.ctx, rc)
	if err != nil || owner == nil {
		t.Fatalf("get %s: %v", rc, err)
	}
	ownerRV, err := strconv.ParseUint(owner.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("owner resourceVersion %q: %v", owner.ResourceVersion, err)
	}
	tc.del(rc, background())
	tc.waitGone(cm)

	// The record is made when the DELETE returns; poll for it.
	var page history.Page
	var code int
	var body string
	err = wait.PollUntilContextTimeout(tc.ctx, pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		code, body = serve(t, history.Path+"?uid="+string(cm.uid))
		if code != http.StatusOK {
			return false, nil
		}
		page = history.Page{}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			return false, err
		}
		for _, r := range page.Records {
			if r.Operation == history.OpDelete && r.Outcome == history.OutcomeSuccess {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("GET %s?uid=%s: want a successful delete record of %s; last: %d %s (%v)", history.Path, cm.uid, cm, code, body, err)
	}
	var del history.Record
	for _, r := range page.Records {
		if r.Object.UID != cm.uid {
			t.Errorf("?uid=%s served a record of %s", cm.uid, r.Object)
		}
		if r.Operation == history.OpDelete && r.Outcome == history.OutcomeSuccess {
			del = r
		}
	}
	if del.Object.Namespace != cm.namespace || del.Object.Name != cm.name || del.Object.Kind != "ConfigMap" ||
		del.Policy != "Background" || del.Preconditions.UID != cm.uid || del.Preconditions.ResourceVersion == "" {
		t.Errorf("delete record: %+v", del)
	}
	if len(del.Owners) != 1 {
		t.Fatalf("delete record owners: %+v", del.Owners)
	}
	o := del.Owners[0]
	if o.UID != rc.uid || o.State != "dangling" || o.Evidence.Reason != "not-found" {
		t.Errorf("owner in the record: %+v, want %s dangling, not found", o, rc)
	}
	// kgc watched the owner: it knows from the watch's DELETED event (or,
	// had the watch been down, from a relist), at a resourceVersion after
	// the owner's last.
	rv, err := strconv.ParseUint(o.Evidence.ResourceVersion, 10, 64)
	if (o.Evidence.Source != "watch-deletion" && o.Evidence.Source != "relist") || err != nil || rv < ownerRV {
		t.Errorf("evidence %+v: want the owner's observed deletion at a resourceVersion >= %d", o.Evidence, ownerRV)
	}
	if !strings.Contains(o.Evidence.Summary, o.Evidence.ResourceVersion) {
		t.Errorf("evidence summary %q does not name resourceVersion %s", o.Evidence.Summary, o.Evidence.ResourceVersion)
	}

	// kgc explain, asked about the gone dependent, answers from the
	// history.
	srv := httptest.NewServer(collector.Handler())
	t.Cleanup(srv.Close)
	var out, errOut bytes.Buffer
	err = app.ExecuteInspect(tc.ctx, app.InspectDeps{}, []string{"explain", "configmap/" + cm.name, "-n", cm.namespace, "--kgc-url", srv.URL}, &out, &errOut)
	if err != nil {
		t.Fatalf("kgc explain %s: %v (%s)", cm, err, errOut.String())
	}
	want := "ConfigMap " + cm.namespace + "/" + cm.name + " (uid " + string(cm.uid) + ") deleted by kgc at "
	because := "owner ReplicationController owner (uid " + string(rc.uid) + ") was " + o.Evidence.Summary
	if got := out.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, because) {
		t.Errorf("kgc explain %s:\n%s\nwant it to start %q and say %q", cm, got, want, because)
	}
	t.Logf("kgc explain %s:\n%s", cm, out.String())
}
