package inspect

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kgc-dev/kgc/internal/discovery"
)

// kinds the fake cluster serves.
var (
	podR        = discovery.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod", Namespaced: true}
	cmR         = discovery.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Kind: "ConfigMap", Namespaced: true}
	nsR         = discovery.Resource{GVR: schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, Kind: "Namespace", Namespaced: false}
	deployR     = discovery.Resource{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Kind: "Deployment", Namespaced: true}
	rsR         = discovery.Resource{GVR: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, Kind: "ReplicaSet", Namespaced: true}
	crR         = discovery.Resource{GVR: schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, Kind: "ClusterRole", Namespaced: false}
	allResource = []discovery.Resource{podR, cmR, nsR, deployR, rsR, crR}
)

func testMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{{Version: "v1"}, {Group: "apps", Version: "v1"}})
	for _, r := range allResource {
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		m.Add(r.GVR.GroupVersion().WithKind(r.Kind), scope)
	}
	return m
}

// cluster is a fake API server holding object metadata.
type cluster struct {
	t      testing.TB
	client *metadatafake.FakeMetadataClient
	n      int
}

func newCluster(t testing.TB) *cluster {
	return &cluster{t: t, client: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())}
}

func (c *cluster) view() *LiveView {
	return NewLiveView(testMapper(), c.client, allResource)
}

type objOpt func(*metav1.PartialObjectMetadata)

func owned(o *Object, block bool) objOpt {
	return func(m *metav1.PartialObjectMetadata) {
		b := block
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: o.UID, BlockOwnerDeletion: &b})
	}
}

func ref(apiVersion, kind, name string, uid types.UID) objOpt {
	return func(m *metav1.PartialObjectMetadata) {
		m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid})
	}
}

func finalizers(fs ...string) objOpt {
	return func(m *metav1.PartialObjectMetadata) { m.Finalizers = append(m.Finalizers, fs...) }
}

func deleting() objOpt {
	return func(m *metav1.PartialObjectMetadata) {
		ts := metav1.NewTime(time.Unix(1700000000, 0))
		m.DeletionTimestamp = &ts
	}
}

func (c *cluster) add(r discovery.Resource, ns, name string, opts ...objOpt) *Object {
	c.t.Helper()
	c.n++
	m := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: r.APIVersion(), Kind: r.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
	}
	if !r.Namespaced {
		m.Namespace = ""
	}
	for _, o := range opts {
		o(m)
	}
	if err := c.client.Tracker().Create(r.GVR, m, m.Namespace); err != nil {
		c.t.Fatalf("create %s %s: %v", r.Kind, name, err)
	}
	return fromMeta(m, r.APIVersion(), r.Kind)
}

// writes returns the fake client's actions other than get/list/watch.
func (c *cluster) writes() []clienttesting.Action {
	var out []clienttesting.Action
	for _, a := range c.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			out = append(out, a)
		}
	}
	return out
}

func typesUID(s string) types.UID { return types.UID(s) }
