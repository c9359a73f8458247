package cpproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/rest"
)

// The sandbox's defaults, as package controlplane has them (its tests check
// that they agree), for callers that cannot import it.
const (
	// DefaultControllers is controlplane.DefaultControllers.
	DefaultControllers = "*,-garbage-collector-controller"
	// DefaultNodes is controlplane.DefaultNodes.
	DefaultNodes = 3
)

// Options configures Start. The fields up to FeatureGates are
// controlplane.Options'.
type Options struct {
	// Dir holds etcd data, certificates and the admin kubeconfig. Empty
	// means a new temporary directory, removed by Stop (or by the child
	// when the parent dies).
	Dir string
	// Logf receives the control plane's progress messages. Nil discards
	// them. It is called from a goroutine of this package, but only while
	// Start or a method of ControlPlane runs, before it returns.
	Logf func(format string, args ...any)
	// Verbose keeps the logs of the control plane's components; they go to
	// Output.
	Verbose bool
	// WatchCacheSizes is kube-apiserver's --watch-cache-sizes.
	WatchCacheSizes []string
	// Cluster also runs kube-controller-manager, kube-scheduler and
	// simulated nodes.
	Cluster bool
	// Nodes is the number of simulated nodes with Cluster; 0 means
	// DefaultNodes.
	Nodes int
	// ControllerManagerFlags are extra kube-controller-manager flags.
	ControllerManagerFlags []string
	// FeatureGates are set on the child's process-wide feature gate
	// (k8s.io/apiserver's DefaultMutableFeatureGate) before the control
	// plane starts: kube-controller-manager reads some from there.
	FeatureGates map[string]bool

	// Output receives the child's stdout and stderr: with Verbose, the
	// components' logs; always, etcd's errors and anything the child
	// prints when it fails. Nil means os.Stderr, where the same output
	// goes when the control plane runs in-process. The end of it is also
	// kept for the errors that report the child's exit.
	Output io.Writer
	// Command is the child's command line. Empty means kgc-controlplane,
	// built on first use (see Start).
	Command []string
	// Race builds kgc-controlplane with -race after all. It is for a test
	// whose outcome depends on how fast the control plane's components are
	// next to the kgc under test, itself under the race detector: the
	// shadow tests compare kgc with kube-controller-manager's collector
	// racing it on the same objects.
	Race bool
}

// ControlPlane is a control plane running in a child process. Create it
// with Start and release it with Stop. Its methods may be called from
// several goroutines; they run one at a time.
type ControlPlane struct {
	// Config is an admin (system:masters) client configuration for the
	// kube-apiserver, valid across StopAPIServer and StartAPIServer. Copy
	// it (rest.CopyConfig) before changing it.
	Config *rest.Config
	// KubeconfigPath is an admin kubeconfig equivalent to Config.
	KubeconfigPath string
	// Dir is the directory holding all state.
	Dir string
	// EtcdURL is etcd's client URL; SnapshotEtcd and RestoreEtcd change it.
	EtcdURL string

	cmd      *exec.Cmd
	requests *os.File
	replies  chan Reply // closed when the child closes its message pipe
	logf     func(format string, args ...any)
	output   *tail
	exited   chan struct{}
	waitErr  error // cmd.Wait's, once exited is closed

	// mu makes requests one at a time; stopped is set by Stop.
	mu      sync.Mutex
	lastID  int64
	stopped bool

	stopOnce sync.Once
	stopErr  error
}

// Timeouts of the child's shutdown.
const (
	// stopTimeout bounds Stop's wait for the child to stop its control
	// plane and exit; it then kills it. Stopping takes about a second.
	stopTimeout = 2 * time.Minute
	// exitWait bounds the wait for the child's exit status once it has
	// closed its message pipe, for the error that reports it.
	exitWait = 10 * time.Second
	// tailSize is how much of the child's output errors quote.
	tailSize = 16 << 10
)

// Start starts the child and its control plane, and returns once the
// apiserver is ready. Without Options.Command it first builds
// kgc-controlplane (without -race, unless Options.Race) into a directory
// shared by the packages of one source tree, under a file lock: the go
// command relinks it only when its sources changed, and each caller runs
// the binary it built (a hard link of it), never one another caller
// rebuilt meanwhile. The first build on a machine compiles kube-apiserver
// and takes minutes; ctx bounds the control plane's start, not the build.
// On error everything started is stopped.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	command := opts.Command
	if len(command) == 0 {
		began := time.Now()
		binary, release, err := childBinary(opts.Race)
		if err != nil {
			return nil, err
		}
		defer release()
		if opts.Logf != nil {
			opts.Logf("kgc-controlplane built (or found up to date) in %s", time.Since(began).Round(time.Millisecond))
		}
		command = []string{binary}
	}
	c, err := startChild(command, opts)
	if err != nil {
		return nil, err
	}
	start := &StartOptions{
		Verbose:                opts.Verbose,
		WatchCacheSizes:        opts.WatchCacheSizes,
		Cluster:                opts.Cluster,
		Nodes:                  opts.Nodes,
		ControllerManagerFlags: opts.ControllerManagerFlags,
		FeatureGates:           opts.FeatureGates,
	}
	if opts.Dir != "" {
		// The child shares the working directory; an absolute path is
		// what controlplane reports back anyway.
		if start.Dir, err = filepath.Abs(opts.Dir); err != nil {
			c.abandon()
			return nil, err
		}
	}
	r, err := c.call(ctx, Request{Op: OpStart, Options: start})
	if err == nil && r.Started == nil {
		err = errors.New("the control plane process replied to start without its description")
	}
	if err != nil {
		// A child whose start failed has stopped what it started and
		// exits by itself.
		c.abandon()
		return nil, err
	}
	s := r.Started
	c.Config = &rest.Config{
		Host:        s.Host,
		BearerToken: s.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: s.ServerName,
			CAData:     s.CAData,
			CertData:   s.CertData,
			KeyData:    s.KeyData,
		},
		QPS:   s.QPS,
		Burst: s.Burst,
	}
	c.KubeconfigPath, c.Dir, c.EtcdURL = s.KubeconfigPath, s.Dir, r.EtcdURL
	return c, nil
}

// startChild starts the child process with its protocol pipes and the
// goroutines that read its messages and reap it.
func startChild(command []string, opts Options) (_ *ControlPlane, err error) {
	c := &ControlPlane{
		replies: make(chan Reply, 1),
		logf:    opts.Logf,
		output:  &tail{max: tailSize},
		exited:  make(chan struct{}),
	}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	out := opts.Output
	if out == nil {
		out = os.Stderr
	}
	c.cmd = exec.Command(command[0], command[1:]...)
	// One writer for both, so that the child's output keeps its order.
	c.cmd.Stdout = io.MultiWriter(c.output, out)
	c.cmd.Stderr = c.cmd.Stdout
	c.cmd.SysProcAttr = childProcAttr()

	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	msgR, msgW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	// The child's ends are its own once it runs (or useless if it did not
	// start).
	defer reqR.Close()
	defer msgW.Close()
	c.cmd.ExtraFiles = []*os.File{reqR, msgW} // RequestFD, MessageFD
	c.requests = reqW

	started := make(chan error)
	go func() {
		// The parent-death signal is sent when the thread that started the
		// child exits, not the process: this goroutine keeps its thread,
		// which the runtime then never ends, until the child has exited.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := c.cmd.Start()
		started <- err
		if err != nil {
			return
		}
		c.waitErr = c.cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		reqW.Close()
		msgR.Close()
		return nil, fmt.Errorf("starting the control plane process %s: %w", command[0], err)
	}
	go c.readMessages(msgR)
	return c, nil
}

// readMessages passes the child's progress lines to logf and its replies
// to call, in order, until the child closes its message pipe.
func (c *ControlPlane) readMessages(r *os.File) {
	defer close(c.replies)
	defer r.Close()
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 256<<20)
	for scanner.Scan() {
		var m Message
		if err := json.Unmarshal(scanner.Bytes(), &m); err != nil {
			c.logf("unreadable message from the control plane process: %q: %v", scanner.Text(), err)
			continue
		}
		if m.Log != "" {
			c.logf("%s", m.Log)
		}
		if m.Reply != nil {
			c.replies <- *m.Reply
		}
	}
}

var errStopped = errors.New("control plane stopped")

// call sends req and waits for its reply. If ctx ends first, it asks the
// child to cancel the operation and still waits for the reply, so that the
// next request starts from a known state.
func (c *ControlPlane) call(ctx context.Context, req Request) (Reply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return Reply{}, errStopped
	}
	return c.exchange(ctx, req)
}

// exchange is call with c.mu held.
func (c *ControlPlane) exchange(ctx context.Context, req Request) (Reply, error) {
	c.lastID++
	req.ID = c.lastID
	if err := c.send(req); err != nil {
		return Reply{}, c.exitError(fmt.Errorf("sending %s: %w", req.Op, err))
	}
	var canceled error
	select {
	case r, ok := <-c.replies:
		if !ok {
			return Reply{}, c.exitError(fmt.Errorf("waiting for the reply to %s", req.Op))
		}
		return r, c.checkReply(req, r)
	case <-ctx.Done():
		canceled = ctx.Err()
		// The child may have finished meanwhile; then the cancel finds
		// nothing to cancel.
		_ = c.send(Request{ID: req.ID, Op: OpCancel})
	}
	r, ok := <-c.replies
	if !ok {
		return Reply{}, errors.Join(canceled, c.exitError(fmt.Errorf("waiting for the reply to %s", req.Op)))
	}
	if err := c.checkReply(req, r); err != nil {
		return r, fmt.Errorf("%w: %w", canceled, err)
	}
	// The operation completed before it could be canceled.
	return r, nil
}

func (c *ControlPlane) checkReply(req Request, r Reply) error {
	if r.ID != req.ID {
		return fmt.Errorf("the control plane process replied to request %d while %d (%s) was in progress", r.ID, req.ID, req.Op)
	}
	return r.err()
}

func (c *ControlPlane) send(req Request) error {
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = c.requests.Write(append(line, '\n'))
	return err
}

// exitError reports that the child is gone (or going): err, how it exited
// and the end of its output.
func (c *ControlPlane) exitError(err error) error {
	select {
	case <-c.exited:
		err = fmt.Errorf("%w: the control plane process exited (%v)", err, c.waitErr)
	case <-time.After(exitWait):
		err = fmt.Errorf("%w: the control plane process closed its message pipe", err)
	}
	if t := c.output.String(); t != "" {
		err = fmt.Errorf("%w; the end of its output:\n%s", err, t)
	}
	return err
}

// Stop stops the control plane and waits for the child to exit. It is safe
// to call more than once; later calls return the first call's result.
// Methods called after Stop return an error.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *ControlPlane) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	var errs []error
	select {
	case <-c.exited:
		// Nothing to ask: only its exit status is left to report.
	default:
		if err := c.askToStop(); err != nil {
			errs = append(errs, err)
		}
	}
	// End of file on its request pipe: a child that missed the request
	// stops all the same.
	c.requests.Close()
	if !c.waitExit() {
		errs = append(errs, fmt.Errorf("the control plane process did not exit within %s of being stopped, and was killed", stopTimeout))
	}
	if c.waitErr != nil && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("the control plane process: %w; the end of its output:\n%s", c.waitErr, c.output.String()))
	}
	return errors.Join(errs...)
}

// askToStop sends OpStop and waits, up to stopTimeout, for its reply.
// Called with c.mu held.
func (c *ControlPlane) askToStop() error {
	c.lastID++
	req := Request{ID: c.lastID, Op: OpStop}
	if err := c.send(req); err != nil {
		return c.exitError(fmt.Errorf("sending %s: %w", req.Op, err))
	}
	select {
	case r, ok := <-c.replies:
		if !ok {
			return c.exitError(fmt.Errorf("waiting for the reply to %s", req.Op))
		}
		return c.checkReply(req, r)
	case <-time.After(stopTimeout):
		return fmt.Errorf("the control plane did not stop within %s", stopTimeout)
	}
}

// waitExit waits up to stopTimeout for the child to exit, kills it
// otherwise, and reports whether it exited by itself.
func (c *ControlPlane) waitExit() bool {
	select {
	case <-c.exited:
		return true
	case <-time.After(stopTimeout):
		_ = c.cmd.Process.Kill()
		<-c.exited
		return false
	}
}

// abandon closes the request pipe of a child that failed to start and
// reaps it.
func (c *ControlPlane) abandon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	c.requests.Close()
	c.waitExit()
}

// StopAPIServer stops kube-apiserver alone; etcd keeps running.
func (c *ControlPlane) StopAPIServer() error {
	_, err := c.call(context.Background(), Request{Op: OpStopAPIServer})
	return err
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address, with the same credentials, and returns once it is ready.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	_, err := c.call(ctx, Request{Op: OpStartAPIServer})
	return err
}

// RestartAPIServer is StopAPIServer followed by StartAPIServer.
func (c *ControlPlane) RestartAPIServer(ctx context.Context) error {
	_, err := c.call(ctx, Request{Op: OpRestartAPIServer})
	return err
}

// CompactEtcd compacts etcd's history at its current revision and returns
// that revision.
func (c *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	r, err := c.call(ctx, Request{Op: OpCompactEtcd})
	return r.Revision, err
}

// SnapshotEtcd copies etcd's data to dst, a directory that must not exist,
// with kube-apiserver and etcd stopped meanwhile.
func (c *ControlPlane) SnapshotEtcd(ctx context.Context, dst string) error {
	return c.etcdCall(ctx, Request{Op: OpSnapshotEtcd, Path: dst})
}

// RestoreEtcd rolls etcd back to a snapshot SnapshotEtcd took, bumping its
// revision by bump (and compacting) when bump > 0.
func (c *ControlPlane) RestoreEtcd(ctx context.Context, src string, bump int) error {
	return c.etcdCall(ctx, Request{Op: OpRestoreEtcd, Path: src, Bump: bump})
}

// GatherMetrics returns what the child's process-wide component-base
// registry (k8s.io/component-base/metrics/legacyregistry) holds: the
// series of kube-apiserver and, with Options.Cluster, of
// kube-controller-manager, as legacyregistry.DefaultGatherer.Gather would
// return them in the child.
func (c *ControlPlane) GatherMetrics(ctx context.Context) ([]*dto.MetricFamily, error) {
	r, err := c.call(ctx, Request{Op: OpGatherMetrics})
	if err != nil {
		return nil, err
	}
	var families []*dto.MetricFamily
	dec := expfmt.NewDecoder(bytes.NewReader(r.Metrics), expfmt.NewFormat(expfmt.TypeProtoDelim))
	for {
		f := &dto.MetricFamily{}
		if err := dec.Decode(f); errors.Is(err, io.EOF) {
			return families, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding the control plane's metrics: %w", err)
		}
		families = append(families, f)
	}
}

// etcdCall makes a request that starts etcd again, and keeps its new URL.
func (c *ControlPlane) etcdCall(ctx context.Context, req Request) error {
	abs, err := filepath.Abs(req.Path)
	if err != nil {
		return err
	}
	req.Path = abs
	r, err := c.call(ctx, req)
	if r.EtcdURL != "" {
		c.mu.Lock()
		c.EtcdURL = r.EtcdURL
		c.mu.Unlock()
	}
	return err
}

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
	cut bool // bytes before buf were dropped
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

// String returns the last max bytes written, from the first line that
// starts within them.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	cut := t.cut
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		cut = true
	}
	if cut {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}
