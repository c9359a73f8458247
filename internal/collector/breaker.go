package collector

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/breaker"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// judge tells the breaker the evidence of a fault that applying one event
// found (graph.Effects.Regressions, graph.Effects.Vanished). It runs on
// the graph builder's goroutine, before the workers learn what the event
// changed, so that the dependents the event re-queues meet the trip.
func (c *Collector) judge(logger klog.Logger, eff graph.Effects) {
	b := c.cfg.Breaker
	if b == nil || len(eff.Regressions) == 0 && eff.Vanished == nil {
		return
	}
	for _, r := range eff.Regressions {
		t, tripped := b.RolledBack(r.Identity.String(), "was "+r.Was+", now "+r.Now)
		if !tripped {
			continue
		}
		// What the workers remember as absent may exist again: look each
		// owner up afresh from now on, and list every resource again,
		// since a watch may have resumed past the restored history without
		// a word (the trip holds the deletions that rest on a dangling
		// owner meanwhile). Not on this goroutine: the monitors being
		// restarted may wait for it to take their last events.
		c.workers.ForgetAbsences()
		c.relistAll(logger)
		logger.Error(nil, "Deletion circuit breaker tripped: an object was observed in a state its own history cannot reach, the API's storage was rolled back; holding every deletion resting on a gone owner until an operator resumes",
			"signal", t.Signal, "object", t.Object, "evidence", t.Evidence)
		c.tripped(t)
	}
	if v := eff.Vanished; v != nil {
		group := rules.GroupOf(v.APIVersion)
		f := breaker.VanishFacts{
			Resource:        breaker.ResourceName(group, v.Kind),
			ResourceVersion: v.ResourceVersion,
			NotServed:       v.ResourceVersion == "",
			Gone:            v.Gone,
			Unexplained:     v.Unexplained,
			// The CRD that served the resource is being deleted, or is
			// gone (a CRD was seen to serve it, and the graph holds no
			// CRD of that name any more).
			ResourceRemoved: v.CRD == graph.CRDDeleting ||
				v.CRD == graph.CRDNone && v.Resource != "" && c.builder.CRDBacked(schema.GroupResource{Group: group, Resource: v.Resource}),
		}
		if !f.ResourceRemoved && v.CRD == graph.CRDLive && b.WouldVanish(f) {
			// The graph holds the CRD alive, but its monitor may lag
			// behind the resource's: a quorum read says whether the CRD
			// that served the objects is still there.
			f.ResourceRemoved = c.crdGone(logger, v)
		}
		if t, tripped := b.Vanish(f); tripped {
			logger.Error(nil, "Deletion circuit breaker tripped: a complete list found none of a resource's objects, and kgc saw none of their deletions coming; holding every deletion resting on a gone owner of that resource until an operator resumes",
				"signal", t.Signal, "resource", t.Resource, "gone", f.Gone, "unexplained", f.Unexplained, "evidence", t.Evidence)
			c.tripped(t)
		} else if f.Gone > 0 {
			logger.V(2).Info("A complete list found none of a resource's objects; not evidence of a fault",
				"resource", f.Resource, "gone", f.Gone, "unexplained", f.Unexplained, "resourceRemoved", f.ResourceRemoved)
		}
	}
}

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdGoneAttempts is how many times crdGone reads the CRD before it takes
// the read's failure as no explanation.
const crdGoneAttempts = 3

// crdGone reports whether a quorum read shows that the CRD the graph
// holds alive for v's resource (v.CRDUID) is gone or being deleted: no
// CRD of that name, one being deleted, or one with another UID (the CRD
// was deleted and created again). kube-apiserver deletes a CRD's
// instances only once the CRD is being deleted, and answers their LIST
// 404 only once it is gone, so the CRD's state, read after the list, tells
// an ordinary CRD deletion whose events the CRD monitor has not delivered
// yet from an API answering wrongly. A read that fails explains nothing
// (the vanish trips). It runs on the graph builder's goroutine, before the
// workers learn of the vanish: one read per vanish that would trip.
func (c *Collector) crdGone(logger klog.Logger, v *graph.Vanish) bool {
	ctx := c.runCtx
	if ctx == nil {
		return false
	}
	name := v.Resource + "." + rules.GroupOf(v.APIVersion)
	var err error
	for range crdGoneAttempts {
		var crd *metav1.PartialObjectMetadata
		crd, err = c.cfg.Metadata.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true
		case err == nil:
			return crd.UID != v.CRDUID || crd.DeletionTimestamp != nil
		case ctx.Err() != nil:
			return false
		}
	}
	logger.Error(err, "Reading the CRD of a resource whose objects all vanished; taking their going as unexplained", "crd", name)
	return false
}

// relistAll lists every monitored resource again, in the background,
// once per rollback trip.
func (c *Collector) relistAll(logger klog.Logger) {
	ctx := c.runCtx
	if ctx == nil {
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		n := c.builder.RelistAll(ctx)
		logger.Info("Listing every resource again after a rollback of the API's storage", "monitors", n)
	}()
}

// tripped tells the collector's owner of a trip.
func (c *Collector) tripped(t breaker.Trip) {
	if c.cfg.OnTrip != nil {
		c.cfg.OnTrip(t)
	}
}
