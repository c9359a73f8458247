package app

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/apiserver/pkg/authorization/union"
)

// fakeAuth stands in for the API server's TokenReview and
// SubjectAccessReview: tokens name users, and each user may get some
// paths (and impersonate some users).
type fakeAuth struct {
	tokens      map[string]string   // bearer token -> user
	paths       map[string][]string // user -> paths it may get
	impersonate map[string][]string // user -> users it may impersonate
}

// authenticator is what the delegating authenticator is: a token, or else
// anonymous.
func (f fakeAuth) authenticator() authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		if tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok {
			if name, ok := f.tokens[tok]; ok {
				return &authenticator.Response{User: &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}}, true, nil
			}
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
	})
}

func (f fakeAuth) authorizer(t *testing.T, open []string) (authz, openAuthz authorizer.Authorizer) {
	openAuthz, err := path.NewAuthorizer(open)
	if err != nil {
		t.Fatal(err)
	}
	sar := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetVerb() == "impersonate" && a.GetResource() == "users" {
			for _, u := range f.impersonate[a.GetUser().GetName()] {
				if u == a.GetName() {
					return authorizer.DecisionAllow, "", nil
				}
			}
			return authorizer.DecisionNoOpinion, "", nil
		}
		for _, p := range f.paths[a.GetUser().GetName()] {
			if !a.IsResourceRequest() && a.GetVerb() == "get" && (p == a.GetPath() || strings.HasSuffix(p, "*") && strings.HasPrefix(a.GetPath(), strings.TrimSuffix(p, "*"))) {
				return authorizer.DecisionAllow, "", nil
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	// As DelegatingAuthorizationOptions builds it: open paths first.
	return union.New(openAuthz, sar), openAuthz
}

// whoAmI answers every path with the user the request reached it as.
var whoAmI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "ok")
})

func TestSecureHandlerAuthenticatesAndAuthorizes(t *testing.T) {
	f := fakeAuth{
		tokens: map[string]string{"metrics": "prometheus", "debug": "alice", "nobody": "bob", "admin": "admin"},
		paths: map[string][]string{
			"prometheus": {"/metrics"},
			"alice":      {"/debug/controllers/garbage-collector-controller/*", "/ui", "/ui/*", "/debug/pprof/*"},
		},
		impersonate: map[string][]string{"admin": {"alice"}},
	}
	authz, open := f.authorizer(t, NewServingOptions().Authorization.AlwaysAllowPaths)
	srv := httptest.NewServer(secureHandler(whoAmI, f.authenticator(), authz, open))
	defer srv.Close()

	const graph = "/debug/controllers/garbage-collector-controller/graph"
	for _, tc := range []struct {
		name, path, token, as string
		want                  int
	}{
		{"anonymous: health", "/healthz", "", "", 200},
		{"anonymous: liveness", "/livez", "", "", 200},
		{"anonymous: readiness", "/readyz", "", "", 200},
		{"anonymous: metrics", "/metrics", "", "", 401},
		{"anonymous: graph", graph, "", "", 401},
		{"anonymous: ui", "/ui", "", "", 401},
		{"anonymous: pprof", "/debug/pprof/", "", "", 401},
		{"a bad token: health", "/healthz", "wrong", "", 401},
		{"a bad token: metrics", "/metrics", "wrong", "", 401},
		{"no role: metrics", "/metrics", "nobody", "", 403},
		{"no role: graph", graph, "nobody", "", 403},
		{"no role: health", "/healthz", "nobody", "", 200},
		{"metrics reader: metrics", "/metrics", "metrics", "", 200},
		{"metrics reader: graph", graph, "metrics", "", 403},
		{"debug reader: graph", graph, "debug", "", 200},
		{"debug reader: ui", "/ui", "debug", "", 200},
		{"debug reader: pprof", "/debug/pprof/heap", "debug", "", 200},
		{"debug reader: metrics", "/metrics", "debug", "", 403},
		{"impersonating the debug reader: graph", graph, "admin", "alice", 200},
		{"impersonating without the right", graph, "nobody", "alice", 403},
		{"anonymous impersonating", graph, "", "alice", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.as != "" {
				req.Header.Set("Impersonate-User", tc.as)
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Errorf("GET %s: %d, want %d: %s", tc.path, res.StatusCode, tc.want, body)
			}
		})
	}
}

// kgc run serves HTTPS with a certificate of its own and refuses
// anonymous requests outside the health paths; the loopback listener
// serves everything in plain HTTP.
func TestStartServesTLSAndLoopback(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster: no delegated client
	o := NewServingOptions()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.SecureServing.Listener = ln
	o.Authentication.SkipInClusterLookup = true
	o.HTTPAddress = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 2)
	s, err := o.start(ctx, whoAmI, errc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); s.wait() }()

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(url string) (int, *tls.ConnectionState) {
		res, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.TLS
	}
	code, st := get("https://" + s.secureAddr + "/healthz")
	if code != 200 {
		t.Errorf("https /healthz: %d", code)
	}
	if st == nil || len(st.PeerCertificates) == 0 {
		t.Fatal("no TLS")
	}
	if cert := st.PeerCertificates[0]; !strings.Contains(cert.Subject.CommonName, "localhost") && !contains(cert.DNSNames, "localhost") {
		t.Errorf("self-signed certificate for %q %v, want localhost", cert.Subject.CommonName, cert.DNSNames)
	}
	if code, _ := get("https://" + s.secureAddr + "/metrics"); code != 401 {
		t.Errorf("https /metrics without credentials: %d, want 401", code)
	}
	if code, _ := get("http://" + s.plainAddr + "/metrics"); code != 200 {
		t.Errorf("loopback http /metrics: %d, want 200", code)
	}
	cancel()
	s.wait()
	if _, err := net.Dial("tcp", s.secureAddr); err == nil {
		t.Error("the secure port still accepts connections after stop")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
