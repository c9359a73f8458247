package app

import (
	"fmt"
	"io"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"

	// kube-controller-manager's JSON log format (--logging-format=json).
	_ "k8s.io/component-base/logs/json/register"
)

// Logging is kube-controller-manager's: component-base's logging
// configuration and flags (--logging-format=text|json, -v, --vmodule,
// --log-flush-frequency and the alpha --log-text-* and --log-json-*
// options), applied as it applies them, so that a log pipeline built for
// kube-controller-manager reads kgc's lines alike: klog's text format, or
// component-base's JSON schema (ts, caller, msg, v, err, then the
// key/value pairs). kgc's --log-format is another name for
// --logging-format.

// addLoggingFlags registers the logging flags on fs, bound to c.
func addLoggingFlags(c *logsapi.LoggingConfiguration, fs *pflag.FlagSet) {
	logsapi.AddFlags(c, fs)
	fs.StringVar(&c.Format, "log-format", c.Format, "The same as --logging-format.")
	_ = fs.MarkHidden("log-format")
}

// validateLogging returns every problem with the logging configuration, as
// kube-controller-manager reads it without feature gates: the alpha
// options need LoggingAlphaOptions, which kgc cannot turn on.
func validateLogging(c *logsapi.LoggingConfiguration) []error {
	var errs []error
	for _, e := range logsapi.Validate(c, nil, nil) {
		errs = append(errs, fmt.Errorf("logging (--logging-format, -v, --vmodule, --log-*): %w", e))
	}
	return errs
}

// applyLogging routes kgc's and its libraries' logs (everything logs
// through klog) to the configured format, errors to errOut and, with a
// split stream, the rest to infoOut. It changes process-wide state and is
// called once, first thing in `kgc run`.
func applyLogging(c *logsapi.LoggingConfiguration, errOut, infoOut io.Writer) error {
	if err := logsapi.ValidateAndApplyWithOptions(c, &logsapi.LoggingOptions{ErrorStream: errOut, InfoStream: infoOut}, nil); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	return nil
}

// flushLogs writes out whatever the log format buffers, as
// kube-controller-manager does before it exits.
func flushLogs() { klog.Flush() }
