package app

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// Log formats.
const (
	LogFormatText = logsapi.DefaultLogFormat
	LogFormatJSON = logsapi.JSONLogFormat
)

// ObservabilityOptions are the flags for logs, events, metrics and
// profiling.
type ObservabilityOptions struct {
	// Logs is kube-controller-manager's logging configuration
	// (logging.go).
	Logs      *logsapi.LoggingConfiguration
	Profiling bool
	// EventComponent is the reporting component of kgc's events.
	EventComponent string
	// ContentionProfiling records blocking events for /debug/pprof/block
	// (with Profiling).
	ContentionProfiling bool
	// GCPercent is Go's GC target percentage; applied by ApplyGCPercent.
	GCPercent int
}

// NewObservabilityOptions returns the defaults.
func NewObservabilityOptions() ObservabilityOptions {
	return ObservabilityOptions{Logs: logsapi.NewLoggingConfiguration(), GCPercent: kgc.RecommendedGCPercent, EventComponent: kgc.DefaultEventComponent}
}

// AddFlags registers the options on fs.
func (o *ObservabilityOptions) AddFlags(fs *pflag.FlagSet) {
	addLoggingFlags(o.Logs, fs)
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve /debug/pprof/ (on --secure-port: to identities allowed to get /debug/pprof/*).")
	fs.StringVar(&o.EventComponent, "event-component", o.EventComponent, `Reporting component (source.component, reportingComponent) of the events kgc records. The default is kube-controller-manager's garbage collector's, so that event filters and alerts written for it keep working; "`+kgc.OwnEventComponent+`" is kgc's own name. A Kubernetes qualified name.`)
	fs.BoolVar(&o.ContentionProfiling, "contention-profiling", o.ContentionProfiling, "With --profiling, record every blocking event for /debug/pprof/block.")
	fs.IntVar(&o.GCPercent, "gc-percent", o.GCPercent, "Go garbage collector target percentage (GOGC). kgc's heap is mostly its long-lived ownership graph; the default trades a few more GC cycles for a third less memory than Go's 100. Without this flag, a GOGC environment variable wins. Negative: no collection (GOGC=off).")
}

// ApplyGCPercent sets the GC target: --gc-percent when given (changed),
// else GOGC from the environment when set, else the default. It returns
// what it set, or -2 when it left the runtime's setting alone.
func (o *ObservabilityOptions) ApplyGCPercent(changed bool, getenv func(string) string) int {
	if !changed && getenv("GOGC") != "" {
		return -2
	}
	debug.SetGCPercent(o.GCPercent)
	return o.GCPercent
}

// applyContentionProfiling turns the runtime's block profile on as asked,
// as kube-controller-manager does.
func (o *ObservabilityOptions) applyContentionProfiling() {
	if o.Profiling && o.ContentionProfiling {
		runtime.SetBlockProfileRate(1)
	}
}

// Validate returns every problem with the options.
func (o *ObservabilityOptions) Validate() []error {
	errs := validateLogging(o.Logs)
	if err := kgc.ValidateEventComponent(o.EventComponent); err != nil {
		errs = append(errs, fmt.Errorf("--event-component: %w", err))
	}
	return errs
}
