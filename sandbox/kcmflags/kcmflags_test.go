package kcmflags

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/component-base/version/verflag"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/options"

	"github.com/kgc-dev/kgc/internal/app"
)

// gcGroups are kube-controller-manager's flag groups (its --help sections)
// that concern its garbage collector: the collector's own, the generic
// options (clients, controllers, leader election; the cloud options that
// share the group are listed as refused), and how the process is served
// and observed. The other groups belong to other controllers.
var gcGroups = []string{
	"garbage-collector-controller", "generic", "misc", "leader-migration", "debugging",
	"secure serving", "authentication", "authorization", "metrics", "logs",
}

// kcmFlagSets returns kube-controller-manager's flags by group, plus the
// global --version.
func kcmFlagSets(t *testing.T) map[string]*pflag.FlagSet {
	t.Helper()
	s, err := options.NewKubeControllerManagerOptions()
	if err != nil {
		t.Fatal(err)
	}
	// The controller lists only shape --controllers' help text.
	fss := s.Flags(nil, nil, nil)
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	verflag.AddFlags(global)
	fss.FlagSets["global"] = global
	return fss.FlagSets
}

func TestKCMFlagsMatchKubeControllerManager(t *testing.T) {
	sets := kcmFlagSets(t)
	kcm := map[string]*pflag.Flag{}
	for _, fs := range sets {
		fs.VisitAll(func(f *pflag.Flag) { kcm[f.Name] = f })
	}
	listed := map[string]app.KCMFlag{}
	for _, f := range app.KCMFlags() {
		listed[f.Name] = f
	}
	for _, group := range gcGroups {
		fs, ok := sets[group]
		if !ok {
			t.Errorf("kube-controller-manager has no flag group %q any more", group)
			continue
		}
		fs.VisitAll(func(f *pflag.Flag) {
			if _, ok := listed[f.Name]; !ok {
				t.Errorf("kube-controller-manager's --%s (%s) is not in app.KCMFlags", f.Name, group)
			}
		})
	}
	run := app.NewRunCommand(nil).Flags()
	for name, f := range listed {
		k, ok := kcm[name]
		if !ok {
			t.Errorf("app.KCMFlags lists --%s, which kube-controller-manager v1.36.3 does not have", name)
			continue
		}
		kf := run.Lookup(name)
		if kf == nil {
			t.Errorf("--%s (%s) is not a flag of kgc run", name, f.Handling)
			continue
		}
		// A flag that takes no value in one and a value in the other would
		// eat the next argument of a command line, or miss it.
		if kcmBool, kgcBool := k.NoOptDefVal != "", kf.NoOptDefVal != ""; kcmBool != kgcBool {
			t.Errorf("--%s takes no value in kube-controller-manager: %v, in kgc: %v", name, kcmBool, kgcBool)
		}
	}
}
