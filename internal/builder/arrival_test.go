package builder

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// An object arrives while kgc watches (rules.Item.Arrived) only once the
// resource of each of its owners has been listed completely: before, an
// owner never observed may have come and gone before kgc could see it.
func TestArrivedOnceOwnersResourceListed(t *testing.T) {
	g := graph.New()
	b := New(Config{Metadata: metadatafake.NewSimpleMetadataClient(runtime.NewScheme())}, g, SinkFunc(func(graph.Event, graph.Effects) {}))
	listed := func(apiVersion, kind string) {
		b.Apply(graph.Event{Type: graph.Listed, Object: rules.Object{Identity: rules.Identity{APIVersion: apiVersion, Kind: kind}}})
	}
	dependent := func(name string) {
		b.Apply(graph.Event{Type: graph.Upsert, Fresh: true, Object: rules.Object{
			Identity:        rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: name, UID: types.UID("uid-" + name)},
			ResourceVersion: "5",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "o", UID: "owner"}},
		}})
	}
	listed("v1", "ConfigMap")
	dependent("before")
	listed("apps/v1", "Deployment")
	dependent("after")
	for name, want := range map[string]bool{"before": false, "after": true} {
		it, ok := g.Item(types.UID("uid-" + name))
		if !ok || it.Arrived != want {
			t.Errorf("%s: Arrived %v (in graph %v), want %v", name, it.Arrived, ok, want)
		}
	}
}
