package model

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

const (
	// crdGroup is the group of the test's custom kinds.
	crdGroup = "model.kgc.test"
	// holdFinalizer is the custom finalizer the test puts on some objects.
	holdFinalizer = "test.kgc.dev/hold"
	// labelSeed marks every object of one seed's run (value: run id).
	labelSeed = "model.kgc.test/run"
	// labelMarker marks the watcher's barrier objects.
	labelMarker = "model.kgc.test/marker"
)

// kindInfo says how to reach one kind of object.
type kindInfo struct {
	gvr        schema.GroupVersionResource
	apiVersion string
	kind       string
	namespaced bool
}

var (
	configMapKind = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, "v1", "ConfigMap", true}
	secretKind    = kindInfo{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "v1", "Secret", true}
	widgetKind    = kindInfo{schema.GroupVersionResource{Group: crdGroup, Version: "v1", Resource: "widgets"}, crdGroup + "/v1", "Widget", true}
	gadgetKind    = kindInfo{schema.GroupVersionResource{Group: crdGroup, Version: "v1", Resource: "gadgets"}, crdGroup + "/v1", "Gadget", false}

	allKinds        = []kindInfo{configMapKind, secretKind, widgetKind, gadgetKind}
	namespacedKinds = []kindInfo{configMapKind, secretKind, widgetKind}
)

// ident identifies one object.
type ident struct {
	kind      kindInfo
	namespace string
	name      string
	uid       types.UID
}

func (o ident) String() string {
	if o.namespace == "" {
		return fmt.Sprintf("%s %s (uid %s)", o.kind.kind, o.name, o.uid)
	}
	return fmt.Sprintf("%s %s/%s (uid %s)", o.kind.kind, o.namespace, o.name, o.uid)
}

func (o ident) meta() metadata.ResourceInterface {
	r := metadataClient.Resource(o.kind.gvr)
	if o.kind.namespaced {
		return r.Namespace(o.namespace)
	}
	return r
}

func (o ident) dynamic() dynamic.ResourceInterface {
	r := dynamicClient.Resource(o.kind.gvr)
	if o.kind.namespaced {
		return r.Namespace(o.namespace)
	}
	return r
}

func (o ident) ref(block bool) metav1.OwnerReference {
	return testenv.OwnerRef(o.kind.apiVersion, o.kind.kind, o.name, o.uid, block)
}
