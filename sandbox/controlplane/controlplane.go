package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Options configures Start. The zero value is usable.
type Options struct {
	// Dir holds etcd data, certificates and the admin kubeconfig. Empty means
	// a new temporary directory, removed by Stop. A non-empty Dir is created
	// if missing and kept by Stop, so a later Start on it sees the same data.
	Dir string
	// Logf receives short progress messages (listening addresses, timings).
	// Nil discards them.
	Logf func(format string, args ...any)
	// Verbose keeps the logs of kube-apiserver (klog) and etcd. By default
	// they are silenced; see the package documentation. klog is
	// process-global: once a Start without Verbose has silenced it, it
	// stays silent for the rest of the process.
	Verbose bool
	// WatchCacheSizes is kube-apiserver's --watch-cache-sizes
	// (resource[.group]#size). The only meaningful size is 0: it disables
	// the watch cache of that resource, so that its lists and watches are
	// served by etcd directly (a watch from a compacted revision then fails
	// with 410 Gone, see CompactEtcd). Nil keeps every cache.
	WatchCacheSizes []string

	// Cluster also runs the rest of a cluster: kube-controller-manager
	// with every controller but its garbage collector (Deployments make
	// ReplicaSets, ReplicaSets make Pods, the namespace controller empties
	// deleted namespaces, …), kube-scheduler, and simulated nodes (kwok)
	// on which Pods become Running and terminate when deleted. Without it
	// only etcd and kube-apiserver run: nothing reconciles workloads.
	Cluster bool
	// Nodes is the number of simulated nodes with Cluster; 0 means
	// DefaultNodes.
	Nodes int
	// ControllerManagerFlags are extra kube-controller-manager flags, given
	// after the sandbox's own so that they win; for example
	// "--controllers=*,-garbage-collector-controller,-namespace-controller"
	// to leave namespaces to kgc as well, or "--controllers=*" to run
	// kube-controller-manager's own garbage collector (a --controllers
	// given here replaces the sandbox's DefaultControllers). Only with
	// Cluster.
	ControllerManagerFlags []string
}

// ControlPlane is a running etcd + kube-apiserver pair. Create it with Start
// and release it with Stop.
type ControlPlane struct {
	// Config is an admin (system:masters) client configuration for the
	// kube-apiserver: a bearer token and the CA of the serving certificate,
	// both kept in Dir, so that the config stays valid when the apiserver
	// is restarted (RestartAPIServer) on the same address.
	// QPS and Burst are raised (1000/10000) so that test clients are not
	// throttled; copy the config (rest.CopyConfig) before changing it.
	Config *rest.Config
	// KubeconfigPath is an admin kubeconfig equivalent to Config, with
	// tls-server-name set, usable by kubectl and clientcmd.
	KubeconfigPath string
	// Dir is the directory holding all state (Options.Dir or the temporary
	// directory Start created).
	Dir string
	// EtcdURL is the embedded etcd's client URL (plain HTTP on loopback).
	EtcdURL string

	logf    func(format string, args ...any)
	ownsDir bool
	lock    *os.File

	etcd            *etcdServer
	verbose         bool // Options.Verbose, for etcd started again
	pki             pkiFiles
	watchCacheSizes []string
	// apiAddr is the apiserver's host:port, kept across restarts.
	apiAddr string

	// apiMu serializes StopAPIServer, StartAPIServer and Stop; api is nil
	// while the apiserver is stopped.
	apiMu sync.Mutex
	api   *apiServer

	// The rest of the cluster (Options.Cluster); nil when not running.
	controllerManager *component
	scheduler         *component
	nodes             *simulatedNodes
	stopped           bool
	stopOnce          sync.Once
	stopError         error
}

// Start runs etcd and then kube-apiserver, and returns once the apiserver is
// ready (/readyz answers ok and the default namespace exists). ctx bounds
// the startup only; the control plane runs until Stop. On error everything
// started so far has already been stopped and cleaned up.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	began := time.Now()
	if !opts.Verbose {
		quietKlog()
	}
	cp := &ControlPlane{logf: opts.Logf, watchCacheSizes: opts.WatchCacheSizes, verbose: opts.Verbose}
	if cp.logf == nil {
		cp.logf = func(string, ...any) {}
	}
	defer func() {
		if err != nil {
			// Stop copes with a partially started control plane.
			if stopErr := cp.Stop(); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up after failed start: %w", stopErr))
			}
		}
	}()

	if cp.Dir, cp.ownsDir, err = prepareDir(opts.Dir); err != nil {
		return nil, err
	}
	if cp.lock, err = lockDir(cp.Dir); err != nil {
		return nil, err
	}

	etcdStart := time.Now()
	if cp.etcd, err = startEtcd(ctx, filepath.Join(cp.Dir, "etcd"), opts.Verbose); err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	cp.EtcdURL = cp.etcd.url
	cp.logf("etcd ready at %s in %v", cp.EtcdURL, time.Since(etcdStart).Round(time.Millisecond))

	if cp.pki, err = ensurePKI(filepath.Join(cp.Dir, "pki")); err != nil {
		return nil, err
	}

	apiStart := time.Now()
	api, err := startAPIServer(ctx, cp.EtcdURL, cp.pki, "127.0.0.1:0", cp.watchCacheSizes)
	// Recorded even on error so that Stop can wait for the goroutine.
	cp.api = api
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	cp.Config = api.config
	cp.apiAddr = api.listener.Addr().String()
	cp.logf("kube-apiserver ready at %s in %v", cp.Config.Host, time.Since(apiStart).Round(time.Millisecond))

	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.KubeconfigPath, cp.Config); err != nil {
		return nil, err
	}
	if opts.Cluster {
		if err := cp.startCluster(ctx, opts); err != nil {
			return nil, err
		}
	}
	cp.logf("control plane started in %v (dir %s)", time.Since(began).Round(time.Millisecond), cp.Dir)
	return cp, nil
}

// Stop stops kube-apiserver, then etcd, and removes the directory if Start
// created it. Clients need not be stopped first: the apiserver ends the
// watches still open, and closes connections still busy a few seconds into
// the shutdown (the clients see errors and retry against a closed port until
// they are stopped). It is safe to call more than once and from several
// goroutines; later calls return the first call's result without doing
// anything.
func (cp *ControlPlane) Stop() error {
	cp.stopOnce.Do(func() { cp.stopError = cp.stop() })
	return cp.stopError
}

func (cp *ControlPlane) stop() error {
	began := time.Now()
	var errs []error

	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	cp.stopped = true
	ranAPI := cp.api != nil || cp.apiAddr != ""
	// The clients of the apiserver go before it: kube-controller-manager,
	// kube-scheduler and kwok would otherwise retry against a stopped
	// server until their own shutdown.
	errs = append(errs, cp.stopCluster()...)
	// The apiserver goes first: it holds etcd clients and watches, and
	// stopping etcd under it would turn a clean drain into a storm of
	// retries.
	// Clients may still be connected and watching: the apiserver ends
	// their watches and, past a short grace period, their connections.
	if cp.api != nil {
		if err := cp.api.stop(); err != nil {
			errs = append(errs, fmt.Errorf("kube-apiserver: %w", err))
		}
		cp.api = nil
	}

	if cp.etcd != nil {
		if err := cp.etcd.stop(); err != nil {
			errs = append(errs, fmt.Errorf("etcd: %w", err))
		}
	}

	if cp.lock != nil {
		if err := cp.lock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("releasing the directory lock: %w", err))
		}
	}
	if cp.ownsDir && cp.Dir != "" {
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", cp.Dir, err))
		}
	}
	if ranAPI || cp.etcd != nil {
		cp.logf("control plane stopped in %v", time.Since(began).Round(time.Millisecond))
	}
	return errors.Join(errs...)
}

// errStopped is returned by StartAPIServer and StopAPIServer after Stop.
var errStopped = errors.New("control plane stopped")

// StopAPIServer stops kube-apiserver alone; etcd keeps running. Clients see
// their watches end and then connections refused, as with a real apiserver
// going down. Stopping a stopped apiserver does nothing. Stop still stops
// everything, whether or not the apiserver runs.
func (cp *ControlPlane) StopAPIServer() error {
	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	if cp.stopped {
		return errStopped
	}
	if cp.api == nil {
		return nil
	}
	began := time.Now()
	err := cp.api.stop()
	cp.api = nil
	if err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	cp.logf("kube-apiserver stopped in %v", time.Since(began).Round(time.Millisecond))
	return nil
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address, with the same certificates, credentials and etcd, and
// returns once it is ready: Config, KubeconfigPath and the clients built
// from them keep working. Starting a running apiserver does nothing.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	if cp.stopped {
		return errStopped
	}
	if cp.api != nil {
		return nil
	}
	began := time.Now()
	api, err := startAPIServer(ctx, cp.EtcdURL, cp.pki, cp.apiAddr, cp.watchCacheSizes)
	if err != nil {
		if api != nil {
			// It started but never became ready: take it down again.
			err = errors.Join(err, api.stop())
		}
		return fmt.Errorf("restarting kube-apiserver: %w", err)
	}
	cp.api = api
	cp.logf("kube-apiserver ready again at %s in %v", api.config.Host, time.Since(began).Round(time.Millisecond))
	return nil
}

// RestartAPIServer is StopAPIServer followed by StartAPIServer.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	return cp.StartAPIServer(ctx)
}

// CompactEtcd compacts etcd's history at its current revision, as the
// apiserver's periodic compaction would, and returns that revision. Watches
// served by etcd (resources without a watch cache, see
// Options.WatchCacheSizes) can no longer resume from an older revision: the
// apiserver answers them 410 Gone ("too old resource version"), and clients
// must list again.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	return cp.etcd.compact(ctx)
}

// prepareDir returns the directory to use and whether Stop should remove it.
func prepareDir(dir string) (string, bool, error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "kgc-sandbox-")
		if err != nil {
			return "", false, fmt.Errorf("creating temporary directory: %w", err)
		}
		return tmp, true, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false, fmt.Errorf("resolving %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", false, fmt.Errorf("creating %s: %w", abs, err)
	}
	return abs, false, nil
}

// startCluster starts the simulated nodes, kube-scheduler and
// kube-controller-manager (Options.Cluster). The nodes go first so that the
// first Pods find somewhere to run.
func (cp *ControlPlane) startCluster(ctx context.Context, opts Options) error {
	count := opts.Nodes
	if count <= 0 {
		count = DefaultNodes
	}
	began := time.Now()
	var err error
	if cp.nodes, err = startNodes(ctx, cp.Config, count, opts.Verbose); err != nil {
		return fmt.Errorf("starting simulated nodes: %w", err)
	}
	cp.logf("%d simulated nodes (kwok) ready in %v", count, time.Since(began).Round(time.Millisecond))

	began = time.Now()
	if cp.scheduler, err = startScheduler(cp); err != nil {
		return fmt.Errorf("starting kube-scheduler: %w", err)
	}
	// Recorded even on error so that Stop can wait for the goroutine.
	cp.controllerManager, err = startControllerManager(ctx, cp, opts.ControllerManagerFlags)
	if err != nil {
		return fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	cp.logf("kube-controller-manager and kube-scheduler ready in %v", time.Since(began).Round(time.Millisecond))
	return nil
}

// stopCluster stops what startCluster started, in reverse order. Called
// with apiMu held.
func (cp *ControlPlane) stopCluster() []error {
	var errs []error
	if cp.controllerManager != nil {
		if err := cp.controllerManager.stop(); err != nil {
			errs = append(errs, err)
		}
		cp.controllerManager = nil
	}
	if cp.scheduler != nil {
		if err := cp.scheduler.stop(); err != nil {
			errs = append(errs, err)
		}
		cp.scheduler = nil
	}
	if cp.nodes != nil {
		cp.nodes.stop()
		cp.nodes = nil
	}
	return errs
}

// SnapshotEtcd copies etcd's data to dst, a directory that must not
// exist: it stops kube-apiserver and etcd, copies, and starts both again
// (etcd on a new port, the apiserver on its address). RestoreEtcd rolls
// the data back to it.
func (cp *ControlPlane) SnapshotEtcd(ctx context.Context, dst string) error {
	return cp.withEtcdStopped(ctx, func(data string) error { return copyDir(data, dst) }, 0)
}

// RestoreEtcd rolls etcd back to a snapshot SnapshotEtcd took, as an etcd
// restore under a running cluster does: kube-apiserver and etcd stop, the
// data is replaced by the snapshot's, and both start again on it. Objects
// deleted since are back under their UIDs, objects created since are gone.
//
// With bump 0, resource versions go back to the snapshot's: clients that
// keep running see a server whose resource versions are older than
// theirs. With bump > 0, the restore is etcd's recommended one
// (`etcdutl snapshot restore --bump-revision bump --mark-compacted`): the
// revision jumps bump past the snapshot's and everything before is
// compacted, so clients' watches are answered 410 Gone and they list
// again.
func (cp *ControlPlane) RestoreEtcd(ctx context.Context, src string, bump int) error {
	return cp.withEtcdStopped(ctx, func(data string) error {
		if err := os.RemoveAll(data); err != nil {
			return err
		}
		return copyDir(src, data)
	}, bump)
}

// withEtcdStopped runs do on etcd's data directory with kube-apiserver and
// etcd stopped, then starts them again, etcd's revision bumped first by
// bump (and compacted) when bump > 0.
func (cp *ControlPlane) withEtcdStopped(ctx context.Context, do func(dataDir string) error, bump int) error {
	cp.apiMu.Lock()
	defer cp.apiMu.Unlock()
	if cp.stopped {
		return errStopped
	}
	if cp.api != nil {
		if err := cp.api.stop(); err != nil {
			return fmt.Errorf("stopping kube-apiserver: %w", err)
		}
		cp.api = nil
	}
	if err := cp.etcd.stop(); err != nil {
		return fmt.Errorf("stopping etcd: %w", err)
	}
	cp.etcd = nil
	data := filepath.Join(cp.Dir, "etcd")
	if err := do(data); err != nil {
		return err
	}
	var err error
	if cp.etcd, err = startEtcd(ctx, data, cp.verbose); err != nil {
		return fmt.Errorf("starting etcd again: %w", err)
	}
	cp.EtcdURL = cp.etcd.url
	if bump > 0 {
		if err := cp.etcd.bump(ctx, bump); err != nil {
			return err
		}
	}
	api, err := startAPIServer(ctx, cp.EtcdURL, cp.pki, cp.apiAddr, cp.watchCacheSizes)
	if err != nil {
		if api != nil {
			err = errors.Join(err, api.stop())
		}
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	cp.api = api
	return nil
}

// copyDir copies the regular files and directories under src to dst
// (created; it must not exist).
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.Mkdir(target, 0o700)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("copying %s: not a regular file", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o600)
	})
}
