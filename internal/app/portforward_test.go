package app

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"
)

// fakeKubelet answers the pods/portforward subresource as a kubelet
// behind the API server does over SPDY (protocol portforward.k8s.io): each
// data stream is joined to target. It refuses WebSockets, so the client
// must fall back. paths records the URLs asked.
type fakeKubelet struct {
	target string
	mu     sync.Mutex
	paths  []string
}

func (k *fakeKubelet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.mu.Lock()
	k.paths = append(k.paths, r.Method+" "+r.URL.Path)
	k.mu.Unlock()
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "no websockets here", http.StatusBadRequest)
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{"portforward.k8s.io"}); err != nil {
		return
	}
	streams := make(chan httpstream.Stream, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	for {
		select {
		case s := <-streams:
			if s.Headers().Get(corev1.StreamType) != corev1.StreamTypeData {
				continue // the error stream: nothing to report
			}
			go func() {
				defer s.Close()
				c, err := net.Dial("tcp", k.target)
				if err != nil {
					return
				}
				defer c.Close()
				go func() { _, _ = io.Copy(c, s) }()
				_, _ = io.Copy(s, c)
			}()
		case <-conn.CloseChan():
			return
		}
	}
}

// portForward reaches a port of a Pod through the API server's
// pods/portforward subresource, as kubectl port-forward does: WebSockets
// first, SPDY where the server cannot upgrade; on a loopback port of its
// own choosing.
func TestPortForwardReachesThePodPort(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	kubelet := &fakeKubelet{target: echo.Addr().String()}
	srv := httptest.NewTLSServer(kubelet)
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kgc-system", Name: "kgc-0"}}
	local, stop, err := portForward(t.Context(), cfg, pod, DefaultSecurePort)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if host, _, _ := net.SplitHostPort(local); host != "127.0.0.1" {
		t.Errorf("listening on %s, want loopback", local)
	}
	for i := range 2 { // two connections over one tunnel
		c, err := net.Dial("tcp", local)
		if err != nil {
			t.Fatal(err)
		}
		msg := "ping " + strconv.Itoa(i) + "\n"
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || got != msg {
			t.Errorf("through the tunnel: %q, %v; want %q", got, err, msg)
		}
	}
	kubelet.mu.Lock()
	defer kubelet.mu.Unlock()
	want := "POST /api/v1/namespaces/kgc-system/pods/kgc-0/portforward"
	found := false
	for _, p := range kubelet.paths {
		found = found || p == want
	}
	if !found {
		t.Errorf("requests %v, want %s", kubelet.paths, want)
	}
	stop()
	if _, err := net.Dial("tcp", local); err == nil {
		t.Error("the local port still accepts connections after stop")
	}
}
