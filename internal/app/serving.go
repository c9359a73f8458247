package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/filters/impersonation"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	apiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	apiserveroptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// DefaultSecurePort is `kgc run`'s --secure-port. Kubernetes gives its own
// components the ports 10248–10260 (the kubelet 10248, 10250 and 10255,
// kube-proxy 10249 and 10256, kube-controller-manager 10257,
// cloud-controller-manager 10258 and its webhook 10260, kube-scheduler
// 10259), and the ports right after that block are where guides move a
// second scheduler or controller manager and where OpenYurt's node agents
// listen (10261–10268). kgc may run with the host's network on a
// control-plane node beside all of them, so it takes a port clear of that
// range, of etcd (2379–2381) and of kube-apiserver (6443).
const DefaultSecurePort = 10355

// serverShutdownTimeout bounds how long the HTTP servers let requests
// finish once kgc stops.
const serverShutdownTimeout = 5 * time.Second

// ServingOptions are the flags of `kgc run`'s HTTP endpoints. The secure
// port is kube-controller-manager's: HTTPS (a self-signed certificate
// unless one is given), delegated authentication (TokenReview, client
// certificates and the front proxy's request headers, as the cluster
// configures them) and delegated authorization (SubjectAccessReview on
// non-resource URLs), with the paths of --authorization-always-allow-paths
// (the health checks) open to anyone. The plain HTTP address is for local
// use only: loopback, no authentication.
type ServingOptions struct {
	SecureServing  *apiserveroptions.SecureServingOptions
	Authentication *apiserveroptions.DelegatingAuthenticationOptions
	Authorization  *apiserveroptions.DelegatingAuthorizationOptions
	// HTTPAddress is the plain HTTP listener; empty: none.
	HTTPAddress string
}

// NewServingOptions returns the defaults: HTTPS on DefaultSecurePort on
// every interface, no plain HTTP.
func NewServingOptions() ServingOptions {
	s := apiserveroptions.NewSecureServingOptions()
	s.BindPort = DefaultSecurePort
	// A certificate generated in memory unless --tls-cert-file or
	// --cert-dir says otherwise, as kube-controller-manager does: kgc's
	// root filesystem is read-only.
	s.ServerCert.CertDirectory = ""
	s.ServerCert.PairName = "kgc"
	authn := apiserveroptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFileOptional = true
	authz := apiserveroptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFileOptional = true
	return ServingOptions{SecureServing: s, Authentication: authn, Authorization: authz}
}

// AddFlags registers the options on fs.
func (o *ServingOptions) AddFlags(fs *pflag.FlagSet) {
	o.SecureServing.AddFlags(fs)
	o.Authentication.AddFlags(fs)
	o.Authorization.AddFlags(fs)
	fs.StringVar(&o.HTTPAddress, "http-address", o.HTTPAddress, "A loopback address (127.0.0.1:PORT, [::1]:PORT or localhost:PORT) on which to also serve every endpoint over plain HTTP, without authentication or authorization, for local use. Empty (the default): none. Everything else goes through --secure-port.")
	fs.Lookup("secure-port").Usage = fmt.Sprintf("The port on which to serve HTTPS with authentication and authorization: /healthz, /livez, /readyz (open to anyone, see --authorization-always-allow-paths), /metrics, the debug graph, history, holds, shadow comparison, /ui and /debug/pprof. 0: no HTTPS. The default, %d, is clear of every Kubernetes component's port (docs/operator/security.md).", DefaultSecurePort)
}

// complete points the delegated authentication and authorization at kgc's
// own API server and identity when they are not given and --kubeconfig is:
// kube-controller-manager falls back to the in-cluster service account
// only, which in a cluster is where kgc's client comes from too.
func (o *ServingOptions) complete(kubeconfig string) {
	if kubeconfig == "" {
		return
	}
	if o.Authentication.RemoteKubeConfigFile == "" {
		o.Authentication.RemoteKubeConfigFile = kubeconfig
	}
	if o.Authorization.RemoteKubeConfigFile == "" {
		o.Authorization.RemoteKubeConfigFile = kubeconfig
	}
}

// Validate returns every problem with the options.
func (o *ServingOptions) Validate() []error {
	var errs []error
	errs = append(errs, o.SecureServing.Validate()...)
	errs = append(errs, o.Authentication.Validate()...)
	errs = append(errs, o.Authorization.Validate()...)
	if _, err := path.NewAuthorizer(o.Authorization.AlwaysAllowPaths); err != nil {
		errs = append(errs, fmt.Errorf("--authorization-always-allow-paths: %w", err))
	}
	if o.HTTPAddress != "" {
		if err := validateLoopback(o.HTTPAddress); err != nil {
			errs = append(errs, fmt.Errorf("--http-address %q: %w", o.HTTPAddress, err))
		}
	}
	return errs
}

// errNotLoopback: plain HTTP has no authentication, so it listens where
// only the host (or the pod) can reach it.
var errNotLoopback = errors.New("plain HTTP serves every endpoint without authentication, so it must listen on a loopback address (127.0.0.1, ::1 or localhost); use --secure-port for anything else")

func validateLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return errors.New("port must be a number from 0 to 65535")
	}
	if host == "localhost" {
		return nil
	}
	if ip := netutils.ParseIPSloppy(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errNotLoopback
}

// secureServer is the secure port, ready to serve.
type secureServer struct {
	info    *apiserver.SecureServingInfo
	handler http.Handler
}

// newSecureServer binds the secure port and builds its authentication and
// authorization, as kube-controller-manager does before it serves. nil
// when --secure-port is 0.
func (o *ServingOptions) newSecureServer(mux http.Handler) (*secureServer, error) {
	if o.SecureServing.BindPort == 0 && o.SecureServing.Listener == nil {
		return nil, nil
	}
	if err := o.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil, []net.IP{netutils.ParseIPSloppy("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("creating a self-signed certificate: %w", err)
	}
	var info *apiserver.SecureServingInfo
	if err := o.SecureServing.ApplyTo(&info); err != nil {
		return nil, fmt.Errorf("--secure-port: %w", err)
	}
	var authn apiserver.AuthenticationInfo
	if err := o.Authentication.ApplyTo(&authn, info, nil); err != nil {
		_ = info.Listener.Close()
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	var authz apiserver.AuthorizationInfo
	if err := o.Authorization.ApplyTo(&authz); err != nil {
		_ = info.Listener.Close()
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	open, err := path.NewAuthorizer(o.Authorization.AlwaysAllowPaths)
	if err != nil {
		_ = info.Listener.Close()
		return nil, fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	return &secureServer{info: info, handler: secureHandler(mux, authn.Authenticator, authz.Authorizer, open)}, nil
}

// secureHandler puts mux behind the filters kube-controller-manager's
// secure port has (k8s.io/controller-manager's BuildHandlerChain), plus
// two:
//
//   - impersonation, checked by the same delegated authorizer as in the
//     API server, so that kubectl's --as reaches kgc as it reaches the API
//     server;
//   - anonymous requests are authenticated only on the paths open to
//     anyone (open: --authorization-always-allow-paths): elsewhere a
//     request without credentials is answered 401, as kube-apiserver
//     answers it with anonymous authentication limited to its health
//     paths, rather than kube-controller-manager's 403 for
//     system:anonymous.
func secureHandler(mux http.Handler, authn authenticator.Request, authz authorizer.Authorizer, open authorizer.Authorizer) http.Handler {
	resolver := &apirequest.RequestInfoFactory{}
	h := genericapifilters.WithAuthorization(mux, authz, scheme.Codecs)
	h = impersonation.WithImpersonation(h, authz, scheme.Codecs)
	h = genericapifilters.WithAuthentication(h, anonymousOnlyWhereOpen(authn, open), genericapifilters.Unauthorized(scheme.Codecs), nil, nil)
	h = genericapifilters.WithRequestInfo(h, resolver)
	h = genericapifilters.WithCacheControl(h)
	h = genericfilters.WithHTTPLogging(h)
	return genericfilters.WithPanicRecovery(h, resolver)
}

// anonymousOnlyWhereOpen keeps authn's answer, except that a request it
// finds anonymous is not authenticated outside the paths open allows.
func anonymousOnlyWhereOpen(authn authenticator.Request, open authorizer.Authorizer) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := authn.AuthenticateRequest(req)
		if !ok || resp.User.GetName() != user.Anonymous {
			return resp, ok, err
		}
		d, _, _ := open.Authorize(req.Context(), authorizer.AttributesRecord{User: resp.User, Verb: verbOf(req), Path: req.URL.Path})
		if d != authorizer.DecisionAllow {
			return nil, false, err
		}
		return resp, ok, err
	})
}

func verbOf(req *http.Request) string {
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		return "get"
	}
	return req.Method
}

// serving is what start started; wait returns once both servers stopped.
type serving struct {
	secureAddr, plainAddr string
	wait                  func()
}

// start serves handler on the secure port and, if asked, on the loopback
// plain HTTP address, until ctx is done; a server that fails later sends
// its error to errc.
func (o *ServingOptions) start(ctx context.Context, handler http.Handler, errc chan<- error) (*serving, error) {
	logger := klog.FromContext(ctx)
	s := &serving{}
	var waits []func()
	sec, err := o.newSecureServer(handler)
	if err != nil {
		return nil, err
	}
	var plain net.Listener
	if o.HTTPAddress != "" {
		if plain, err = net.Listen("tcp", o.HTTPAddress); err != nil {
			if sec != nil {
				_ = sec.info.Listener.Close()
			}
			return nil, fmt.Errorf("listening on --http-address: %w", err)
		}
	}
	if sec != nil {
		s.secureAddr = sec.info.Listener.Addr().String()
		stopped, _, err := sec.info.Serve(sec.handler, serverShutdownTimeout, ctx.Done())
		if err != nil {
			if plain != nil {
				_ = plain.Close()
			}
			return nil, fmt.Errorf("serving on --secure-port: %w", err)
		}
		logger.Info("Serving securely", "address", s.secureAddr)
		waits = append(waits, func() { <-stopped })
	}
	if plain != nil {
		s.plainAddr = plain.Addr().String()
		srv := &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      2 * time.Minute,
			IdleTimeout:       2 * time.Minute,
		}
		logger.Info("Serving plain HTTP on loopback, without authentication", "address", s.plainAddr)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := srv.Serve(plain); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("http server: %w", err)
			}
		}()
		go func() {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), serverShutdownTimeout)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		waits = append(waits, func() { <-done })
	}
	s.wait = func() {
		for _, w := range waits {
			w()
		}
	}
	return s, nil
}
