package controlplane

import (
	"flag"
	"io"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

var quietOnce sync.Once

// quietKlog silences klog, kube-apiserver's logger, short of fatal errors.
// The apiserver logs hundreds of info lines while starting, and errors that
// are expected in a sandbox: missing namespaces during bootstrap, leases
// gone at shutdown. They would drown test output and the sandbox's own
// instructions, while real failures already surface as errors from Start
// or from API calls. Options.Verbose skips this.
func quietKlog() {
	quietOnce.Do(func() {
		// -stderrthreshold is only reachable through klog's flags.
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		for name, value := range map[string]string{
			"logtostderr":     "false",
			"alsologtostderr": "false",
			"stderrthreshold": "FATAL",
		} {
			if err := fs.Set(name, value); err != nil {
				klog.Warningf("controlplane: setting klog -%s: %v", name, err)
			}
		}
		klog.SetOutput(io.Discard)
	})
}

// newEtcdLogger returns the logger embedded etcd uses: errors only (info in
// verbose mode), in zap's console format on stderr. Once mute is set nothing
// is written: closing etcd's listeners makes it log each "use of closed
// network connection" as an error, which means nothing at shutdown.
func newEtcdLogger(verbose bool, mute *atomic.Bool) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.Encoding = "console"
	zc.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	zc.Level = zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	zc.DisableStacktrace = true
	if verbose {
		zc.Level = zap.NewAtomicLevelAt(zapcore.InfoLevel)
		return zc.Build()
	}
	return zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &mutableCore{Core: c, mute: mute}
	}))
}

// mutableCore drops every entry while mute is set.
type mutableCore struct {
	zapcore.Core
	mute *atomic.Bool
}

func (c *mutableCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.mute.Load() {
		return ce
	}
	return c.Core.Check(e, ce)
}

func (c *mutableCore) With(fields []zapcore.Field) zapcore.Core {
	return &mutableCore{Core: c.Core.With(fields), mute: c.mute}
}
