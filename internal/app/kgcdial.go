package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// kgcFlags say whether and how an inspection command asks a running kgc
// instead of (or besides) the API server.
//
// --ask-kgc finds the leading replica from its Lease (the holder's
// identity starts with its Pod's name) and reaches that Pod's HTTPS port
// through the API server — a port-forward, as `kubectl port-forward` makes
// it — with the caller's own credentials. Kubernetes RBAC thus decides
// twice: the API server lets the caller read the Lease and the Pod and
// port-forward to it (deploy/60-readers.yaml's Role kgc-inspector), and
// kgc, which authenticates and authorizes every request through the API
// server, lets the caller get the debug paths (ClusterRole
// kgc-debug-reader). The API server's service proxy would decide only
// the first: it reaches the Pod without the caller's identity, so kgc
// would have to trust anyone the proxy lets through.
//
// --kgc-url names a kgc directly: an https:// URL gets the caller's
// credentials too; an http:// URL (kgc run --http-address, the sandbox,
// an embedder's handler: loopback, no authentication) gets none.
type kgcFlags struct {
	ask            bool
	url            string
	leaseNamespace string
	leaseName      string
	// certificateAuthority verifies kgc's serving certificate; without it
	// the certificate is not verified (kgc's own is self-signed).
	certificateAuthority string
}

// leaseNamespaces are where the Lease is looked for without
// --lease-namespace: deploy/'s namespace, then kgc run's default.
var leaseNamespaces = []string{"kgc-system", metav1.NamespaceSystem}

func (f *kgcFlags) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&f.ask, "ask-kgc", false, "Ask the running kgc: the replica leading on the Lease (--lease-namespace, --lease-name), reached through the API server (a port-forward to its Pod's HTTPS port) with your credentials. Needs get on the Lease and the Pod and create on pods/portforward (Role kgc-inspector), and get on kgc's debug paths (ClusterRole kgc-debug-reader); deploy/60-readers.yaml has both.")
	fs.StringVar(&f.url, "kgc-url", "", "Ask the kgc at this URL instead of finding the leader: https://HOST:PORT (your credentials are sent, see --kgc-certificate-authority) or http://127.0.0.1:PORT for a loopback --http-address (nothing is sent).")
	fs.StringVar(&f.leaseNamespace, "lease-namespace", "", "Namespace of kgc's Lease (kgc run's --leader-elect-resource-namespace). Default: kgc-system (deploy/'s), then kube-system (kgc run's default).")
	fs.StringVar(&f.leaseName, "lease-name", defaultLeaseResourceName, "Name of kgc's Lease (kgc run's --leader-elect-resource-name).")
	fs.StringVar(&f.certificateAuthority, "kgc-certificate-authority", "", "A CA bundle that verifies kgc's serving certificate (kgc run --tls-cert-file). Without it the certificate is not verified: kgc's own is self-signed, and --ask-kgc's connection runs inside the API server's authenticated port-forward.")
}

func (f *kgcFlags) validate() error {
	if f.url == "" {
		return nil
	}
	u, err := url.Parse(f.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--kgc-url %q: want a URL like https://host:port or http://127.0.0.1:port", f.url)
	}
	return nil
}

// asking reports whether the command asks a running kgc.
func (f *kgcFlags) asking() bool { return f.ask || f.url != "" }

// lease reads kgc's Lease: in --lease-namespace, or the first of
// leaseNamespaces that has it.
func (f *kgcFlags) lease(ctx context.Context, cs kubernetes.Interface) (namespace, holder string, err error) {
	namespaces := leaseNamespaces
	if f.leaseNamespace != "" {
		namespaces = []string{f.leaseNamespace}
	}
	var errs []error
	for _, ns := range namespaces {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, f.leaseName, metav1.GetOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the Lease %s/%s: %w", ns, f.leaseName, err))
			continue
		}
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return ns, holder, nil
	}
	return "", "", errors.Join(errs...)
}

// errNoLeader: the Lease names no holder (kgc runs without leader
// election, or between leaders).
var errNoLeader = errors.New("no kgc holds the Lease")

// leaderPod finds the Pod of the replica holding kgc's Lease, and the
// port of its HTTPS endpoint.
func (f *kgcFlags) leaderPod(ctx context.Context, cs kubernetes.Interface) (*corev1.Pod, int, error) {
	ns, holder, err := f.lease(ctx, cs)
	if err != nil {
		return nil, 0, err
	}
	if holder == "" {
		return nil, 0, fmt.Errorf("%w %s/%s (give --kgc-url to ask a kgc without leader election)", errNoLeader, ns, f.leaseName)
	}
	// kgc run's identity: its host name, the Pod's name in a cluster, then
	// "_" and a random suffix.
	name, _, _ := strings.Cut(holder, "_")
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, 0, fmt.Errorf("the Lease %s/%s is held by %q, and there is no Pod %s/%s: is that kgc running outside the cluster? Give --kgc-url", ns, f.leaseName, holder, ns, name)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading the leader's Pod %s/%s: %w", ns, name, err)
	}
	return pod, securePortOf(pod), nil
}

// securePortOf is the Pod's container port named https, else the port its
// kgc was told (--secure-port=N), else DefaultSecurePort.
func securePortOf(pod *corev1.Pod) int {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "https" {
				return int(p.ContainerPort)
			}
		}
	}
	for _, c := range pod.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--secure-port="); ok {
				if n, err := strconv.Atoi(v); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return DefaultSecurePort
}

// kgcConn is a way to a running kgc: its base URL and a client that
// reaches it; close ends it.
type kgcConn struct {
	base   string
	client *http.Client
	close  func()
}

// dial reaches the kgc the flags name. cfg is the caller's API server
// config (credentials, impersonation).
func (f *kgcFlags) dial(ctx context.Context, cfg *rest.Config, deps InspectDeps, timeout time.Duration) (*kgcConn, error) {
	if deps.HTTPClient != nil && f.url != "" {
		return &kgcConn{base: f.url, client: deps.HTTPClient, close: func() {}}, nil
	}
	if f.url != "" {
		u, _ := url.Parse(f.url)
		if u.Scheme == "http" {
			// Plain HTTP: no credentials go over it.
			return &kgcConn{base: f.url, client: &http.Client{Timeout: timeout}, close: func() {}}, nil
		}
		hc, err := f.httpsClient(cfg, timeout)
		if err != nil {
			return nil, err
		}
		return &kgcConn{base: f.url, client: hc, close: func() {}}, nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pod, port, err := f.leaderPod(ctx, cs)
	if err != nil {
		return nil, err
	}
	forward := deps.Forward
	if forward == nil {
		forward = portForward
	}
	local, stop, err := forward(ctx, cfg, pod, port)
	if err != nil {
		return nil, fmt.Errorf("reaching kgc's leader %s/%s port %d: %w", pod.Namespace, pod.Name, port, err)
	}
	hc, err := f.httpsClient(cfg, timeout)
	if err != nil {
		stop()
		return nil, err
	}
	return &kgcConn{base: "https://" + local, client: hc, close: func() { hc.CloseIdleConnections(); stop() }}, nil
}

// httpsClient sends the caller's credentials (bearer token, client
// certificate, exec plugin, impersonation) to kgc, whose certificate it
// verifies with --kgc-certificate-authority if given.
func (f *kgcFlags) httpsClient(cfg *rest.Config, timeout time.Duration) (*http.Client, error) {
	c := rest.CopyConfig(cfg)
	c.TLSClientConfig.CAFile, c.TLSClientConfig.CAData = f.certificateAuthority, nil
	c.TLSClientConfig.ServerName = ""
	c.TLSClientConfig.Insecure = f.certificateAuthority == ""
	c.Timeout = timeout
	rt, err := rest.TransportFor(c)
	if err != nil {
		return nil, fmt.Errorf("a client for kgc: %w", err)
	}
	return &http.Client{Transport: rt, Timeout: timeout}, nil
}

// ForwardFunc opens a tunnel to port of pod and returns a local address
// (host:port) that reaches it, and how to close it.
type ForwardFunc func(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, port int) (local string, stop func(), err error)

// portForward is `kubectl port-forward`'s tunnel: the pods/portforward
// subresource over WebSockets, falling back to SPDY where the API server
// (or a proxy in between) cannot upgrade, on an ephemeral loopback port.
func portForward(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, port int) (string, func(), error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg); err == nil {
		dialer = portforward.NewFallbackDialerForStreaming(ws, dialer, func(err error) bool {
			return streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)
		})
	}
	stopCh, ready := make(chan struct{}), make(chan struct{})
	pf, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stopCh, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	errc, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		errc <- pf.ForwardPorts()
	}()
	var once sync.Once
	halt := func() { once.Do(func() { close(stopCh) }) }
	// stop returns once the forwarder closed its local listener (bounded,
	// should it hang): a caller that stops it knows the port is free again,
	// not about to be.
	stop := func() {
		halt()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	select {
	case <-ready:
	case err := <-errc:
		return "", nil, err
	case <-ctx.Done():
		halt() // the dial may still be on its way: do not wait for it
		return "", nil, ctx.Err()
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, fmt.Errorf("port-forward: no local port: %w", err)
	}
	return "127.0.0.1:" + strconv.Itoa(int(ports[0].Local)), stop, nil
}
