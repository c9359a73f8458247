package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/kubernetes/pkg/controlplane/reconcilers"
)

const (
	// apiReadyTimeout bounds how long Start waits for /readyz and the
	// default namespace; a healthy apiserver needs a few seconds.
	apiReadyTimeout = 2 * time.Minute
	// serviceAccountIssuer is the issuer kube-apiserver puts in service
	// account tokens; it only has to be a stable URL.
	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// serviceClusterIPRange is where Service ClusterIPs are allocated.
	// Nothing routes to them: there is no kube-proxy.
	serviceClusterIPRange = "10.96.0.0/16"

	// watchTerminationGrace is kube-apiserver's
	// --shutdown-watch-termination-grace-period. Any positive value makes
	// the server end every open watch as soon as it stops accepting
	// requests, and then wait at most this long for those watch handlers to
	// return. With the default (zero) watches are neither ended nor
	// counted, and the HTTP server's graceful shutdown waits for them until
	// its timeout, the request timeout (a minute).
	watchTerminationGrace = time.Second
	// stopGrace is how long Stop lets kube-apiserver drain on its own
	// before it closes the client connections still open (requests that
	// ignore the shutdown, a client too slow to take a watch's last
	// events). A normal shutdown takes well under a second.
	stopGrace = 5 * time.Second
	// stopTimeout bounds the whole of Stop's wait for kube-apiserver; it
	// only keeps a wedged shutdown from hanging the caller forever.
	stopTimeout = time.Minute
	// listenRetryTimeout bounds how long a restarted apiserver waits for
	// its predecessor's port to be free.
	listenRetryTimeout = 10 * time.Second
)

// apiServer is a kube-apiserver running in a goroutine.
type apiServer struct {
	config *rest.Config
	// cancel cancels the apiserver's context; done then yields Run's result
	// and is closed once the goroutine has returned.
	cancel context.CancelFunc
	done   <-chan error
	// listener is the serving listener; it knows the open connections.
	listener *trackingListener
}

// stop shuts kube-apiserver down and waits for Run to return. Clients may
// still be connected: open watches are ended by the server itself (see
// watchTerminationGrace), and whatever connection still holds the shutdown
// up after stopGrace is closed under it. Connections the HTTP server no
// longer tracks (hijacked ones: websocket watches, upgrades) are closed
// once Run has returned, so that no handler outlives the server.
func (a *apiServer) stop() error {
	a.cancel()
	defer a.listener.closeConns()

	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case err := <-a.done:
		return err
	case <-grace.C:
	}
	a.listener.closeConns()
	timeout := time.NewTimer(stopTimeout - stopGrace)
	defer timeout.Stop()
	select {
	case err := <-a.done:
		return err
	case <-timeout.C:
		return fmt.Errorf("did not stop within %v", stopTimeout)
	}
}

// startAPIServer builds kube-apiserver's options the way its command line
// would, runs the server chain (aggregator → kube APIs → apiextensions) and
// waits until it is ready. A non-nil *apiServer is returned whenever a
// goroutine was started, even with an error, so that the caller can stop it.
//
// addr is where to listen: "127.0.0.1:0" for a port the kernel picks, or the
// address of a previous apiserver of the same control plane when it is
// restarted (a port closed a moment ago may take a moment to free up).
func startAPIServer(startCtx context.Context, etcdURL string, pki pkiFiles, addr string, watchCacheSizes []string) (*apiServer, error) {
	s := options.NewServerRunOptions()

	// A registry per server (see newComponentRegistry).
	registry, err := newComponentRegistry()
	if err != nil {
		return nil, err
	}
	if err := registry.Set(); err != nil {
		return nil, fmt.Errorf("setting component globals: %w", err)
	}
	s.GenericServerRunOptions.ComponentGlobalsRegistry = registry

	// Serving: loopback only, on a port the kernel picks. Handing the
	// listener over (instead of a port number) leaves no race.
	listener, err := listen(startCtx, addr)
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	loopbackIP := net.IPv4(127, 0, 0, 1)
	tracking := newTrackingListener(listener)
	s.SecureServing.Listener = tracking
	s.SecureServing.BindAddress = loopbackIP
	s.SecureServing.BindPort = listener.Addr().(*net.TCPAddr).Port
	// Also the advertise address: without it the apiserver would look for
	// a non-loopback interface, which a sandboxed machine may not have.
	s.SecureServing.ExternalAddress = loopbackIP
	s.GenericServerRunOptions.AdvertiseAddress = loopbackIP
	// The serving certificate (for 127.0.0.1) and the admin token come
	// from files in the PKI directory, not from the apiserver's in-memory
	// loopback credentials: those are new with every start, while clients
	// must keep working across a restart of the apiserver.
	s.SecureServing.ServerCert.CertDirectory = pki.dir
	s.SecureServing.ServerCert.CertKey.CertFile = pki.servingCert
	s.SecureServing.ServerCert.CertKey.KeyFile = pki.servingKey
	s.Authentication.TokenFile.TokenFile = pki.tokenFile
	caPEM, err := os.ReadFile(pki.servingCA)
	if err != nil {
		listener.Close()
		return nil, fmt.Errorf("reading serving CA: %w", err)
	}
	// Resources whose watch cache is disabled (resource[.group]#0): their
	// lists and watches go to etcd itself.
	s.Etcd.WatchCacheSizes = watchCacheSizes

	// End open watches at shutdown instead of waiting for their clients
	// to hang up; see watchTerminationGrace.
	s.GenericServerRunOptions.ShutdownWatchTerminationGracePeriod = watchTerminationGrace

	s.Etcd.StorageConfig.Transport.ServerList = []string{etcdURL}
	s.ServiceClusterIPRanges = serviceClusterIPRange
	// The endpoint reconciler publishes the advertise address as the
	// endpoint of the "kubernetes" Service, and Endpoints reject loopback
	// addresses; nothing in the sandbox reaches the apiserver through that
	// Service anyway. The Service itself is still created.
	s.Extra.EndpointReconcilerType = string(reconcilers.NoneEndpointReconcilerType)

	// Service account tokens: kube-apiserver refuses to start without an
	// issuer and a signing key.
	s.ServiceAccountSigningKeyFile = pki.serviceAccountKey
	s.Authentication.ServiceAccounts.KeyFiles = []string{pki.serviceAccountKey}
	s.Authentication.ServiceAccounts.Issuers = []string{serviceAccountIssuer}

	// Front proxy: lets the aggregator authenticate to aggregated API
	// servers, and those servers trust the identity headers it forwards.
	s.Authentication.RequestHeader.ClientCAFile = pki.frontProxyCA
	s.Authentication.RequestHeader.AllowedNames = []string{frontProxyClientName}
	s.Authentication.RequestHeader.UsernameHeaders = []string{"X-Remote-User"}
	s.Authentication.RequestHeader.UIDHeaders = []string{"X-Remote-Uid"}
	s.Authentication.RequestHeader.GroupHeaders = []string{"X-Remote-Group"}
	s.Authentication.RequestHeader.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
	s.ProxyClientCertFile = pki.frontProxyClientCert
	s.ProxyClientKeyFile = pki.frontProxyClientKey

	// RBAC rather than the AlwaysAllow default, so that permissions can be
	// tested through impersonation. The admin loopback identity is in
	// system:masters and unaffected.
	s.Authorization.Modes = []string{"RBAC"}

	// No controller manager creates service accounts, so the admission
	// plugin that requires them would reject every Pod.
	s.Admission.GenericAdmission.DisablePlugins = []string{"ServiceAccount"}

	// The server lives until stop is called, not until startCtx ends.
	ctx, cancel := context.WithCancel(context.Background())
	abort := func(err error) (*apiServer, error) {
		cancel()
		return nil, err
	}

	completed, err := s.Complete(ctx)
	if err != nil {
		listener.Close()
		return abort(fmt.Errorf("completing options: %w", err))
	}
	if errs := completed.Validate(); len(errs) != 0 {
		listener.Close()
		return abort(fmt.Errorf("validating options: %w", utilerrors.NewAggregate(errs)))
	}
	config, err := app.NewConfig(completed)
	if err != nil {
		listener.Close()
		return abort(fmt.Errorf("building config: %w", err))
	}
	completedConfig, err := config.Complete()
	if err != nil {
		listener.Close()
		return abort(fmt.Errorf("completing config: %w", err))
	}
	server, err := app.CreateServerChain(completedConfig)
	if err != nil {
		listener.Close()
		return abort(fmt.Errorf("creating server chain: %w", err))
	}

	done := make(chan error, 1)
	go func() {
		defer close(done)
		prepared, err := server.PrepareRun()
		if err != nil {
			listener.Close()
			done <- fmt.Errorf("preparing to run: %w", err)
			return
		}
		// Run closes the listener when ctx ends.
		done <- prepared.Run(ctx)
	}()
	api := &apiServer{cancel: cancel, done: done, listener: tracking}

	cfg := &rest.Config{
		Host:            "https://" + listener.Addr().String(),
		BearerToken:     pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		QPS:             1000,
		Burst:           10000,
	}
	if err := waitReady(startCtx, cfg, done); err != nil {
		return api, err
	}
	api.config = cfg
	return api, nil
}

// listen listens on addr, retrying for a while if the address is still in
// use (a restarted apiserver takes over its predecessor's port).
func listen(ctx context.Context, addr string) (net.Listener, error) {
	ctx, cancel := context.WithTimeout(ctx, listenRetryTimeout)
	defer cancel()
	for {
		l, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (still in use after %v)", err, listenRetryTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady polls until /readyz answers ok and the default namespace exists
// (the bootstrap controller creates it shortly after the server starts
// serving; clients expect it).
func waitReady(ctx context.Context, cfg *rest.Config, done <-chan error) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, apiReadyTimeout)
	defer cancel()

	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	var lastErr error
	for {
		select {
		case err, ok := <-done:
			if !ok || err == nil {
				err = errors.New("exited without error")
			}
			return fmt.Errorf("kube-apiserver stopped while starting: %w", err)
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("waiting for readiness: %w (last: %w)", ctx.Err(), lastErr)
			}
			return fmt.Errorf("waiting for readiness: %w", ctx.Err())
		case <-ticker.C:
		}
		if lastErr = checkReady(ctx, client); lastErr == nil {
			return nil
		}
	}
}

func checkReady(ctx context.Context, client kubernetes.Interface) error {
	var status int
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status).Raw()
	if status != http.StatusOK {
		return fmt.Errorf("/readyz: status %d: %s (%w)", status, body, err)
	}
	if _, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return errors.New("default namespace not created yet")
		}
		return fmt.Errorf("getting default namespace: %w", err)
	}
	return nil
}

// trackingListener records the connections it accepts until they are
// closed, so that Stop can close those the apiserver's graceful shutdown
// would wait for or does not know about. Closing the listener itself stays
// the HTTP server's business: kube-apiserver panics if Serve fails before
// it asked for the shutdown.
type trackingListener struct {
	net.Listener

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// closing is set by closeConns; connections accepted afterwards are
	// closed at once.
	closing bool
}

func newTrackingListener(l net.Listener) *trackingListener {
	return &trackingListener{Listener: l, conns: make(map[*trackedConn]struct{})}
}

// Accept returns the next connection, wrapped so that closing it forgets
// it. Accepted TCP connections already have keep-alive enabled by package
// net, which is all the apiserver's own listener wrapper would add.
func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	closing := l.closing
	if !closing {
		l.conns[tc] = struct{}{}
	}
	l.mu.Unlock()
	if closing {
		// Not an error from Accept, which would end Serve (see above):
		// the server sees a dead connection and drops it.
		c.Close()
	}
	return tc, nil
}

// closeConns closes every open connection, and those accepted from now on.
func (l *trackingListener) closeConns() {
	l.mu.Lock()
	l.closing = true
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l *trackingListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
