package kgc

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kgc-dev/kgc/internal/rules"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
)

// TestEventsReportAsTheConfiguredComponent follows one warning from the
// collector's recorder through Run's broadcaster and clientset to the
// HTTP request that creates the Event, and checks who it says reported it.
func TestEventsReportAsTheConfiguredComponent(t *testing.T) {
	for _, tc := range []struct{ name, option, want string }{
		{name: "default is kube-controller-manager's collector's", option: "", want: "garbage-collector-controller"},
		{name: "upstream", option: UpstreamEventComponent, want: UpstreamEventComponent},
		{name: "kgc's own", option: OwnEventComponent, want: "kgc-garbage-collector"},
		{name: "prefixed", option: "example.com/gc", want: "example.com/gc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := runAndRecordOneWarning(t, Options{EventComponent: tc.option})
			if ev.Source.Component != tc.want || ev.ReportingController != tc.want {
				t.Errorf("event reported by source.component %q, reportingComponent %q; want %q for both",
					ev.Source.Component, ev.ReportingController, tc.want)
			}
			if ev.Type != corev1.EventTypeWarning || ev.Reason != "OwnerRefInvalidNamespace" ||
				ev.InvolvedObject.UID != "dependent-uid" || ev.Namespace != "ns" {
				t.Errorf("event = type %q reason %q involved %+v in namespace %q", ev.Type, ev.Reason, ev.InvolvedObject, ev.Namespace)
			}
		})
	}
}

// runAndRecordOneWarning runs a Collector built with opts against a server
// that fails everything but event creation (the collector never gets past
// discovery), records one warning through the collector's recorder, and
// returns the Event the server received.
func runAndRecordOneWarning(t *testing.T, opts Options) corev1.Event {
	t.Helper()
	events := make(chan corev1.Event, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/ns/events" {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var ev corev1.Event
		if _, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, &ev); err != nil {
			t.Errorf("decoding the event (%s): %v", r.Header.Get("Content-Type"), err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case events <- ev:
		default:
		}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)

	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	opts.Workers, opts.Logger = 1, logger
	c, err := New(&rest.Config{Host: srv.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	// Run installs the recorder before it starts the collector.
	deadline := time.Now().Add(10 * time.Second)
	for c.recorder.r.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("Run did not install an event recorder")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.recorder.Warning(rules.Identity{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "dependent", UID: "dependent-uid"},
		"OwnerRefInvalidNamespace", "test warning")
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event reached the server")
	}
	return corev1.Event{}
}

func TestEventComponentValidation(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, ok := range []string{"", DefaultEventComponent, UpstreamEventComponent, OwnEventComponent, "example.com/my-gc", "gc_1.a"} {
		if _, err := New(cfg, Options{EventComponent: ok}); err != nil {
			t.Errorf("EventComponent %q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"-gc", "gc controller", "gc/", "a/b/c", strings.Repeat("g", 64), "gc\n"} {
		_, err := New(cfg, Options{EventComponent: bad})
		if err == nil || !strings.Contains(err.Error(), "EventComponent") || !strings.Contains(err.Error(), "qualified name") {
			t.Errorf("EventComponent %q: err = %v, want a qualified-name error naming EventComponent", bad, err)
		}
	}
	if err := ValidateEventComponent(""); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf(`ValidateEventComponent("") = %v, want an error saying it is empty`, err)
	}
}
