package faultproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// server answers writes 200, a plain GET 200, and watches with a stream
// that sends line then stays open until the client goes.
func server(t *testing.T, line string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "true" {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, line)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(s.Close)
	return s
}

func client(ft *Transport) *http.Client {
	return &http.Client{Transport: ft.Wrap(http.DefaultTransport)}
}

func do(t *testing.T, c *http.Client, method, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestWriteFaults checks the injection rate, that only writes are hit, that
// a seed reproduces the same faults, and stubborn requests.
func TestWriteFaults(t *testing.T) {
	s := server(t, "")
	run := func(seed int64) []int {
		ft := New(Config{
			Seed: seed, WriteFailureRate: 0.3,
			Codes:    []int{409, 500},
			Eligible: func(r *http.Request) bool { return HasPrefix(r, "/ns/a/") },
			Stubborn: func(r *http.Request) int {
				if strings.HasSuffix(r.URL.Path, "/stubborn") {
					return 3
				}
				return 0
			},
		})
		c := client(ft)
		var codes []int
		for range 1000 {
			codes = append(codes, do(t, c, http.MethodDelete, s.URL+"/ns/a/x"))
		}
		// Not eligible, or not writes: never injected.
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
			if code := do(t, c, m, s.URL+"/ns/a/x"); code != 200 {
				t.Errorf("%s got %d, want 200", m, code)
			}
		}
		if code := do(t, c, http.MethodPatch, s.URL+"/ns/b/x"); code != 200 {
			t.Errorf("PATCH outside the eligible prefix got %d", code)
		}
		for i := range 3 {
			if code := do(t, c, http.MethodPatch, s.URL+"/ns/a/stubborn"); code == 200 {
				t.Errorf("stubborn attempt %d succeeded", i+1)
			}
		}
		injected := 0
		for _, r := range ft.Requests() {
			if r.Injected {
				injected++
			}
		}
		if injected < 1000*0.3*0.8+3 || injected > 1000*0.3*1.2+3 {
			t.Errorf("%d of 1000 writes injected at rate 0.3", injected)
		}
		return codes
	}
	a := run(42)
	if !slices.Equal(a, run(42)) {
		t.Error("the same seed gave different faults")
	}
	if slices.Equal(a, run(43)) {
		t.Error("different seeds gave the same faults")
	}
}

// TestHoldAndCut checks that HoldWatches ends open streams with a clean
// EOF, holds new watches until ReleaseWatches, and spots a 410 in a stream.
func TestHoldAndCut(t *testing.T) {
	line := `{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version: 1 (2)"}}` + "\n"
	s := server(t, line)
	ft := New(Config{})
	c := client(ft)

	resp, err := c.Get(s.URL + "/w?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Read in small pieces: the scan must see the message across reads.
	buf := make([]byte, len(line))
	for read := 0; read < len(line); {
		n, err := resp.Body.Read(buf[read:min(read+5, len(line))])
		if err != nil {
			t.Fatal(err)
		}
		read += n
	}
	if n := ft.OpenWatches(); n != 1 {
		t.Fatalf("%d open watches, want 1", n)
	}
	if n := ft.HoldWatches(); n != 1 {
		t.Errorf("HoldWatches cut %d streams, want 1", n)
	}
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Errorf("reading a cut stream: %q, %v; want a clean EOF", rest, err)
	}
	if g := ft.Gone(); len(g) != 1 || !g[0].InStream {
		t.Errorf("Gone() = %+v after a stream carrying a 410, want one in-stream entry", g)
	}
	if ft.OpenWatches() != 0 {
		t.Errorf("%d open watches after the cut", ft.OpenWatches())
	}

	// A new watch waits for the release.
	got := make(chan error, 1)
	go func() {
		resp, err := c.Get(s.URL + "/w?watch=true")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a watch got through while held (err %v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	ft.ReleaseWatches()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("released watch: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held watch was not released")
	}

	// A held watch gives up with its context.
	ft.HoldWatches()
	defer ft.ReleaseWatches()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/w?watch=true", nil)
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("held watch with an expiring context: %v", err)
	}
}

// TestDelayWatches checks that a matching watch stream's bytes arrive no
// sooner than the delay, in order and complete, that other streams are not
// delayed, and that a delayed stream can still be cut.
func TestDelayWatches(t *testing.T) {
	// The server sends 20 numbered lines 10ms apart, then keeps the stream open.
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		for i := range 20 {
			_, _ = io.WriteString(w, strings.Repeat("x", i)+"\n")
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
		<-r.Context().Done()
	}))
	t.Cleanup(s.Close)
	ft := New(Config{Seed: 7})
	ft.DelayWatches(func(p string) bool { return p == "/slow" }, 300*time.Millisecond, 400*time.Millisecond)
	c := client(ft)

	// readLines reads n lines and returns when the first and the last arrived.
	readLines := func(path string, n int) (first, last time.Duration, body io.ReadCloser) {
		began := time.Now()
		resp, err := c.Get(s.URL + path + "?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		buf := make([]byte, 7) // small reads: pieces are handed out in parts
		for lines := 0; lines < n; {
			k, err := resp.Body.Read(buf)
			if err != nil {
				t.Fatalf("%s: %v after %d lines", path, err, lines)
			}
			for _, b := range buf[:k] {
				if b == '\n' {
					lines++
					if lines == 1 {
						first = time.Since(began)
					}
				}
			}
			got = append(got, buf[:k]...)
		}
		last = time.Since(began)
		var want []byte
		for i := range n {
			want = append(want, strings.Repeat("x", i)+"\n"...)
		}
		if string(got) != string(want) {
			t.Errorf("%s: stream content %q, want %q", path, got, want)
		}
		return first, last, resp.Body
	}
	first, last, fast := readLines("/fast", 20)
	defer fast.Close()
	if first > 200*time.Millisecond {
		t.Errorf("an undelayed stream's first line took %s", first)
	}
	first, last, slow := readLines("/slow", 20)
	if first < 300*time.Millisecond {
		t.Errorf("the delayed stream's first line came after %s, before the 300ms delay", first)
	}
	// The delays do not add up: the last line comes about when it was sent
	// (~190ms) plus one delay.
	if last > 190*time.Millisecond+400*time.Millisecond+500*time.Millisecond {
		t.Errorf("the delayed stream's 20th line came after %s: delays accumulate", last)
	}
	done := make(chan error, 1)
	go func() {
		_, err := slow.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if n := ft.HoldWatches(); n != 2 {
		t.Errorf("HoldWatches cut %d streams, want 2", n)
	}
	ft.ReleaseWatches()
	select {
	case err := <-done:
		if err != io.EOF {
			t.Errorf("a cut delayed stream read %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cut delayed stream did not end")
	}
	slow.Close()
}

// TestFailReads checks that a failing resource's reads answer the code until
// healed, that its open watches are cut, and that other paths and writes
// are not affected.
func TestFailReads(t *testing.T) {
	s := server(t, "{}\n")
	ft := New(Config{})
	c := client(ft)
	widgets := ResourcePath("g.example", "v1", "widgets")
	for path, want := range map[string]bool{
		"/apis/g.example/v1/widgets":                      true,
		"/apis/g.example/v1/namespaces/a/widgets":         true,
		"/apis/g.example/v1/namespaces/a/widgets/w1":      true,
		"/apis/g.example/v1/widgets/w1/status":            true,
		"/apis/g.example/v1":                              false,
		"/apis/g.example/v1/gadgets":                      false,
		"/apis/g.example/v1/namespaces/widgets/gadgets/x": false,
		"/apis/other/v1/widgets":                          false,
		"/api/v1/widgets":                                 false,
	} {
		if got := widgets(path); got != want {
			t.Errorf("ResourcePath(widgets)(%q) = %v, want %v", path, got, want)
		}
	}
	if !ResourcePath("", "v1", "secrets")("/api/v1/namespaces/a/secrets") {
		t.Error("core resource path not matched")
	}

	resp, err := c.Get(s.URL + "/apis/g.example/v1/widgets?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	heal := ft.FailReads(widgets, http.StatusServiceUnavailable)
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Errorf("an open watch of the failing resource read %q, %v; want a clean EOF", rest, err)
	}
	if code := do(t, c, http.MethodGet, s.URL+"/apis/g.example/v1/widgets"); code != 503 {
		t.Errorf("LIST of the failing resource: %d, want 503", code)
	}
	if code := do(t, c, http.MethodGet, s.URL+"/apis/g.example/v1/namespaces/a/widgets?watch=true"); code != 503 {
		t.Errorf("WATCH of the failing resource: %d, want 503", code)
	}
	if code := do(t, c, http.MethodGet, s.URL+"/apis/g.example/v1/gadgets"); code != 200 {
		t.Errorf("LIST of another resource: %d, want 200", code)
	}
	if code := do(t, c, http.MethodDelete, s.URL+"/apis/g.example/v1/namespaces/a/widgets/w1"); code != 200 {
		t.Errorf("DELETE on the failing resource: %d, want 200 (only reads fail)", code)
	}
	heal()
	if code := do(t, c, http.MethodGet, s.URL+"/apis/g.example/v1/widgets"); code != 200 {
		t.Errorf("LIST after heal: %d, want 200", code)
	}
}

// PageLists lowers the limit of matching LISTs only, answers their
// continuations with the code, and stops on undo.
func TestPageLists(t *testing.T) {
	var mu sync.Mutex
	var limits []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		limits = append(limits, r.URL.Path+"?limit="+r.URL.Query().Get("limit"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	ft := New(Config{})
	c := client(ft)
	undo := ft.PageLists(ResourcePath("", "v1", "podtemplates"), 1, http.StatusInternalServerError)
	for _, tc := range []struct {
		url  string
		want int
	}{
		{"/api/v1/podtemplates?limit=5000", http.StatusOK},
		{"/api/v1/podtemplates?limit=5000&continue=x", http.StatusInternalServerError},
		{"/api/v1/configmaps?limit=5000&continue=x", http.StatusOK},
	} {
		if got := do(t, c, http.MethodGet, s.URL+tc.url); got != tc.want {
			t.Errorf("GET %s = %d, want %d", tc.url, got, tc.want)
		}
	}
	undo()
	if got := do(t, c, http.MethodGet, s.URL+"/api/v1/podtemplates?limit=5000&continue=x"); got != http.StatusOK {
		t.Errorf("after undo: GET = %d, want 200", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/api/v1/podtemplates?limit=1", "/api/v1/configmaps?limit=5000", "/api/v1/podtemplates?limit=5000"}
	if !slices.Equal(limits, want) {
		t.Errorf("the server saw %v, want %v", limits, want)
	}
}
