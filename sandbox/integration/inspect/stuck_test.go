package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/kgc-dev/kgc/internal/app"
	"github.com/kgc-dev/kgc/internal/inspect"
	"github.com/kgc-dev/kgc/pkg/kgc"
	"github.com/kgc-dev/kgc/sandbox/internal/testenv"
)

// TestStuckReportsEveryRootCause creates one stuck deletion per root cause
// against the real apiserver, with kgc running (it does its part: deletes
// what it may, keeps what it must, holds what it cannot decide), and
// checks `kgc stuck -o json` read from the API server and from the running
// kgc (--server), and kgc's stuck metrics:
//   - fin: a ConfigMap with a custom finalizer, deleted;
//   - fg-owner: deleted Foreground, waiting for fg-held, which kgc deleted
//     and a custom finalizer holds (fg-held itself: finalizer);
//   - unk-owner: deleted Foreground, waiting for unk-dep, which kgc keeps
//     because another owner reference of it names a kind nothing serves;
//   - inv-owner: deleted Foreground, waiting for a cluster-scoped
//     ClusterRole whose reference to it (a namespaced owner) is invalid;
//   - crd-owner: deleted Foreground, its dependent a custom resource whose
//     preferred version cannot be listed (conversion webhook down): kgc
//     holds its finalizer (a failing monitor).
func TestStuckReportsEveryRootCause(t *testing.T) {
	tc := newTestCase(t)
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		t.Fatal(err)
	}

	// The failing monitor first: kgc must not have listed the resource
	// before its conversion breaks.
	const group = "stuck.kgc.test"
	crd := testenv.CRD(group, "stuckwidgets", "StuckWidget", true, "v1", "v2")
	if _, err := dyn.Resource(testenv.CRDGVR).Create(tc.ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	tc.cleanup(func(ctx context.Context) {
		// Heal the conversion so that the apiserver can delete the
		// instances, then remove the CRD.
		setCRDConversion(ctx, t, dyn, crd.GetName(), map[string]any{"strategy": "None"})
		if err := dyn.Resource(testenv.CRDGVR).Delete(ctx, crd.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Logf("cleanup: delete CRD: %v", err)
		}
	})
	tc.waitFor("the CRD to be established", func() (bool, error) {
		u, err := dyn.Resource(testenv.CRDGVR).Get(tc.ctx, crd.GetName(), metav1.GetOptions{})
		return err == nil && testenv.HasCondition(u, "Established", "True"), nil
	})
	crdOwner := tc.configMap("crd-owner")
	widgets := func(v string) dynamic.ResourceInterface {
		return dyn.Resource(schema.GroupVersionResource{Group: group, Version: v, Resource: "stuckwidgets"}).Namespace(tc.ns)
	}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion(group + "/v1")
	w.SetKind("StuckWidget")
	w.SetName("w")
	w.SetOwnerReferences([]metav1.OwnerReference{crdOwner.ref(true)})
	tc.waitFor("a custom resource to be created", func() (bool, error) {
		_, err := widgets("v1").Create(tc.ctx, w, metav1.CreateOptions{})
		return err == nil, client404(err)
	})
	setCRDConversion(tc.ctx, t, dyn, crd.GetName(), map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"conversionReviewVersions": []any{"v1"},
			"clientConfig": map[string]any{"service": map[string]any{
				"namespace": "default", "name": "kgc-no-such-conversion-service", "path": "/convert", "port": int64(443),
			}},
		},
	})
	tc.waitFor("listing the CRD's preferred version to fail", func() (bool, error) {
		_, err := widgets("v2").List(tc.ctx, metav1.ListOptions{})
		return err != nil, nil
	})
	tc.remove(crdOwner, metav1.DeletePropagationForeground)

	fin := tc.configMap("fin", withFinalizers(holdFinalizer))
	tc.remove(fin, metav1.DeletePropagationBackground)
	fgOwner := tc.configMap("fg-owner")
	held := tc.configMap("fg-held", ownedBy(fgOwner, true), withFinalizers(holdFinalizer))
	tc.remove(fgOwner, metav1.DeletePropagationForeground)
	unkOwner := tc.configMap("unk-owner")
	tc.configMap("unk-dep", ownedBy(unkOwner, true), func(m *metav1.ObjectMeta) {
		m.OwnerReferences = append(m.OwnerReferences, testenv.OwnerRef("nothing.kgc.test/v1", "Nothing", "x", testenv.RandomUID(), false))
	})
	tc.remove(unkOwner, metav1.DeletePropagationForeground)
	invOwner := tc.configMap("inv-owner")
	tc.clusterRole("inv-dep", ownedBy(invOwner, true))
	tc.remove(invOwner, metav1.DeletePropagationForeground)

	gc, err := testenv.StartCollector(rest.CopyConfig(restConfig), kgc.Options{
		Workers: 5, UnlistedHold: time.Hour, DiscoveryResyncPeriod: time.Second,
		StuckThreshold: time.Second, Registerer: prometheus.NewRegistry(), Logger: testenv.Logger("kgc"),
	}, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	tc.cleanup(func(context.Context) {
		if err := gc.Stop(); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(gc.Handler())
	t.Cleanup(srv.Close)
	tc.waitFor("kgc to delete the held dependent", func() (bool, error) {
		m, err := tc.get(held)
		return err == nil && m.DeletionTimestamp != nil, err
	})

	want := map[string]struct {
		reason string
		chain  []string
	}{
		"fin":       {inspect.StuckFinalizer, nil},
		"fg-held":   {inspect.StuckFinalizer, nil},
		"fg-owner":  {inspect.StuckDependentFinalizer, []string{"fg-owner", "fg-held"}},
		"unk-owner": {inspect.StuckUnresolvableOwner, []string{"unk-owner", "unk-dep"}},
		"inv-owner": {inspect.StuckInvalidReference, []string{"inv-owner", tc.ns + "-inv-dep"}},
		"crd-owner": {inspect.StuckUnlisted, nil},
	}
	for _, mode := range []struct {
		name string
		args []string
	}{
		{"from the API server", nil},
		{"from the running kgc", []string{"--kgc-url", srv.URL}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			args := append([]string{"stuck", "-o", "json", "--older-than", "1s", "-n", tc.ns, "--kubeconfig", kubeconfigPath}, mode.args...)
			var last string
			err := pollUntil(tc, func() (bool, error) {
				out, errOut, err := kgcCLI(t, app.InspectDeps{}, args...)
				if err != nil {
					return false, fmt.Errorf("kgc %s: %w\n%s", strings.Join(args, " "), err, errOut)
				}
				var r inspect.StuckReport
				if err := json.Unmarshal([]byte(out), &r); err != nil {
					return false, fmt.Errorf("kgc stuck -o json: %w\n%s", err, out)
				}
				last = out
				got := map[string]inspect.StuckObject{}
				for _, g := range r.Groups {
					for _, o := range g.Objects {
						got[o.Object.Name] = o
					}
				}
				if len(got) != len(want) {
					return false, nil
				}
				for name, w := range want {
					o, ok := got[name]
					if !ok || o.Reason != w.reason || !slices.Equal(names(o.Chain), w.chain) {
						return false, nil
					}
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("kgc stuck never reported every root cause: %v\nlast answer:\n%s", err, last)
			}
			var r inspect.StuckReport
			if err := json.Unmarshal([]byte(last), &r); err != nil {
				t.Fatal(err)
			}
			for _, g := range r.Groups {
				for _, o := range g.Objects {
					if o.Reason == inspect.StuckUnlisted && !slices.Contains(o.Resources, group+"/v2/stuckwidgets") {
						t.Errorf("%s: resources %v, want %s/v2/stuckwidgets", o.Object.Name, o.Resources, group)
					}
					if o.Reason == inspect.StuckFinalizer && !slices.Equal(o.Finalizers, []string{holdFinalizer}) {
						t.Errorf("%s: finalizers %v", o.Object.Name, o.Finalizers)
					}
					if o.AgeSeconds < 1 || o.Object.DeletionTimestamp == nil {
						t.Errorf("%s: age %ds, deletionTimestamp %v", o.Object.Name, o.AgeSeconds, o.Object.DeletionTimestamp)
					}
				}
			}
			out, _, err := kgcCLI(t, app.InspectDeps{}, append([]string{"stuck", "--older-than", "1s", "-n", tc.ns, "--kubeconfig", kubeconfigPath}, mode.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kgc stuck %s:\n%s", strings.Join(mode.args, " "), out)
			for _, line := range []string{
				`ConfigMap/fg-owner\s+\S+\s+ConfigMap/fg-owner → ConfigMap/fg-held \(finalizer ` + holdFinalizer + `\)`,
				`ConfigMap/inv-owner\s+\S+\s+ConfigMap/inv-owner → ClusterRole.rbac.authorization.k8s.io/` + tc.ns + `-inv-dep \(invalid owner reference\)`,
				`ConfigMap/crd-owner\s+\S+\s+unlisted ` + group + `/v2/stuckwidgets`,
			} {
				if !regexp.MustCompile(line).MatchString(out) {
					t.Errorf("output lacks a line matching %q", line)
				}
			}
		})
	}

	// The metrics count them (cluster-wide: at least these).
	tc.waitFor("the stuck metrics", func() (bool, error) {
		res, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			return false, err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return false, err
		}
		counts := map[string]int{}
		for reason, n := range map[string]int{
			inspect.StuckFinalizer: 2, inspect.StuckDependentFinalizer: 1, inspect.StuckUnresolvableOwner: 1,
			inspect.StuckInvalidReference: 1, inspect.StuckUnlisted: 1,
		} {
			m := regexp.MustCompile(`(?m)^kgc_stuck_objects\{reason="` + reason + `"\} (\d+)$`).FindSubmatch(body)
			if m == nil {
				return false, nil
			}
			counts[reason], _ = strconv.Atoi(string(m[1]))
			if counts[reason] < n {
				return false, nil
			}
		}
		m := regexp.MustCompile(`(?m)^kgc_oldest_stuck_deletion_seconds (\S+)$`).FindSubmatch(body)
		if m == nil {
			return false, nil
		}
		oldest, _ := strconv.ParseFloat(string(m[1]), 64)
		return oldest >= 1, nil
	})
}

func names(objs []*inspect.Object) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Name)
	}
	return out
}

// client404 turns the NotFound of a freshly established CRD's endpoint
// into "not yet".
func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func setCRDConversion(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string, conversion map[string]any) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u, err := dyn.Resource(testenv.CRDGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, conversion, "spec", "conversion"); err != nil {
			return err
		}
		_, err = dyn.Resource(testenv.CRDGVR).Update(ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("set conversion of CRD %s: %v", name, err)
	}
}

// TestKubectlPlugin builds kgc, installs it as kubectl-kgc on $PATH, and
// runs it through kubectl itself: `kubectl kgc explain|tree|preview|stuck`
// with kubectl's --kubeconfig, --context, -n, --as and -o. The
// kubeconfig's current context points nowhere, so only --context reaches
// the cluster. kubectl is built from the pinned Kubernetes version
// (testenv.BuildKubectl), so the test runs everywhere Go does and never
// skips.
func TestKubectlPlugin(t *testing.T) {
	tc := newTestCase(t)
	bin := t.TempDir()
	kubectl, err := testenv.BuildKubectl(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kgcBin, err := testenv.BuildKGC(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kgcBin, filepath.Join(bin, "kubectl-kgc")); err != nil {
		t.Fatal(err)
	}
	// A kubeconfig whose current context is a dead cluster.
	cfg, err := clientcmd.LoadFromFile(kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	good := cfg.CurrentContext
	dead := cfg.Contexts[good].DeepCopy()
	dead.Cluster = "dead"
	cfg.Clusters["dead"] = cfg.Clusters[cfg.Contexts[good].Cluster].DeepCopy()
	cfg.Clusters["dead"].Server = "https://127.0.0.1:1"
	cfg.Contexts["dead"] = dead
	cfg.CurrentContext = "dead"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	web := tc.configMap("web")
	tc.configMap("web-part", ownedBy(web, true))
	stuck := tc.configMap("stuck", withFinalizers(holdFinalizer))
	tc.remove(stuck, metav1.DeletePropagationBackground)

	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(tc.ctx, waitTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append(append([]string{"kgc"}, args...), "--kubeconfig", kubeconfig, "--context", good, "-n", tc.ns)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl kgc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("kubectl kgc %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	if out := run("explain", "cm/web-part"); !strings.Contains(out, "ConfigMap/web-part -n "+tc.ns) || !strings.Contains(out, "Verdict: keep") {
		t.Errorf("kubectl kgc explain: %s", out)
	}
	if out := run("tree", "configmap/web"); !strings.Contains(out, "└─ConfigMap/web-part") {
		t.Errorf("kubectl kgc tree: %s", out)
	}
	if out := run("preview", "delete", "cm/web", "--cascade=foreground"); !strings.Contains(out, "Deleted (2)") {
		t.Errorf("kubectl kgc preview delete: %s", out)
	}
	if out := run("stuck", "--older-than", "0s"); !regexp.MustCompile(`ConfigMap/stuck\s+\S+\s+finalizer ` + holdFinalizer).MatchString(out) {
		t.Errorf("kubectl kgc stuck: %s", out)
	}
	// kubectl's printers and identity flags.
	if out := run("tree", "configmap/web", "-o", "name"); out != "configmap/web\nconfigmap/web-part\n" {
		t.Errorf("kubectl kgc tree -o name: %q", out)
	}
	if out := run("explain", "cm/web-part", "-o", "jsonpath={.decision.verdict}"); out != "keep" {
		t.Errorf("kubectl kgc explain -o jsonpath: %q", out)
	}
	asNobody := exec.CommandContext(tc.ctx, kubectl, "kgc", "explain", "cm/web", "--kubeconfig", kubeconfig, "--context", good, "-n", tc.ns,
		"--as", "system:serviceaccount:"+tc.ns+":nobody")
	asNobody.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG=")
	if out, err := asNobody.CombinedOutput(); err == nil || !strings.Contains(string(out), "forbidden") {
		t.Errorf("kubectl kgc explain --as a user without rights: %v\n%s", err, out)
	}
	// Without --context, the dead current context is used: proof that
	// --context chose the cluster.
	cmd := exec.CommandContext(tc.ctx, kubectl, "kgc", "explain", "cm/web", "--kubeconfig", kubeconfig, "-n", tc.ns, "--request-timeout", "5s")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("kubectl kgc without --context reached a cluster through a dead context:\n%s", out)
	}
}
