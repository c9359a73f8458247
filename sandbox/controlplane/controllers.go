package controlplane

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/configz"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

const (
	// DefaultControllers is the --controllers value the sandbox gives
	// kube-controller-manager: every controller it runs by default except
	// its garbage collector, whose job kgc does.
	DefaultControllers = "*,-garbage-collector-controller"
	// DefaultNodes is how many simulated nodes Options.Cluster registers
	// unless Options.Nodes says otherwise.
	DefaultNodes = 3

	// componentStopTimeout bounds the wait for kube-controller-manager or
	// kube-scheduler to return once cancelled; both stop within a second
	// or two.
	componentStopTimeout = 30 * time.Second
	// controllersReadyTimeout bounds the wait for kube-controller-manager's
	// controllers to be working.
	controllersReadyTimeout = time.Minute

	// kcmConfigzName and schedulerConfigzName are the process-global configz
	// entries kube-controller-manager and kube-scheduler register at start;
	// they must be deleted at stop, or the next start in the same process
	// fails ("register config twice").
	kcmConfigzName       = kcmapp.ConfigzName
	schedulerConfigzName = "componentconfig"
	// schedulerStoppedWithoutLeaderElection is the error kube-scheduler's
	// Run returns once its context ends when leader election is off.
	schedulerStoppedWithoutLeaderElection = "finished without leader elect"
)

// component is kube-controller-manager or kube-scheduler running in a
// goroutine until stop.
type component struct {
	name   string
	cancel context.CancelFunc
	done   <-chan error
	// configz is the process-global configz entry the component registers.
	configz string
}

// startComponent builds a component with setup and runs what setup
// returns in a goroutine. Both get the component's own context, which
// lives until stop: kube-scheduler and kube-controller-manager start
// goroutines (caches, event broadcasters) while they are being built, and
// those must end with the component, not with the caller's start-up
// context.
func startComponent(name, configzName string, setup func(ctx context.Context) (func(ctx context.Context) error, error)) (*component, error) {
	ctx, cancel := context.WithCancel(context.Background())
	run, err := setup(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer close(done)
		done <- run(ctx)
	}()
	return &component{name: name, cancel: cancel, done: done, configz: configzName}, nil
}

// stop cancels the component and waits for it to return.
func (c *component) stop() error {
	c.cancel()
	defer configz.Delete(c.configz)
	select {
	case err := <-c.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		return nil
	case <-time.After(componentStopTimeout):
		return fmt.Errorf("%s did not stop within %v", c.name, componentStopTimeout)
	}
}

// newComponentRegistry is a fresh registry of effective versions and
// feature gates for one component, as kube-apiserver's and the other
// components' test servers make: the process-wide default registry may be
// set only once, while one process runs an apiserver, a controller manager
// and a scheduler, and a test binary may start many control planes. The
// feature gate is a copy for the same reason; nothing is overridden, so
// code reading the global gate sees the same values.
func newComponentRegistry() (basecompatibility.ComponentGlobalsRegistry, error) {
	featureGate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	effectiveVersion := compatibility.DefaultBuildEffectiveVersion()
	effectiveVersion.SetEmulationVersion(featureGate.EmulationVersion())
	effectiveVersion.SetMinCompatibilityVersion(featureGate.MinCompatibilityVersion())
	registry := basecompatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, effectiveVersion, featureGate); err != nil {
		return nil, fmt.Errorf("registering component globals: %w", err)
	}
	return registry, nil
}

// startControllerManager runs kube-controller-manager v1.36 against the
// sandbox's apiserver with the given extra flags (after the sandbox's own,
// so they win), and returns once its controllers are working: the
// service account controller has created the default namespace's
// ServiceAccount.
//
// It runs without leader election and without its HTTPS endpoint (health
// and metrics of kube-controller-manager are not what the sandbox is for),
// with the admin credentials for every controller, and with client limits
// raised (1000 QPS) so that benchmarks measure the collectors, not
// kube-controller-manager's throttling.
func startControllerManager(ctx context.Context, cp *ControlPlane, extraFlags []string) (*component, error) {
	s, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return nil, fmt.Errorf("kube-controller-manager options: %w", err)
	}
	registry, err := newComponentRegistry()
	if err != nil {
		return nil, err
	}
	s.ComponentGlobalsRegistry = registry
	all, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	named := s.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	flags := []string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file=" + cp.pki.serviceAccountKey,
		"--root-ca-file=" + cp.pki.servingCA,
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
	}
	// --controllers is a list flag: a second one appends to the first
	// instead of replacing it, so the default is given only when the
	// caller's flags have none (else "--controllers=*" could never turn
	// the garbage collector back on).
	if !slices.ContainsFunc(extraFlags, func(f string) bool { return strings.HasPrefix(f, "--controllers=") || f == "--controllers" }) {
		flags = append(flags, "--controllers="+DefaultControllers)
	}
	flags = append(flags, extraFlags...)
	if err := fs.Parse(flags); err != nil {
		return nil, fmt.Errorf("kube-controller-manager flags: %w", err)
	}
	s.ParsedFlags = &named
	if err := s.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-controller-manager component globals: %w", err)
	}
	c, err := startComponent("kube-controller-manager", kcmConfigzName, func(ctx context.Context) (func(context.Context) error, error) {
		cfg, err := s.Config(ctx, all, disabled, aliases)
		if err != nil {
			return nil, fmt.Errorf("kube-controller-manager config: %w", err)
		}
		completed := cfg.Complete()
		return func(ctx context.Context) error { return kcmapp.Run(ctx, completed) }, nil
	})
	if err != nil {
		return nil, err
	}
	if err := waitControllers(ctx, cp.Config, c.done); err != nil {
		return c, err
	}
	return c, nil
}

// waitControllers polls until the default ServiceAccount exists in the
// default namespace, which the service account controller creates as soon
// as kube-controller-manager's informers have synced.
func waitControllers(ctx context.Context, cfg *rest.Config, done <-chan error) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, controllersReadyTimeout)
	defer cancel()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		_, err := client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case runErr, ok := <-done:
			if !ok || runErr == nil {
				runErr = errors.New("exited without error")
			}
			return fmt.Errorf("kube-controller-manager stopped while starting: %w", runErr)
		case <-ctx.Done():
			return fmt.Errorf("waiting for kube-controller-manager's controllers (the default ServiceAccount): %w (last: %w)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

// startScheduler runs kube-scheduler v1.36 with its default profile,
// without leader election and without its HTTPS endpoint.
func startScheduler(cp *ControlPlane) (*component, error) {
	registry, err := newComponentRegistry()
	if err != nil {
		return nil, err
	}
	opts := schedoptions.NewOptionsWithComponentGlobalsRegistry(registry)
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse([]string{
		"--kubeconfig=" + cp.KubeconfigPath,
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=1000",
		"--kube-api-burst=2000",
	}); err != nil {
		return nil, fmt.Errorf("kube-scheduler flags: %w", err)
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, fmt.Errorf("kube-scheduler component globals: %w", err)
	}
	return startComponent("kube-scheduler", schedulerConfigzName, func(ctx context.Context) (func(context.Context) error, error) {
		cc, sched, err := schedapp.Setup(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("kube-scheduler setup: %w", err)
		}
		return func(ctx context.Context) error {
			err := schedapp.Run(ctx, cc, sched)
			if err != nil && ctx.Err() != nil && err.Error() == schedulerStoppedWithoutLeaderElection {
				// How kube-scheduler's Run reports a normal stop when
				// it runs without leader election.
				return nil
			}
			return err
		}, nil
	})
}
