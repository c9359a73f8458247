package app

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/kgc-dev/kgc/pkg/kgc"
)

// Log formats.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// ObservabilityOptions are the flags for logs, events, metrics and
// profiling.
type ObservabilityOptions struct {
	LogFormat string
	Profiling bool
	// EventComponent is the reporting component of kgc's events.
	EventComponent string
	// ContentionProfiling records blocking events for /debug/pprof/block
	// (with Profiling).
	ContentionProfiling bool
	// GCPercent is Go's GC target percentage; applied by ApplyGCPercent.
	GCPercent int
	// Verbosity is klog's -v, completed from the flags.
	Verbosity int
}

// NewObservabilityOptions returns the defaults.
func NewObservabilityOptions() ObservabilityOptions {
	return ObservabilityOptions{LogFormat: LogFormatText, GCPercent: kgc.RecommendedGCPercent, EventComponent: kgc.DefaultEventComponent}
}

// AddFlags registers the options on fs.
func (o *ObservabilityOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, `Log format: "text" (klog) or "json" (one JSON object per line).`)
	// kube-controller-manager's name for --log-format.
	fs.StringVar(&o.LogFormat, "logging-format", o.LogFormat, "The same as --log-format.")
	_ = fs.MarkHidden("logging-format")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve /debug/pprof/ (on --secure-port: to identities allowed to get /debug/pprof/*).")
	fs.StringVar(&o.EventComponent, "event-component", o.EventComponent, `Reporting component (source.component, reportingComponent) of the events kgc records. "`+kgc.UpstreamEventComponent+`" is kube-controller-manager's garbage collector's, for tools that filter on it. A Kubernetes qualified name.`)
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
	var errs []error
	if o.LogFormat != LogFormatText && o.LogFormat != LogFormatJSON {
		errs = append(errs, fmt.Errorf("--log-format (or --logging-format) must be %q or %q, got %q", LogFormatText, LogFormatJSON, o.LogFormat))
	}
	if err := kgc.ValidateEventComponent(o.EventComponent); err != nil {
		errs = append(errs, fmt.Errorf("--event-component: %w", err))
	}
	return errs
}

// setupLogging routes kgc's and its libraries' logs to the chosen format and
// returns ctx carrying the logger.
func (o *ObservabilityOptions) setupLogging(ctx context.Context, w io.Writer) context.Context {
	if o.LogFormat != LogFormatJSON {
		return ctx
	}
	logger := funcr.NewJSON(func(obj string) { fmt.Fprintln(w, obj) }, funcr.Options{
		LogTimestamp:    true,
		TimestampFormat: "2006-01-02T15:04:05.000000Z07:00",
		Verbosity:       o.Verbosity,
	})
	// client-go and friends log through klog's global logger.
	klog.SetLogger(logger)
	return logr.NewContext(ctx, logger)
}

// verbosity reads klog's -v level.
func verbosity(fs *pflag.FlagSet) int {
	f := fs.Lookup("v")
	if f == nil {
		return 0
	}
	v, err := strconv.Atoi(f.Value.String())
	if err != nil {
		return 0
	}
	return v
}

// newRegistry returns kgc run's metrics registry: kgc's metrics plus the Go
// runtime's and the process's.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
