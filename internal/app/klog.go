package app

import (
	"flag"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// addLogFlags exposes klog's verbosity flags (-v, --vmodule); the rest of
// klog's flags are about log files, which a controller does not write.
func addLogFlags(fs *pflag.FlagSet) {
	gfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gfs)
	for _, name := range []string{"v", "vmodule"} {
		if f := gfs.Lookup(name); f != nil {
			pf := pflag.PFlagFromGoFlag(f)
			if name == "v" {
				pf.Shorthand = "v"
			}
			fs.AddFlag(pf)
		}
	}
}
