package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kgc-dev/kgc/internal/graphapi"
)

const (
	ns            = "shop"
	holdFinalizer = "example.com/drain"
	waitTimeout   = 60 * time.Second
)

func requireChromium(t *testing.T) {
	t.Helper()
	if setupSkip == "" {
		return
	}
	if os.Getenv("KGC_REQUIRE_CHROMIUM") == "1" {
		t.Fatalf("KGC_REQUIRE_CHROMIUM=1 but %s", setupSkip)
	}
	t.Skip(setupSkip)
}

func ptr[T any](v T) *T { return &v }

func ownerRef(apiVersion, kind string, m metav1.Object, controller, block bool) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: m.GetName(), UID: m.GetUID(), Controller: ptr(controller), BlockOwnerDeletion: ptr(block)}
}

func labels(app string) map[string]string { return map[string]string{"app": app} }

func podTemplate(app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels(app)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.com/" + app}}},
	}
}

// scenario creates, in namespace shop (nothing runs the workload
// controllers, so the ownership is written by hand):
//
//	Deployment web <- ReplicaSet web-6d5f <- Pods web-6d5f-{abcde,fghij}     all live
//	Deployment api <- ReplicaSet api-7c9 <- Pod api-7c9-x (finalizer)       api deleted with Foreground: stuck
//	Secret old-token (deleted) <- ConfigMap token-cache (finalizer)         a dangling owner
//	ReplicaSet ghost-rs (never existed) <- Pod stray (finalizer)            a placeholder owner
//	ClusterRole shop-admin <- ConfigMap settings                            a cluster-scoped owner
func scenario(t *testing.T, ctx context.Context) {
	c := kubeClient
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	deployment := func(name string) *appsv1.Deployment {
		d, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels(name)}, Template: podTemplate(name)},
		}, metav1.CreateOptions{})
		must(err)
		return d
	}
	replicaSet := func(name string, owner metav1.Object, app string) *appsv1.ReplicaSet {
		rs, err := c.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{ownerRef("apps/v1", "Deployment", owner, true, true)}},
			Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels(app)}, Template: podTemplate(app)},
		}, metav1.CreateOptions{})
		must(err)
		return rs
	}
	pod := func(name string, refs []metav1.OwnerReference, finalizers ...string) {
		tmpl := podTemplate(name)
		_, err := c.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: refs, Finalizers: finalizers},
			Spec:       tmpl.Spec,
		}, metav1.CreateOptions{})
		must(err)
	}

	web := deployment("web")
	webRS := replicaSet("web-6d5f", web, "web")
	for _, p := range []string{"web-6d5f-abcde", "web-6d5f-fghij"} {
		pod(p, []metav1.OwnerReference{ownerRef("apps/v1", "ReplicaSet", webRS, true, true)})
	}

	api := deployment("api")
	apiRS := replicaSet("api-7c9", api, "api")
	pod("api-7c9-x", []metav1.OwnerReference{ownerRef("apps/v1", "ReplicaSet", apiRS, true, true)}, holdFinalizer)

	token, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-token"}}, metav1.CreateOptions{})
	must(err)
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "token-cache", Finalizers: []string{holdFinalizer},
		OwnerReferences: []metav1.OwnerReference{ownerRef("v1", "Secret", token, false, false)},
	}}, metav1.CreateOptions{})
	must(err)

	pod("stray", []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "ghost-rs", UID: uuid.NewUUID(), Controller: ptr(true)}}, holdFinalizer)

	admin, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "shop-admin"}}, metav1.CreateOptions{})
	must(err)
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "settings", OwnerReferences: []metav1.OwnerReference{ownerRef("rbac.authorization.k8s.io/v1", "ClusterRole", admin, false, false)},
	}}, metav1.CreateOptions{})
	must(err)

	// Wait until kgc has seen the owners (so that deleting them cascades)
	// and api's chain of dependents down to the held pod (its watches of
	// different resources are not ordered: a ReplicaSet still on its way
	// when kgc decides about api would let api go at once), then start the
	// deletions.
	waitGraph(t, ctx, "the scenario in kgc's graph", func(g graphapi.Graph) bool {
		observed := func(kind, name string) bool {
			n := findNode(g, kind, name)
			return n != nil && n.State != graphapi.StatePlaceholder
		}
		return observed("Deployment", "api") && observed("ReplicaSet", "api-7c9") && observed("Pod", "api-7c9-x") && observed("Secret", "old-token")
	})
	must(c.AppsV1().Deployments(ns).Delete(ctx, "api", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationForeground)}))
	must(c.CoreV1().Secrets(ns).Delete(ctx, "old-token", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}))

	// kgc deletes api's dependents (the pod stays: its finalizer), the
	// dependent of the deleted secret, and the dependent of the owner that
	// never existed; each stays with its finalizer.
	waitGraph(t, ctx, "kgc to act on the deletions", func(g graphapi.Graph) bool {
		ok := func(kind, name string, states ...string) bool {
			n := findNode(g, kind, name)
			return n != nil && slices.Contains(states, n.State)
		}
		return ok("Deployment", "api", graphapi.StateWaitingForDependents) &&
			ok("Pod", "api-7c9-x", graphapi.StateDeleting) &&
			ok("Secret", "old-token", graphapi.StateAbsent) &&
			ok("ConfigMap", "token-cache", graphapi.StateDeleting) &&
			ok("Pod", "stray", graphapi.StateDeleting) &&
			ok("ReplicaSet", "ghost-rs", graphapi.StatePlaceholder, graphapi.StateAbsent)
	})
}

func findNode(g graphapi.Graph, kind, name string) *graphapi.Node {
	for i := range g.Nodes {
		if g.Nodes[i].Kind == kind && g.Nodes[i].Name == name {
			return &g.Nodes[i]
		}
	}
	return nil
}

// fetchGraph reads the namespace's JSON graph from kgc, as the page does.
func fetchGraph(ctx context.Context) (graphapi.Graph, error) {
	var g graphapi.Graph
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kgcURL+"/debug/controllers/garbage-collector-controller/graph?format=json&namespace="+ns, nil)
	if err != nil {
		return g, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return g, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return g, fmt.Errorf("graph: %s", res.Status)
	}
	return g, json.NewDecoder(res.Body).Decode(&g)
}

// waitGraph polls kgc's JSON graph until cond holds.
func waitGraph(t *testing.T, ctx context.Context, what string, cond func(graphapi.Graph) bool) graphapi.Graph {
	t.Helper()
	var last graphapi.Graph
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		g, err := fetchGraph(ctx)
		if err != nil {
			return false, err
		}
		last = g
		return cond(g), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last graph:\n%s", what, err, describe(last))
	}
	return last
}

func describe(g graphapi.Graph) string {
	var b strings.Builder
	for _, n := range g.Nodes {
		fmt.Fprintf(&b, "  %s %s/%s %s finalizers=%v\n", n.Kind, n.Namespace, n.Name, n.State, n.Finalizers)
	}
	return b.String()
}

// browser starts headless Chromium with a fresh profile and returns a tab's
// context and the console messages collected so far.
func browser(t *testing.T) (context.Context, func() []chromedp.ConsoleMessage) {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("mute-audio", true),
		chromedp.WindowSize(1440, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	// Start the browser now, on a blank page, so the console subscription
	// below sees everything the UI writes.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var messages []chromedp.ConsoleMessage
	done := make(chan struct{})
	stream := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range stream {
			if err != nil {
				return
			}
			mu.Lock()
			messages = append(messages, m)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for chromium to exit
		<-done
	})
	return ctx, func() []chromedp.ConsoleMessage {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(messages)
	}
}

// eval runs JavaScript in the page and returns its value.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitJS polls a JavaScript condition in the page.
func waitJS(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		lastErr = err
		return err == nil && ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s (%s): %v (last evaluation error: %v)", what, js, err, lastErr)
	}
}

// pageNode is what the page shows of one object.
type pageNode struct {
	UID   string `json:"uid"`
	Name  string `json:"name"`
	State string `json:"state"`
	Class string `json:"class"`
	Fill  string `json:"fill"`
}

const pageNodesJS = `[...document.querySelectorAll('#graph .node')].map(el => ({
	uid: el.dataset.uid, name: el.dataset.name, state: el.dataset.state,
	class: el.getAttribute('class'), fill: getComputedStyle(el.querySelector('rect.box')).fill}))`

func pageNodes(t *testing.T, ctx context.Context) map[string]pageNode {
	t.Helper()
	out := map[string]pageNode{}
	for _, n := range eval[[]pageNode](t, ctx, pageNodesJS) {
		out[n.UID] = n
	}
	return out
}

func TestWebView(t *testing.T) {
	requireChromium(t)
	ctx := t.Context()
	scenario(t, ctx)
	want, err := fetchGraph(ctx)
	if err != nil {
		t.Fatal(err)
	}

	tab, console := browser(t)
	if err := chromedp.Do(tab, chromedp.EmulateViewport(1440, 860), chromedp.Navigate(kgcURL+"/ui?namespace="+ns)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the graph to render", fmt.Sprintf(`document.querySelectorAll('#graph .node').length >= %d`, len(want.Nodes)))

	// Every object of the namespace (and the cluster-scoped owner) is drawn
	// in the state kgc reports, with its state's colour.
	got := pageNodes(t, tab)
	if len(got) != len(want.Nodes) {
		t.Errorf("page shows %d objects, kgc's graph has %d:\n%s", len(got), len(want.Nodes), describe(want))
	}
	fills := map[string]string{}
	for _, n := range want.Nodes {
		p, ok := got[string(n.UID)]
		switch {
		case !ok:
			t.Errorf("%s %s is not drawn", n.Kind, n.Name)
			continue
		case p.Name != n.Name || p.State != n.State || !strings.Contains(" "+p.Class+" ", " state-"+n.State+" "):
			t.Errorf("%s %s drawn as %+v, want state %s", n.Kind, n.Name, p, n.State)
		}
		if f, seen := fills[n.State]; seen && f != p.Fill {
			t.Errorf("state %s drawn in two colours: %s and %s", n.State, f, p.Fill)
		}
		fills[n.State] = p.Fill
	}
	for _, c := range []struct{ kind, name, state string }{
		{"Deployment", "api", graphapi.StateWaitingForDependents},
		{"Pod", "api-7c9-x", graphapi.StateDeleting},
		{"Secret", "old-token", graphapi.StateAbsent},
		{"Deployment", "web", graphapi.StateLive},
		{"ClusterRole", "shop-admin", graphapi.StateLive},
	} {
		n := findNode(want, c.kind, c.name)
		if n == nil || n.State != c.state || got[string(n.UID)].State != c.state {
			t.Errorf("%s %s: want state %s on the page", c.kind, c.name, c.state)
		}
	}
	if ghost := findNode(want, "ReplicaSet", "ghost-rs"); ghost == nil || !slices.Contains([]string{graphapi.StatePlaceholder, graphapi.StateAbsent}, got[string(ghost.UID)].State) {
		t.Errorf("the never-observed owner ghost-rs is not drawn as a placeholder: %+v", ghost)
	}
	distinct := map[string]bool{}
	for _, f := range fills {
		distinct[f] = true
	}
	if len(distinct) != len(fills) {
		t.Errorf("states share colours: %v", fills)
	}
	if legend := eval[int](t, tab, `document.querySelectorAll('#legend li').length`); legend != 6 {
		t.Errorf("legend has %d entries, want 6", legend)
	}

	// Owners are drawn above their dependents.
	above := eval[bool](t, tab, `(() => {
		const y = name => document.querySelector('.node[data-name="' + name + '"]').transform.baseVal.consolidate().matrix.f;
		return y('api') < y('api-7c9') && y('api-7c9') < y('api-7c9-x') && y('shop-admin') < y('settings');
	})()`)
	if !above {
		t.Errorf("owners are not drawn above their dependents")
	}

	// Search by name: the match is highlighted, Enter selects it and shows
	// its details.
	pod := findNode(want, "Pod", "api-7c9-x")
	if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS("#search"), "api-7c9-x"+kb.Enter)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the search to select api-7c9-x", `(document.getElementById('detail-title') || {}).textContent === 'Pod api-7c9-x'`)
	matches := eval[[]string](t, tab, `[...document.querySelectorAll('#graph .node.match')].map(el => el.dataset.name)`)
	if !slices.Equal(matches, []string{"api-7c9-x"}) {
		t.Errorf("search matches %v, want [api-7c9-x]", matches)
	}
	if sel := eval[[]string](t, tab, `[...document.querySelectorAll('#graph .node.selected')].map(el => el.dataset.uid)`); !slices.Equal(sel, []string{string(pod.UID)}) {
		t.Errorf("selected %v, want the pod %s", sel, pod.UID)
	}
	if fin := eval[string](t, tab, `document.getElementById('detail-finalizers').textContent`); fin != holdFinalizer {
		t.Errorf("details show finalizers %q, want %q", fin, holdFinalizer)
	}
	// A partial query matches several names.
	if err := chromedp.Do(tab, clearSearch, chromedp.SendKeys(chromedp.CSS("#search"), "web-6d5f-")); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "two matches for web-6d5f-", `document.querySelectorAll('#graph .node.match').length === 2`)

	// Clear the search and select the stuck ReplicaSet by clicking it: its
	// owner reference shows controller and blockOwnerDeletion.
	if err := chromedp.Do(tab,
		clearSearch,
		chromedp.Click(chromedp.CSS(`#graph .node[data-name="api"]`)),
	); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the details of api", `(document.getElementById('detail-title') || {}).textContent === 'Deployment api'`)
	if deps := eval[string](t, tab, `document.getElementById('detail-dependents').textContent`); !strings.Contains(deps, "ReplicaSet api-7c9") {
		t.Errorf("api's details list dependents %q", deps)
	}
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#graph .node[data-name="api-7c9"]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the details of api-7c9", `(document.getElementById('detail-title') || {}).textContent === 'ReplicaSet api-7c9'`)
	owners := eval[string](t, tab, `document.getElementById('detail-owners').textContent`)
	for _, w := range []string{"Deployment api", "controller", "blockOwnerDeletion", "Waiting on dependents"} {
		if !strings.Contains(owners, w) {
			t.Errorf("api-7c9's owner references %q lack %q", owners, w)
		}
	}
	screenshot(t, tab)

	// Focus on the component: only api, its ReplicaSet and its pod remain.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#focus`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the focused component", `document.querySelectorAll('#graph .node').length === 3`)
	names := eval[[]string](t, tab, `[...document.querySelectorAll('#graph .node')].map(el => el.dataset.name).sort()`)
	if !slices.Equal(names, []string{"api", "api-7c9", "api-7c9-x"}) {
		t.Errorf("focused component shows %v", names)
	}
	if u := eval[string](t, tab, `location.search`); !strings.Contains(u, "uid=") {
		t.Errorf("the focus is not in the URL: %q", u)
	}
	// And back to the namespace.
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#unfocus`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the namespace again", fmt.Sprintf(`document.querySelectorAll('#graph .node').length === %d`, len(want.Nodes)))

	// A link to one object (as other tools may print) opens its component.
	if err := chromedp.Do(tab, chromedp.Navigate(kgcURL+"/ui?kind=deployment&name=api&namespace="+ns)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the linked object's component", `document.querySelectorAll('#graph .node').length === 3 && !!document.querySelector('#graph .node.selected[data-name="api"]')`)
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#unfocus`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the namespace again", fmt.Sprintf(`document.querySelectorAll('#graph .node').length === %d`, len(want.Nodes)))

	// The page picks up changes: release the stuck pod's finalizer and the
	// whole api chain goes away.
	releaseFinalizer(t, ctx, pod.Name)
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(`#refresh`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, tab, "the api chain to disappear", `!document.querySelector('#graph .node[data-name="api"]') && !document.querySelector('#graph .node[data-name="api-7c9-x"]')`)

	for _, m := range console() {
		if m.Type == chromedp.ConsoleError || m.IsException() || m.Type == chromedp.ConsoleWarning {
			t.Errorf("console %s", m)
		}
	}
}

// clearSearch empties the search box as a user would (with an input event).
var clearSearch = chromedp.Evaluate[chromedp.Void](`(() => {
	const s = document.getElementById('search');
	s.value = '';
	s.dispatchEvent(new Event('input'));
})()`)

func releaseFinalizer(t *testing.T, ctx context.Context, pod string) {
	t.Helper()
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := kubeClient.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// screenshot saves the viewport as a PNG into the test's temp dir, or to
// $KGC_UI_SCREENSHOT when set.
func screenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("KGC_UI_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "ui.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
