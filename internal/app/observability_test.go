package app

import (
	"errors"
	"strings"
	"testing"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

func TestEventComponentFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "default is kube-controller-manager's collector's", want: "garbage-collector-controller"},
		{name: "upstream's name", args: []string{"--event-component=garbage-collector-controller"}, want: kgc.UpstreamEventComponent},
		{name: "kgc's own name", args: []string{"--event-component=kgc-garbage-collector"}, want: kgc.OwnEventComponent},
		{name: "prefixed name", args: []string{"--event-component", "example.com/gc"}, want: "example.com/gc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(t, tc.args...)
			if err != nil {
				t.Fatalf("parse %v: %v", tc.args, err)
			}
			if got.Observability.EventComponent != tc.want {
				t.Errorf("EventComponent = %q, want %q", got.Observability.EventComponent, tc.want)
			}
		})
	}
}

func TestEventComponentFlagErrors(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  string
	}{
		{name: "empty", value: "", want: "must not be empty"},
		{name: "space", value: "garbage collector", want: "not a qualified name"},
		{name: "leading dash", value: "-gc", want: "not a qualified name"},
		{name: "two slashes", value: "a/b/c", want: "not a qualified name"},
		{name: "too long", value: strings.Repeat("g", 64), want: "not a qualified name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, "--event-component="+tc.value)
			if err == nil {
				t.Fatalf("--event-component=%q accepted", tc.value)
			}
			if !errors.Is(err, errValidation) {
				t.Errorf("error %v is not a validation error", err)
			}
			for _, w := range []string{"--event-component", tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestObservabilityValidateReportsEveryProblem: a bad log format does not
// hide a bad event component.
func TestObservabilityValidateReportsEveryProblem(t *testing.T) {
	o := NewObservabilityOptions()
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatalf("defaults: %v", errs)
	}
	o.Logs.Format, o.EventComponent = "xml", "not valid"
	if errs := o.Validate(); len(errs) != 2 {
		t.Errorf("Validate = %v, want 2 errors", errs)
	}
}
