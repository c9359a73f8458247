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
}

// ControlPlane is a running etcd + kube-apiserver pair. Create it with Start
// and release it with Stop.
type ControlPlane struct {
	// Config is an admin (system:masters) client configuration for the
	// kube-apiserver. Its TLSClientConfig.ServerName must be kept: the serving
	// certificate is verified against that name, not against the host.
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

	etcd      *etcdServer
	api       *apiServer
	stopOnce  sync.Once
	stopError error
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
	cp := &ControlPlane{logf: opts.Logf}
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

	pki, err := ensurePKI(filepath.Join(cp.Dir, "pki"))
	if err != nil {
		return nil, err
	}

	apiStart := time.Now()
	api, err := startAPIServer(ctx, cp.EtcdURL, pki)
	// Recorded even on error so that Stop can wait for the goroutine.
	cp.api = api
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	cp.Config = api.config
	cp.logf("kube-apiserver ready at %s in %v", cp.Config.Host, time.Since(apiStart).Round(time.Millisecond))

	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.KubeconfigPath, cp.Config); err != nil {
		return nil, err
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

	// The apiserver goes first: it holds etcd clients and watches, and
	// stopping etcd under it would turn a clean drain into a storm of
	// retries.
	// Clients may still be connected and watching: the apiserver ends
	// their watches and, past a short grace period, their connections.
	if cp.api != nil {
		if err := cp.api.stop(); err != nil {
			errs = append(errs, fmt.Errorf("kube-apiserver: %w", err))
		}
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
	if cp.api != nil || cp.etcd != nil {
		cp.logf("control plane stopped in %v", time.Since(began).Round(time.Millisecond))
	}
	return errors.Join(errs...)
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
