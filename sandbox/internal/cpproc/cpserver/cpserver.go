// Package cpserver is the child's side of package cpproc: it runs a
// control plane (package controlplane) in this process and performs the
// requests of the parent that started it. kgc-controlplane's main is Main;
// kgc-bench calls it in its control plane role.
package cpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/prometheus/common/expfmt"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/kgc-dev/kgc/sandbox/controlplane"
	"github.com/kgc-dev/kgc/sandbox/internal/cpproc"
)

// Main serves the parent over the protocol pipes (cpproc.RequestFD and
// cpproc.MessageFD) until it sends OpStop or goes away, and returns the
// exit code. SIGTERM (which Linux sends when the parent dies) stops the
// control plane and ends Main; SIGINT is ignored, so that Ctrl-C, which
// reaches the whole process group, leaves the stopping to the parent.
func Main(stderr io.Writer) int {
	signal.Ignore(os.Interrupt)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	requests := os.NewFile(cpproc.RequestFD, "requests")
	messages := os.NewFile(cpproc.MessageFD, "messages")
	if requests == nil || messages == nil {
		fmt.Fprintln(stderr, "kgc-controlplane: no protocol pipes: it is started by package cpproc")
		return 2
	}
	if err := Serve(ctx, requests, messages); err != nil {
		fmt.Fprintln(stderr, "kgc-controlplane:", err)
		return 1
	}
	return 0
}

// Serve reads requests from in and writes messages to out, as the package
// cpproc documents. It returns once it has replied to OpStop, once a start
// failed, or, after stopping the control plane, when in ends or ctx is
// done. The error is what went wrong outside of a request: reading in, or
// stopping the control plane when the parent did not ask.
func Serve(ctx context.Context, in io.Reader, out io.Writer) error {
	s := &server{enc: json.NewEncoder(out)}
	requests := make(chan cpproc.Request, 1)
	readErr := make(chan error, 1)
	go func() { readErr <- s.read(in, requests) }()

	var cp *controlplane.ControlPlane
	stop := func() error {
		if cp == nil {
			return nil
		}
		return cp.Stop()
	}
	for {
		select {
		case <-ctx.Done():
			return stop()
		case req, ok := <-requests:
			if !ok {
				// The parent is gone, or says nothing more.
				return errors.Join(<-readErr, stop())
			}
			opCtx, done := s.begin(ctx, req.ID)
			reply := s.do(opCtx, &cp, req)
			done()
			reply.ID = req.ID
			s.send(cpproc.Message{Reply: &reply})
			if req.Op == cpproc.OpStop || req.Op == cpproc.OpStart && reply.Error != "" {
				return nil
			}
		}
	}
}

type server struct {
	encMu sync.Mutex
	enc   *json.Encoder

	// The operation in progress, and the highest request ID canceled.
	mu       sync.Mutex
	current  int64
	cancel   context.CancelFunc
	canceled int64
}

// read passes requests to the serving loop, and performs OpCancel itself
// (the loop is busy with the request it cancels). At the end of in it
// cancels whatever is in progress and closes requests.
func (s *server) read(in io.Reader, requests chan<- cpproc.Request) error {
	defer close(requests)
	defer s.cancelUpTo(math.MaxInt64)
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 0, 64<<10), 256<<20)
	for scanner.Scan() {
		var req cpproc.Request
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			return fmt.Errorf("unreadable request %q: %w", scanner.Text(), err)
		}
		if req.Op == cpproc.OpCancel {
			s.cancelUpTo(req.ID)
			continue
		}
		requests <- req
	}
	if err := scanner.Err(); err != nil {
		return fmt.Errorf("reading requests: %w", err)
	}
	return nil
}

// begin returns the context of request id: canceled by OpCancel, even one
// read before the request began.
func (s *server) begin(ctx context.Context, id int64) (context.Context, func()) {
	opCtx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current, s.cancel = id, cancel
	if s.canceled >= id {
		cancel()
	}
	return opCtx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.current, s.cancel = 0, nil
		cancel()
	}
}

func (s *server) cancelUpTo(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.canceled = max(s.canceled, id)
	if s.cancel != nil && s.current <= id {
		s.cancel()
	}
}

// send writes m; a parent that no longer reads will close the request pipe
// too, which ends Serve.
func (s *server) send(m cpproc.Message) {
	s.encMu.Lock()
	defer s.encMu.Unlock()
	_ = s.enc.Encode(m)
}

func (s *server) logf(format string, args ...any) {
	s.send(cpproc.Message{Log: fmt.Sprintf(format, args...)})
}

// do performs req on *cp (starting it for OpStart) and returns the reply,
// its ID not set.
func (s *server) do(ctx context.Context, cp **controlplane.ControlPlane, req cpproc.Request) cpproc.Reply {
	var r cpproc.Reply
	var err error
	if req.Op != cpproc.OpStart && *cp == nil {
		err = fmt.Errorf("%s before start", req.Op)
	}
	switch {
	case err != nil:
	case req.Op == cpproc.OpStart:
		if *cp != nil {
			err = errors.New("started twice")
			break
		}
		*cp, err = s.start(ctx, req.Options)
		if err == nil {
			r.Started, r.EtcdURL = describe(*cp), (*cp).EtcdURL
		}
	case req.Op == cpproc.OpStopAPIServer:
		err = (*cp).StopAPIServer()
	case req.Op == cpproc.OpStartAPIServer:
		err = (*cp).StartAPIServer(ctx)
	case req.Op == cpproc.OpRestartAPIServer:
		err = (*cp).RestartAPIServer(ctx)
	case req.Op == cpproc.OpCompactEtcd:
		r.Revision, err = (*cp).CompactEtcd(ctx)
	case req.Op == cpproc.OpSnapshotEtcd:
		err = (*cp).SnapshotEtcd(ctx, req.Path)
		r.EtcdURL = (*cp).EtcdURL
	case req.Op == cpproc.OpRestoreEtcd:
		err = (*cp).RestoreEtcd(ctx, req.Path, req.Bump)
		r.EtcdURL = (*cp).EtcdURL
	case req.Op == cpproc.OpGatherMetrics:
		r.Metrics, err = gatherMetrics()
	case req.Op == cpproc.OpStop:
		err = (*cp).Stop()
	default:
		err = fmt.Errorf("unknown request %q", req.Op)
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// start sets the feature gates and starts the control plane.
func (s *server) start(ctx context.Context, o *cpproc.StartOptions) (*controlplane.ControlPlane, error) {
	if o == nil {
		o = &cpproc.StartOptions{}
	}
	if len(o.FeatureGates) > 0 {
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(o.FeatureGates); err != nil {
			return nil, fmt.Errorf("feature gates: %w", err)
		}
	}
	return controlplane.Start(ctx, controlplane.Options{
		Dir:                    o.Dir,
		Logf:                   s.logf,
		Verbose:                o.Verbose,
		WatchCacheSizes:        o.WatchCacheSizes,
		Cluster:                o.Cluster,
		Nodes:                  o.Nodes,
		ControllerManagerFlags: o.ControllerManagerFlags,
	})
}

// gatherMetrics encodes what legacyregistry holds, for OpGatherMetrics.
func gatherMetrics() ([]byte, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeProtoDelim))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// describe returns what the parent needs of cp.
func describe(cp *controlplane.ControlPlane) *cpproc.Started {
	c := cp.Config
	return &cpproc.Started{
		Host:           c.Host,
		BearerToken:    c.BearerToken,
		ServerName:     c.ServerName,
		CAData:         c.CAData,
		CertData:       c.CertData,
		KeyData:        c.KeyData,
		QPS:            c.QPS,
		Burst:          c.Burst,
		KubeconfigPath: cp.KubeconfigPath,
		Dir:            cp.Dir,
	}
}
