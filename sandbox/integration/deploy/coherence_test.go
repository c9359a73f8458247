package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/kgc-dev/kgc/internal/app"
)

// wantClusterRoleRules is kgc's least privilege, pinned: widening the
// ClusterRole must be a deliberate change of this test too.
var wantClusterRoleRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch", "patch", "update", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
}

var wantLeaderElectionRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
}

var (
	wantMetricsReaderRules = []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	wantDebugReaderRules   = []rbacv1.PolicyRule{{NonResourceURLs: debugPaths, Verbs: []string{"get"}}}
	wantInspectorRules     = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"kgc"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"pods/portforward"}, Verbs: []string{"create"}},
	}
	// debugPaths are the non-resource URLs of kgc's debug views.
	debugPaths = []string{"/debug/controllers/garbage-collector-controller/*", "/ui", "/ui/*", "/debug/pprof", "/debug/pprof/*"}
)

// installed is deploy/ decoded: each object the tests know, by its role.
type installed struct {
	namespace          *corev1.Namespace
	serviceAccount     *corev1.ServiceAccount
	clusterRole        *rbacv1.ClusterRole        // kgc's own permissions
	clusterRoleBinding *rbacv1.ClusterRoleBinding // grants them
	role               *rbacv1.Role               // leader election
	roleBinding        *rbacv1.RoleBinding
	// authDelegator lets kgc authenticate and authorize the requests to
	// its HTTPS port (TokenReview, SubjectAccessReview).
	authDelegator *rbacv1.ClusterRoleBinding
	// The readers' roles, bound by operators.
	metricsReader *rbacv1.ClusterRole
	debugReader   *rbacv1.ClusterRole
	inspector     *rbacv1.Role
	deployment    *appsv1.Deployment
	service       *corev1.Service
}

func decodeInstalled(t *testing.T, manifests []manifest) installed {
	t.Helper()
	var in installed
	set := func(dst any, m manifest, v any) {
		if !reflect.ValueOf(dst).Elem().IsNil() {
			t.Fatalf("%s: a second %s named %q; the tests expect exactly one", m, m.obj.GetKind(), m.obj.GetName())
		}
		reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(v))
	}
	unknown := func(m manifest) {
		t.Fatalf("%s: a %s the tests do not know (%q); teach TestManifestsCoherent about it", m, m.obj.GetKind(), m.obj.GetName())
	}
	for _, m := range manifests {
		name := m.obj.GetName()
		wantNamespace := kgcNamespace
		switch gvk := m.obj.GroupVersionKind(); gvk.GroupKind().String() {
		case "Namespace":
			set(&in.namespace, m, typed[corev1.Namespace](t, m))
		case "ServiceAccount":
			set(&in.serviceAccount, m, typed[corev1.ServiceAccount](t, m))
		case "ClusterRole.rbac.authorization.k8s.io":
			switch name {
			case "kgc":
				set(&in.clusterRole, m, typed[rbacv1.ClusterRole](t, m))
			case "kgc-metrics-reader":
				set(&in.metricsReader, m, typed[rbacv1.ClusterRole](t, m))
			case "kgc-debug-reader":
				set(&in.debugReader, m, typed[rbacv1.ClusterRole](t, m))
			default:
				unknown(m)
			}
		case "ClusterRoleBinding.rbac.authorization.k8s.io":
			switch name {
			case "kgc":
				set(&in.clusterRoleBinding, m, typed[rbacv1.ClusterRoleBinding](t, m))
			case "kgc:system:auth-delegator":
				set(&in.authDelegator, m, typed[rbacv1.ClusterRoleBinding](t, m))
			default:
				unknown(m)
			}
		case "Role.rbac.authorization.k8s.io":
			switch name {
			case "kgc-leader-election":
				set(&in.role, m, typed[rbacv1.Role](t, m))
			case "kgc-inspector":
				set(&in.inspector, m, typed[rbacv1.Role](t, m))
			default:
				unknown(m)
			}
		case "RoleBinding.rbac.authorization.k8s.io":
			switch name {
			case "kgc-leader-election":
				set(&in.roleBinding, m, typed[rbacv1.RoleBinding](t, m))
			default:
				unknown(m)
			}
		case "Deployment.apps":
			set(&in.deployment, m, typed[appsv1.Deployment](t, m))
		case "Service":
			set(&in.service, m, typed[corev1.Service](t, m))
		default:
			t.Fatalf("%s: a kind the tests do not know (%s); teach TestManifestsCoherent about it", m, gvk)
		}
		if ns := m.obj.GetNamespace(); ns != "" && ns != wantNamespace {
			t.Errorf("%s: in namespace %q, want %q", m, ns, wantNamespace)
		}
	}
	for name, v := range map[string]any{
		"Namespace": in.namespace, "ServiceAccount": in.serviceAccount,
		"ClusterRole kgc": in.clusterRole, "ClusterRoleBinding kgc": in.clusterRoleBinding,
		"Role kgc-leader-election": in.role, "RoleBinding kgc-leader-election": in.roleBinding,
		"ClusterRoleBinding kgc:system:auth-delegator": in.authDelegator,
		"ClusterRole kgc-metrics-reader":               in.metricsReader, "ClusterRole kgc-debug-reader": in.debugReader,
		"Role kgc-inspector": in.inspector,
		"Deployment":         in.deployment, "Service": in.service,
	} {
		if reflect.ValueOf(v).IsNil() {
			t.Fatalf("deploy/ has no %s", name)
		}
	}
	return in
}

// TestManifestsCoherent checks what the API server cannot: that the objects
// fit together (bindings name the role and the service account, the Service
// reaches the pods' port, the probes hit kgc's endpoints), that the role is
// the least privilege kgc needs, and that the Deployment is hardened as
// promised.
func TestManifestsCoherent(t *testing.T) {
	checkCoherent(t, loadManifests(t), placeholderImage)
}

// placeholderImage is the image deploy/ names: none is published, people
// build their own (docs/operator/install.md).
var placeholderImage = regexp.MustCompile(`^ghcr\.io/kgc-dev/kgc:latest$`)

// checkCoherent is TestManifestsCoherent's checks on a set of kgc's objects
// (deploy/'s, or a kustomization's rendering of them), whose Deployment
// runs an image wantImage matches. It returns the objects decoded.
func checkCoherent(t *testing.T, manifests []manifest, wantImage *regexp.Regexp) installed {
	t.Helper()
	in := decodeInstalled(t, manifests)

	// The namespace comes first: kubectl applies the files in name order.
	if manifests[0].obj.GetKind() != "Namespace" {
		t.Errorf("the first object of deploy/ is %s; the Namespace must come first", manifests[0])
	}
	if in.namespace.Name != kgcNamespace {
		t.Errorf("Namespace is %q, want %q", in.namespace.Name, kgcNamespace)
	}
	if got := in.namespace.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("Namespace enforces Pod Security level %q, want restricted", got)
	}

	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: in.serviceAccount.Name, Namespace: in.serviceAccount.Namespace}
	if in.serviceAccount.Name != "kgc" {
		t.Errorf("ServiceAccount is %q, want kgc (the tests impersonate system:serviceaccount:%s:kgc)", in.serviceAccount.Name, kgcNamespace)
	}

	// RBAC: the rules are pinned, and each binding grants its role to kgc alone.
	if !reflect.DeepEqual(in.clusterRole.Rules, wantClusterRoleRules) {
		t.Errorf("ClusterRole rules =\n  %+v\nwant\n  %+v", in.clusterRole.Rules, wantClusterRoleRules)
	}
	if !reflect.DeepEqual(in.role.Rules, wantLeaderElectionRules) {
		t.Errorf("Role rules =\n  %+v\nwant\n  %+v", in.role.Rules, wantLeaderElectionRules)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: in.clusterRole.Name}); in.clusterRoleBinding.RoleRef != want {
		t.Errorf("ClusterRoleBinding roleRef = %+v, want %+v", in.clusterRoleBinding.RoleRef, want)
	}
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: in.role.Name}); in.roleBinding.RoleRef != want {
		t.Errorf("RoleBinding roleRef = %+v, want %+v", in.roleBinding.RoleRef, want)
	}
	for name, subjects := range map[string][]rbacv1.Subject{"ClusterRoleBinding": in.clusterRoleBinding.Subjects, "RoleBinding": in.roleBinding.Subjects} {
		if !reflect.DeepEqual(subjects, []rbacv1.Subject{sa}) {
			t.Errorf("%s subjects = %+v, want only %+v", name, subjects, sa)
		}
	}
	if in.role.Namespace != kgcNamespace || in.roleBinding.Namespace != kgcNamespace {
		t.Errorf("the leader-election Role and RoleBinding are in %q and %q, want %q", in.role.Namespace, in.roleBinding.Namespace, kgcNamespace)
	}

	// Delegated authentication and authorization of the HTTPS port, as
	// metrics-server is granted them.
	if want := (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"}); in.authDelegator.RoleRef != want {
		t.Errorf("ClusterRoleBinding %s roleRef = %+v, want %+v", in.authDelegator.Name, in.authDelegator.RoleRef, want)
	}
	if !reflect.DeepEqual(in.authDelegator.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("%s subjects = %+v, want only %+v", in.authDelegator.Name, in.authDelegator.Subjects, sa)
	}
	// The readers' roles are pinned too: each grants one class of paths.
	if !reflect.DeepEqual(in.metricsReader.Rules, wantMetricsReaderRules) {
		t.Errorf("ClusterRole kgc-metrics-reader rules =\n  %+v\nwant\n  %+v", in.metricsReader.Rules, wantMetricsReaderRules)
	}
	if !reflect.DeepEqual(in.debugReader.Rules, wantDebugReaderRules) {
		t.Errorf("ClusterRole kgc-debug-reader rules =\n  %+v\nwant\n  %+v", in.debugReader.Rules, wantDebugReaderRules)
	}
	if !reflect.DeepEqual(in.inspector.Rules, wantInspectorRules) {
		t.Errorf("Role kgc-inspector rules =\n  %+v\nwant\n  %+v", in.inspector.Rules, wantInspectorRules)
	}

	// The Deployment.
	d := in.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("Deployment replicas = %v, want 2", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != in.serviceAccount.Name {
		t.Errorf("Deployment runs as service account %q, want %q", pod.ServiceAccountName, in.serviceAccount.Name)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Error("Deployment disables the service account token kgc authenticates with")
	}
	selector, err := labels.ValidatedSelectorFromSet(d.Spec.Selector.MatchLabels)
	if err != nil || len(d.Spec.Selector.MatchExpressions) > 0 {
		t.Fatalf("Deployment selector %+v: want matchLabels only (%v)", d.Spec.Selector, err)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("Deployment has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !wantImage.MatchString(c.Image) {
		t.Errorf("image = %q, want one matching %s", c.Image, wantImage)
	}
	if len(c.Command) > 0 {
		t.Errorf("container command = %q: leave it to the image's ENTRYPOINT", c.Command)
	}
	for _, arg := range []string{"--leader-elect", "--leader-elect-resource-namespace=" + kgcNamespace, "--secure-port=" + securePort} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("container args %q lack %s", c.Args, arg)
		}
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("container args %q: want `run` first", c.Args)
	}
	for _, a := range c.Args {
		// Plain HTTP has no authentication, and a port-forward reaches a
		// pod's loopback too.
		if strings.HasPrefix(a, "--http-address") {
			t.Errorf("container args %q: no plain HTTP in a pod", c.Args)
		}
	}
	var httpPort *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].ContainerPort == securePortNumber {
			httpPort = &c.Ports[i]
		}
	}
	if httpPort == nil || httpPort.Name == "" {
		t.Fatalf("container ports %+v: want a named port %d", c.Ports, securePortNumber)
	}
	for name, probe := range map[string]struct {
		p     *corev1.Probe
		paths []string
	}{
		"liveness":  {c.LivenessProbe, []string{"/livez", "/healthz"}},
		"readiness": {c.ReadinessProbe, []string{"/readyz"}},
	} {
		if probe.p == nil || probe.p.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP probe", name)
			continue
		}
		g := probe.p.HTTPGet
		if !slices.Contains(probe.paths, g.Path) {
			t.Errorf("%s probe path %q, want one of %q", name, g.Path, probe.paths)
		}
		if !portIs(g.Port, httpPort) {
			t.Errorf("%s probe port %s is not kgc's HTTPS port %s/%d", name, g.Port.String(), httpPort.Name, httpPort.ContainerPort)
		}
		if g.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe scheme %q, want HTTPS", name, g.Scheme)
		}
	}

	// Hardening.
	psc, sc := pod.SecurityContext, c.SecurityContext
	if psc == nil || sc == nil {
		t.Fatal("pod and container security contexts are required")
	}
	isTrue := func(b *bool) bool { return b != nil && *b }
	if !isTrue(psc.RunAsNonRoot) && !isTrue(sc.RunAsNonRoot) {
		t.Error("runAsNonRoot is not set")
	}
	if uid := psc.RunAsUser; uid == nil || *uid == 0 {
		t.Errorf("pod runAsUser = %v, want a non-zero UID", uid)
	}
	if !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Error("readOnlyRootFilesystem is not set")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if isTrue(sc.Privileged) {
		t.Error("the container is privileged")
	}
	if sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and nothing added", sc.Capabilities)
	}
	runtimeDefault := func(p *corev1.SeccompProfile) bool {
		return p != nil && p.Type == corev1.SeccompProfileTypeRuntimeDefault
	}
	if !runtimeDefault(psc.SeccompProfile) && !runtimeDefault(sc.SeccompProfile) {
		t.Error("seccomp profile RuntimeDefault is not set")
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() {
			t.Errorf("%s: want both a request and a limit (request %s, limit %s)", r, req.String(), lim.String())
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s request %s exceeds its limit %s", r, req.String(), lim.String())
		}
	}
	if m := c.Resources.Limits[corev1.ResourceMemory]; !m.IsZero() && m.Cmp(resource.MustParse("256Mi")) < 0 {
		t.Errorf("memory limit %s: kgc caches every object's metadata, give it room", m.String())
	}

	// The metrics Service reaches kgc's HTTP port on the Deployment's pods.
	s := in.service
	if !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Deployment selector %v does not match its template's labels %v", selector, d.Spec.Template.Labels)
	}
	if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("Service selector %v does not select the Deployment's pods %v", s.Spec.Selector, d.Spec.Template.Labels)
	}
	var found bool
	for _, p := range s.Spec.Ports {
		if p.Port == securePortNumber {
			found = true
			if !portIs(p.TargetPort, httpPort) {
				t.Errorf("Service port %d targets %s, not kgc's HTTPS port", securePortNumber, p.TargetPort.String())
			}
		}
	}
	if !found {
		t.Errorf("Service ports %+v: want port %d", s.Spec.Ports, securePortNumber)
	}
	return in
}

// securePort is kgc run's default --secure-port, which deploy/ serves on.
const (
	securePortNumber = app.DefaultSecurePort
)

var securePort = strconv.Itoa(securePortNumber)

// portIs reports whether a probe or Service port designates p.
func portIs(port intstr.IntOrString, p *corev1.ContainerPort) bool {
	if port.Type == intstr.String {
		return port.StrVal == p.Name
	}
	return port.IntVal == p.ContainerPort
}

// TestReadmeDeployReferences checks that every deploy/ and kustomize/ path
// the README and the documents mention exists, so that the install
// instructions do not point at removed files.
func TestReadmeDeployReferences(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	// deploy/… at the start of a path, not sandbox/integration/deploy/….
	ref := regexp.MustCompile(`(?m)(?:^|[^/\w.-])((?:deploy|kustomize)/[\w./-]*)`)
	readme := filepath.Join(repoRoot, "README.md")
	for _, path := range append(append([]string{readme}, top...), docs...) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		refs := ref.FindAllStringSubmatch(string(text), -1)
		if len(refs) == 0 && path == readme {
			t.Error("the README never mentions deploy/")
		}
		for _, r := range refs {
			if _, err := os.Stat(filepath.Join(repoRoot, r[1])); err != nil {
				t.Errorf("%s mentions %s: %v", path, r[1], err)
			}
		}
	}
	install, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operator", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(install), "deploy/20-clusterrole.yaml") {
		t.Error("the install guide does not describe deploy/20-clusterrole.yaml")
	}
}
