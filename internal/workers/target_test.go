package workers

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kgc-dev/kgc/internal/fakeapi"
	"github.com/kgc-dev/kgc/internal/graph"
	"github.com/kgc-dev/kgc/internal/rules"
)

// A write addresses an object the graph recorded at a version that is no
// longer served (apps/v1beta2 Deployment, before a relist updated it) at a
// served version of its kind: any version addresses the same object.
func TestTargetOfAVersionNoLongerServed(t *testing.T) {
	w := New(Config{Metadata: fakeapi.NewServer().Client, Mapper: fakeapi.NewMapper()}, graph.New())
	it := &rules.Item{Object: rules.Object{Identity: rules.Identity{APIVersion: "apps/v1beta2", Kind: "Deployment", Namespace: "a", Name: "d", UID: "d"}, ResourceVersion: "7"}}
	tg, err := w.target(it)
	if err != nil {
		t.Fatal(err)
	}
	if want := (schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}); tg.Resource != want || tg.UID != "d" || tg.ResourceVersion != "7" {
		t.Errorf("target = %+v, want %s with the item's UID and resourceVersion", tg, want)
	}
}
