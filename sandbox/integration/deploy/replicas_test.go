package deploy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
)

// TestDeploymentReplicas runs what the Deployment runs: two `kgc run`
// processes of the binary built the Dockerfile's way, with the Deployment's
// arguments, authenticated as kgc's service account (an impersonating
// kubeconfig stands in for the in-cluster token). One leads — holding the
// Lease the Role grants — and collects a cascade; both serve the probes'
// endpoints to anyone and /metrics to a service account bound to
// kgc-metrics-reader, over HTTPS.
func TestDeploymentReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the kgc binary")
	}
	in := applyRBAC(t)
	impersonated := impersonating(in.serviceAccount.Namespace, in.serviceAccount.Name)
	kubeconfig := impersonatingKubeconfig(t, impersonated.Impersonate.UserName, impersonated.Impersonate.Groups)
	c := deploymentContainer(t)
	bin := buildAsDockerfile(t)

	var replicas []*process
	for i := range 2 {
		addr := freeAddress(t)
		args := withSecurePort(c.Args, addr) // each replica has its own pod IP
		args = append(args, "--kubeconfig="+kubeconfig)
		replicas = append(replicas, startProcess(t, fmt.Sprintf("replica-%d", i), bin, addr, args))
	}
	prometheus := serviceAccountToken(t, "prometheus", "kgc-metrics-reader")

	// Both live.
	for _, r := range replicas {
		r.waitStatus(t, "/livez", http.StatusOK)
	}
	// One leads: it holds the Lease, and its monitors sync (ready, and not
	// standing by; a standby is ready too).
	leases := kubeClient.CoordinationV1().Leases(kgcNamespace)
	var holder string
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(ctx context.Context) (bool, error) {
		lease, err := leases.Get(ctx, "kgc", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if h := lease.Spec.HolderIdentity; h != nil {
			holder = *h
		}
		return holder != "", nil
	})
	if err != nil {
		t.Fatalf("no replica took the Lease %s/kgc within %s\n%s", kgcNamespace, waitTimeout, logs(replicas))
	}
	var leader, standby *process
	err = wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		for i, r := range replicas {
			if r.status("/readyz") == http.StatusOK && !strings.Contains(r.body("/readyz?verbose"), "standby") {
				leader, standby = r, replicas[1-i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no replica became ready within %s (Lease holder %q)\n%s", waitTimeout, holder, logs(replicas))
	}
	t.Logf("%s leads (Lease holder %q)", leader.name, holder)

	t.Run("the leader collects", func(t *testing.T) {
		ns := createNamespace(t)
		owner := createConfigMap(t, ns, "owner")
		deps := createDependents(t, ns, owner, 3, false)
		deleteConfigMap(t, owner, metav1.DeletePropagationBackground)
		waitGone(t, deps...)
	})

	t.Run("metrics", func(t *testing.T) {
		body := leader.getAs(t, "/metrics", prometheus.token)
		if !strings.Contains(body, "kgc_graph_nodes") {
			t.Errorf("%s /metrics has no kgc_graph_nodes:\n%.2000s", leader.name, body)
		}
	})

	// A standby must be ready too: with 2 replicas the Deployment's rolling
	// update (maxSurge 1, maxUnavailable 0) waits for each new pod — a
	// standby while the old leader holds the Lease — to become ready.
	t.Run("standby is ready", func(t *testing.T) {
		if code := standby.status("/livez"); code != http.StatusOK {
			t.Errorf("%s /livez = %d", standby.name, code)
		}
		if code := standby.status("/readyz"); code != http.StatusOK {
			t.Errorf("%s (standby) /readyz = %d, want 200: a Deployment could never roll out. Body: %q", standby.name, code, standby.body("/readyz"))
		}
		if body := standby.body("/readyz?verbose"); !strings.Contains(body, "standby") {
			t.Errorf("%s (standby) /readyz?verbose does not say it stands by: %q", standby.name, body)
		}
	})
}

// impersonatingKubeconfig writes a copy of the admin kubeconfig whose users
// impersonate user and groups (kubectl's --as and --as-group).
func impersonatingKubeconfig(t *testing.T, user string, groups []string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
		ai.ImpersonateGroups = groups
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// freeAddress returns a loopback address with a port free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// withSecurePort returns the Deployment's kgc arguments serving HTTPS on
// addr (a loopback host:port) instead of the pod's port.
func withSecurePort(args []string, addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "--secure-port=") && !strings.HasPrefix(a, "--bind-address=") {
			out = append(out, a)
		}
	}
	return append(out, "--secure-port="+port, "--bind-address="+host)
}

// process is a running kgc binary serving HTTPS on addr.
type process struct {
	name string
	addr string
	cmd  *exec.Cmd
	out  *syncBuffer
	http *http.Client
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProcess starts bin and, when the test ends, stops it as the kubelet
// does (SIGTERM, then SIGKILL after a grace period).
func startProcess(t *testing.T, name, bin, addr string, args []string) *process {
	t.Helper()
	p := &process{
		name: name, addr: addr, out: &syncBuffer{},
		// kgc's certificate is self-signed, as the kubelet's probes and
		// Prometheus (insecure_skip_verify) meet it.
		http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}},
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: kgc %s", name, strings.Join(args, " "))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.http.CloseIdleConnections()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM\n%s", name, err, p.out.String())
			}
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
			t.Errorf("%s did not exit within 30s of SIGTERM\n%s", name, p.out.String())
		}
	})
	return p
}

// request GETs path anonymously.
func (p *process) request(path string) (int, string) { return p.requestWith(path, nil) }

// requestWith GETs path with header (credentials, impersonation).
func (p *process) requestWith(path string, header http.Header) (int, string) {
	req, err := http.NewRequest(http.MethodGet, "https://"+p.addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getAs GETs path with a bearer token and requires 200.
func (p *process) getAs(t *testing.T, path, token string) string {
	t.Helper()
	code, body := p.requestWith(path, bearer(token))
	if code != http.StatusOK {
		t.Fatalf("%s GET %s: %d %s", p.name, path, code, body)
	}
	return body
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

func (p *process) status(path string) int { code, _ := p.request(path); return code }

func (p *process) body(path string) string { _, b := p.request(path); return b }

func (p *process) waitStatus(t *testing.T, path string, want int) {
	t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, waitTimeout, true, func(context.Context) (bool, error) {
		got = p.status(path)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("%s GET %s: %d, want %d within %s\n%s", p.name, path, got, want, waitTimeout, p.out.String())
	}
}

func logs(ps []*process) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "--- %s:\n%s\n", p.name, p.out.String())
	}
	return b.String()
}
