package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/safety"
)

// auditor sees every DELETE kgc sends (it wraps kgc's transport) and judges
// it against the apiserver's state just before the request goes out: kgc
// may delete an object only when none of its owners is live, that is, when
// each ownerReference names an object that is gone (or has another UID) or
// that is being deleted in the foreground (a foregroundDeletion finalizer
// and a deletionTimestamp). An owner being deleted otherwise — waiting on
// another finalizer, or orphaning its dependents — still holds them, as in
// the upstream garbage collector.
//
// The judgement reads the object and its owners after kgc decided and
// before its request reaches the apiserver; since kgc's DELETE is
// preconditioned on the object's UID (and resourceVersion), and an owner
// does not come back to life, what the auditor reads is what the deletion
// acts on. Only deletions the apiserver accepts are kept (a deletion is
// recorded as it is sent, and forgotten if it fails).
type auditor struct {
	client metadata.Interface
	mapper meta.RESTMapper

	nextID    atomic.Int64
	mu        sync.Mutex
	deletions map[string][]deletion // namespace → kgc's deletions: accepted, or in flight
}

// deletion is one DELETE kgc sent and the apiserver accepted (or has not
// answered yet: status 0).
type deletion struct {
	id        int64
	at        time.Time
	resource  schema.GroupVersionResource
	namespace string
	name      string
	uid       types.UID // the object's UID as read by the auditor ("" if gone)
	policy    string
	status    int
	// problem says why the deletion was wrong; "" when it was right.
	problem string
	// object is the object's metadata as the auditor read it.
	object string
}

func (d deletion) String() string {
	s := fmt.Sprintf("%s %s %s/%s (uid %s, policy %s) → %d; object %s",
		d.at.Format("15:04:05.000"), d.resource.Resource, d.namespace, d.name, d.uid, d.policy, d.status, d.object)
	if d.problem != "" {
		s += ": " + d.problem
	}
	return s
}

func newAuditor(client metadata.Interface, mapper meta.RESTMapper) *auditor {
	return &auditor{client: client, mapper: mapper, deletions: map[string][]deletion{}}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap is a rest.Config WrapTransport.
func (a *auditor) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodDelete {
			return next.RoundTrip(req)
		}
		d := a.judge(req)
		// Recorded before it is sent: a test may see the object gone
		// before the response is back.
		d.id = a.nextID.Add(1)
		a.mu.Lock()
		a.deletions[d.namespace] = append(a.deletions[d.namespace], d)
		a.mu.Unlock()
		resp, err := next.RoundTrip(req)
		status := -1
		if err == nil {
			status = resp.StatusCode
		}
		a.settle(d.namespace, d.id, status)
		return resp, err
	})
}

// settle records the answer to the deletion id, and forgets the deletion
// unless the apiserver accepted it.
func (a *auditor) settle(ns string, id int64, status int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ds := a.deletions[ns]
	for i := range ds {
		if ds[i].id == id {
			if status < 200 || status >= 300 {
				a.deletions[ns] = slices.Delete(ds, i, i+1)
			} else {
				ds[i].status = status
			}
			return
		}
	}
}

// judge reads the object req deletes and its owners, and says whether the
// deletion would be right.
func (a *auditor) judge(req *http.Request) deletion {
	d := deletion{at: time.Now()}
	var opts metav1.DeleteOptions
	if req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(body)
			body.Close()
			if len(bytes.TrimSpace(b)) > 0 {
				if err := json.Unmarshal(b, &opts); err != nil {
					// kgc's metadata client sends JSON.
					d.problem = "the auditor cannot read the DeleteOptions: " + err.Error()
				}
			}
		}
	}
	if opts.PropagationPolicy != nil {
		d.policy = string(*opts.PropagationPolicy)
	}
	var collection bool
	d.resource, d.namespace, d.name, collection = parsePath(req.URL.Path)
	if collection || d.name == "" {
		d.problem = join(d.problem, "kgc deleted a collection: "+req.URL.String())
		return d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := a.resource(d.resource, d.namespace).Get(ctx, d.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		d.object = "<absent>"
		return d
	case err != nil:
		d.problem = "the auditor could not read the object: " + err.Error()
		return d
	}
	d.uid, d.object = m.UID, safety.Describe(m)
	if opts.Preconditions != nil && opts.Preconditions.UID != nil && *opts.Preconditions.UID != m.UID {
		return d // the precondition fails: nothing is deleted
	}
	if opts.Preconditions == nil || opts.Preconditions.UID == nil {
		d.problem = join(d.problem, "no UID precondition")
	}
	if len(m.OwnerReferences) == 0 {
		d.problem = join(d.problem, "the object has no ownerReferences")
	}
	for _, ref := range m.OwnerReferences {
		if live := a.liveOwner(ctx, d.namespace, ref); live != "" {
			d.problem = join(d.problem, live)
		}
	}
	return d
}

// liveOwner returns why the owner ref names holds its dependent, or ""
// when it does not (it is gone, has another UID, or is being deleted in
// the foreground).
func (a *auditor) liveOwner(ctx context.Context, namespace string, ref metav1.OwnerReference) string {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return fmt.Sprintf("owner %s %s: bad apiVersion: %v", ref.Kind, ref.Name, err)
	}
	mapping, err := a.mapper.RESTMapping(gv.WithKind(ref.Kind).GroupKind(), gv.Version)
	if err != nil {
		return fmt.Sprintf("owner %s %s: no mapping: %v", ref.Kind, ref.Name, err)
	}
	ns := namespace
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		ns = ""
	}
	o, err := a.resource(mapping.Resource, ns).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ""
	case err != nil:
		return fmt.Sprintf("owner %s %s: the auditor could not read it: %v", ref.Kind, ref.Name, err)
	case o.UID != ref.UID:
		return ""
	case o.DeletionTimestamp != nil && slices.Contains(o.Finalizers, metav1.FinalizerDeleteDependents):
		return ""
	}
	return fmt.Sprintf("owner %s %s (uid %s) is live: %s", ref.Kind, ref.Name, ref.UID, safety.Describe(o))
}

func (a *auditor) resource(gvr schema.GroupVersionResource, ns string) metadata.ResourceInterface {
	if ns == "" {
		return a.client.Resource(gvr)
	}
	return a.client.Resource(gvr).Namespace(ns)
}

// in returns kgc's deletions in namespace ns so far, with those in flight.
func (a *auditor) in(ns string) []deletion {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.deletions[ns])
}

// problems returns kgc's wrong deletions in ns, and those of cluster-scoped
// objects (there should be none).
func (a *auditor) problems(ns string) []string {
	var out []string
	for _, n := range []string{ns, ""} {
		for _, d := range a.in(n) {
			if d.status != 0 && (d.problem != "" || n == "") {
				out = append(out, d.String())
			}
		}
	}
	return out
}

// deleted reports whether kgc deleted the object with uid in ns.
func (a *auditor) deleted(ns string, uid types.UID) bool {
	for _, d := range a.in(ns) {
		if d.uid == uid {
			return true
		}
	}
	return false
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// parsePath splits an API path (/api/v1/namespaces/ns/pods/name,
// /apis/apps/v1/namespaces/ns/replicasets, /api/v1/namespaces/name, …) into
// resource, namespace and name; collection is true for a path naming a
// collection.
func parsePath(path string) (gvr schema.GroupVersionResource, ns, name string, collection bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		gvr.Version, segs = segs[1], segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		gvr.Group, gvr.Version, segs = segs[1], segs[2], segs[3:]
	default:
		return gvr, "", "", true
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		ns, segs = segs[1], segs[2:]
	}
	switch len(segs) {
	case 1:
		gvr.Resource = segs[0]
		return gvr, ns, "", true
	case 0:
		return gvr, ns, "", true
	default:
		gvr.Resource, name = segs[0], segs[1]
		return gvr, ns, name, false
	}
}
