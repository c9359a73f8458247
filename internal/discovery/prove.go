package discovery

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// crdResource is the resource of CustomResourceDefinitions.
var crdResource = schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}

// noteCRD records the resource a CRD named <plural>.<group> serves, and
// counts an observation of the CRD alive (not being deleted).
func (m *Monitors) noteCRD(name string, alive bool) {
	plural, group, ok := strings.Cut(name, ".")
	if !ok {
		return
	}
	gr := schema.GroupResource{Group: group, Resource: plural}
	m.crdMu.Lock()
	m.crdBacked[gr] = true
	if alive {
		m.crdLive[gr]++
	}
	m.crdMu.Unlock()
}

// crdLiveSeq returns how many times gr's CRD was observed alive.
func (m *Monitors) crdLiveSeq(gr schema.GroupResource) uint64 {
	m.crdMu.Lock()
	defer m.crdMu.Unlock()
	return m.crdLive[gr]
}

func (m *Monitors) wasCRDBacked(gr schema.GroupResource) bool {
	m.crdMu.Lock()
	defer m.crdMu.Unlock()
	return m.crdBacked[gr]
}

// CRDBacked reports whether a CRD was observed to serve gr (its objects
// vanish with it when it is deleted).
func (m *Monitors) CRDBacked(gr schema.GroupResource) bool { return m.wasCRDBacked(gr) }

// A prover proves that a resource which vanished from discovery holds no
// object any more, and then removes its objects from the graph.
type prover struct {
	cancel context.CancelFunc
}

// startProver starts proving that r's group and kind are gone. Caller
// holds mu.
func (m *Monitors) startProver(ctx context.Context, r Resource) {
	gk := r.GroupKind()
	m.stopProver(gk)
	pctx, cancel := context.WithCancel(ctx)
	p := &prover{cancel: cancel}
	m.provers[gk] = p
	m.proving.Add(1)
	go func() {
		defer m.proving.Done()
		m.prove(pctx, r, p)
	}()
}

// stopProver cancels the prover of gk, if any. Caller holds mu: a prover
// emits only under mu and with its context live, so once this returns it
// emits nothing.
func (m *Monitors) stopProver(gk schema.GroupKind) {
	if p := m.provers[gk]; p != nil {
		p.cancel()
		delete(m.provers, gk)
	}
}

// prove lists r (one item) with backoff until the LIST answers 404, and
// then, if a CRD served r, removes every node of r's group and kind from
// the graph as deleted: a Relisted event with a generation no upsert
// carries. It gives up when its context ends: a monitor of the group and
// kind started again (its first list sweeps instead), or the monitors
// stopped.
//
// Only a CRD's resource is swept: an aggregated API whose APIService was
// removed may still hold its objects in its own server, and serve them
// again under the same UIDs when it is registered again; its nodes stay,
// as upstream's collector leaves them (their dependents are kept).
//
// Why this proof is enough. Sync starts a prover only when no wanted
// resource has r's group and kind (no version of it is served, and its
// group did not fail discovery), and cancels it, under mu, before a
// monitor of that group and kind starts, so its sweep is ordered before
// anything a new monitor delivers. The 404 is the apiserver's own answer
// that no object of the resource exists; for a deleted CRD it is true in
// storage too: the apiserver deletes every instance before it lets the CRD
// go (the customresourcecleanup finalizer), so their UIDs never come back,
// and a CRD created again under the name serves new objects with new UIDs.
// A LIST that succeeds (the resource is still served, discovery lagged or
// flapped) or fails otherwise (an aggregated API that is unavailable)
// proves nothing: the prover tries again.
func (m *Monitors) prove(ctx context.Context, r Resource, p *prover) {
	logger := klog.FromContext(ctx).WithValues("resource", r.GVR.String())
	res := m.client.Resource(r.GVR).Namespace(metav1.NamespaceAll)
	backoff := newMonitorBackoff()
	for {
		_, err := res.List(ctx, metav1.ListOptions{Limit: 1})
		if ctx.Err() != nil {
			return
		}
		if apierrors.IsNotFound(err) && !m.wasCRDBacked(r.GVR.GroupResource()) {
			logger.V(2).Info("Resource gone (its list answers 404), but no CRD served it: its objects stay in the graph")
			m.mu.Lock()
			if m.provers[r.GroupKind()] == p {
				delete(m.provers, r.GroupKind())
			}
			m.mu.Unlock()
			return
		}
		if apierrors.IsNotFound(err) {
			m.mu.Lock()
			if ctx.Err() == nil {
				m.observe(graph.Event{Type: graph.Relisted, Object: rules.Object{Identity: rules.Identity{APIVersion: r.APIVersion(), Kind: r.Kind}}, Gen: nextListGen(), Resource: r.GVR.Resource})
				if m.provers[r.GroupKind()] == p {
					delete(m.provers, r.GroupKind())
				}
				logger.V(2).Info("Resource gone (its list answers 404): its objects are removed from the graph")
			}
			m.mu.Unlock()
			return
		}
		logger.V(4).Info("Vanished resource still answers its list; checking again later", "err", fmt.Sprint(err))
		if !sleep(ctx, m.clock, backoff.Step()) {
			return
		}
	}
}

// Proving returns the group kinds whose vanished resources are being
// proven gone (a test hook).
func (m *Monitors) Proving() []schema.GroupKind {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]schema.GroupKind, 0, len(m.provers))
	for gk := range m.provers {
		out = append(out, gk)
	}
	return out
}
