package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

const (
	// rootModule is the root module's path; findRepoRoot looks for its go.mod.
	rootModule = "github.com/kgc-dev/kgc"
	// fieldManager applies the manifests in these tests.
	fieldManager = "kgc-deploy-test"
	// kgcNamespace is where the manifests install kgc.
	kgcNamespace = "kgc-system"
)

// findRepoRoot walks up from the working directory (the package directory,
// under go test) to the directory whose go.mod declares the root module.
func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(data) == rootModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", rootModule)
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for line := range strings.Lines(string(gomod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// manifest is one object of a file in deploy/.
type manifest struct {
	file string // relative to the repository root
	obj  *unstructured.Unstructured
}

func (m manifest) String() string {
	return fmt.Sprintf("%s: %s %s", m.file, m.obj.GetKind(), objectKey(m.obj))
}

func objectKey(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// loadManifests reads every object of deploy/*.{yaml,yml,json} in the order
// `kubectl apply -f deploy/` applies them: files by name, objects as they
// appear in each file.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	return loadManifestsIn(t, "deploy")
}

// loadManifestsIn reads every object of dir/*.{yaml,yml,json} (dir relative
// to the repository root; subdirectories are not read, as kubectl apply -f
// does not descend into them).
func loadManifestsIn(t *testing.T, dir string) []manifest {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(repoRoot, dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []manifest
	for _, e := range entries { // ReadDir sorts by name
		if e.IsDir() || !slices.Contains([]string{".yaml", ".yml", ".json"}, filepath.Ext(e.Name())) {
			continue
		}
		rel := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decodeManifests(t, rel, data)...)
	}
	if len(out) == 0 {
		t.Fatalf("no manifests in %s/", dir)
	}
	return out
}

// decodeManifests decodes the YAML or JSON documents of data, read from
// file, as kubectl does.
func decodeManifests(t *testing.T, file string, data []byte) []manifest {
	t.Helper()
	var out []manifest
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(doc) == 0 {
			continue // an empty document, e.g. a trailing ---
		}
		obj := &unstructured.Unstructured{Object: doc}
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			t.Fatalf("%s: an object without apiVersion, kind or metadata.name: %v", file, doc)
		}
		out = append(out, manifest{file: file, obj: obj})
	}
	return out
}

// warningRecorder collects the API server's warnings (deprecations, unknown
// fields under a non-strict validation, Pod Security "would violate").
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.warnings
	w.warnings = nil
	return out
}

// applier server-side applies unstructured objects, resolving their
// resources through discovery as kubectl does.
type applier struct {
	// manager is the field manager of apply (fieldManager unless set).
	manager  string
	dyn      dynamic.Interface
	mapper   meta.RESTMapper
	warnings *warningRecorder
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	w := &warningRecorder{}
	cfg.WarningHandler = w
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{
		manager:  fieldManager,
		dyn:      dyn,
		mapper:   restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		warnings: w,
	}
}

func (a *applier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			return nil, fmt.Errorf("%s %s is namespaced but names no namespace", gvk.Kind, obj.GetName())
		}
		return a.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
	}
	if obj.GetNamespace() != "" {
		return nil, fmt.Errorf("%s %s is cluster-scoped but names namespace %q", gvk.Kind, obj.GetName(), obj.GetNamespace())
	}
	return a.dyn.Resource(mapping.Resource), nil
}

// apply server-side applies obj with strict field validation (an unknown or
// duplicate field is an error, not a warning); dryRun makes the server run
// everything — defaulting, validation, admission — without persisting.
func (a *applier) apply(t *testing.T, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	t.Helper()
	ri, err := a.resource(obj)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: a.manager, FieldValidation: metav1.FieldValidationStrict}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return ri.Patch(t.Context(), obj.GetName(), types.ApplyPatchType, data, opts)
}

// applyClean applies and fails the test on an error or on any warning.
func (a *applier) applyClean(t *testing.T, what string, obj *unstructured.Unstructured, dryRun bool) *unstructured.Unstructured {
	t.Helper()
	a.warnings.take()
	got, err := a.apply(t, obj, dryRun)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if w := a.warnings.take(); len(w) > 0 {
		t.Errorf("%s: the API server warned: %q", what, w)
	}
	return got
}

// TestManifestsDryRun applies every manifest in deploy/, in kubectl's order,
// with server-side dry run and strict field validation: schema errors,
// unknown fields, invalid values and admission rejections (Pod Security,
// among others) fail it. The Namespace is also applied for real, as
// `kubectl apply -f deploy/` would have done before the namespaced objects
// that follow it.
//
// The API server knows nothing of kgc's flags: TestBuildCommand checks the
// Deployment's arguments against the binary.
func TestManifestsDryRun(t *testing.T) {
	a := newApplier(t, adminConfig)
	var deployment *unstructured.Unstructured
	for _, m := range loadManifests(t) {
		got := a.applyClean(t, "dry run "+m.String(), m.obj, true)
		if got.GetUID() == "" && m.obj.GetKind() != "Namespace" {
			// Not fatal: only a sign that the server returned less than expected.
			t.Logf("%s: the dry-run answer has no uid", m)
		}
		if m.obj.GetKind() == "Namespace" {
			a.applyClean(t, "apply "+m.String(), m.obj, false)
		}
		if m.obj.GetKind() == "Deployment" {
			deployment = m.obj
		}
	}
	if deployment == nil {
		t.Fatal("no Deployment in deploy/")
	}

	// A Deployment's pod template passes through Pod Security admission with
	// warnings only; a Pod made of it is what the namespace's "restricted"
	// level actually enforces.
	pod := podFromTemplate(t, deployment)
	a.applyClean(t, "dry run a Pod of the Deployment's template", pod, true)

	// The checks above must be able to fail: an unknown field and a Pod the
	// namespace's Pod Security level forbids are rejected.
	t.Run("unknown field is rejected", func(t *testing.T) {
		bad := deployment.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, int64(2), "spec", "replicass"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.apply(t, bad, true); err == nil || !strings.Contains(err.Error(), "replicass") {
			t.Errorf("applying a Deployment with spec.replicass: err = %v, want an unknown-field error", err)
		}
	})
	t.Run("pod security is enforced", func(t *testing.T) {
		bad := pod.DeepCopy()
		containers, _, _ := unstructured.NestedSlice(bad.Object, "spec", "containers")
		c := containers[0].(map[string]any)
		c["securityContext"].(map[string]any)["allowPrivilegeEscalation"] = true
		if err := unstructured.SetNestedSlice(bad.Object, containers, "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.apply(t, bad, true); err == nil || !strings.Contains(err.Error(), "allowPrivilegeEscalation") {
			t.Errorf("applying a Pod with allowPrivilegeEscalation=true in %s: err = %v, want a Pod Security rejection", kgcNamespace, err)
		}
	})
}

// podFromTemplate returns a Pod made of a Deployment's pod template.
func podFromTemplate(t *testing.T, deployment *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	tmpl, ok, err := unstructured.NestedMap(deployment.Object, "spec", "template")
	if err != nil || !ok {
		t.Fatalf("Deployment %s has no pod template (%v)", objectKey(deployment), err)
	}
	md, _, _ := unstructured.NestedMap(tmpl, "metadata")
	if md == nil {
		md = map[string]any{}
	}
	md["name"] = deployment.GetName() + "-template"
	md["namespace"] = deployment.GetNamespace()
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   md,
		"spec":       tmpl["spec"],
	}}
}

// typed converts a manifest's object into a typed API object.
func typed[T any](t *testing.T, m manifest) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m.obj.Object, out, true); err != nil {
		t.Fatalf("%s: %v", m, err)
	}
	return out
}
