package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdReadyTimeout bounds how long Start waits for etcd to elect itself.
const etcdReadyTimeout = time.Minute

// etcdServer is a running single-member embedded etcd.
type etcdServer struct {
	etcd *embed.Etcd
	// url is the client URL, http://127.0.0.1:<port>.
	url string
	// stopping mutes etcd's logger during Close (see newEtcdLogger).
	stopping atomic.Bool
}

// startEtcd starts etcd with its data in dataDir and returns once it serves
// requests.
func startEtcd(ctx context.Context, dataDir string, verbose bool) (*etcdServer, error) {
	s := &etcdServer{}
	cfg := embed.NewConfig()
	cfg.Name = "kgc-sandbox"
	cfg.Dir = dataDir

	// Port 0 lets the kernel choose free ports while etcd binds them itself,
	// so there is no window in which another process can take a port we
	// probed. The advertised URLs keep port 0: a lone member never dials a
	// peer, nobody discovers the cluster through them, and constant URLs
	// keep the member identity stable when a kept Dir is started again.
	loopback := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls = []url.URL{loopback}
	cfg.AdvertiseClientUrls = []url.URL{loopback}
	cfg.ListenPeerUrls = []url.URL{loopback}
	cfg.AdvertisePeerUrls = []url.URL{loopback}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	// The gRPC gateway dials the advertised client address, which is port
	// 0 here; kube-apiserver speaks gRPC and never needs the gateway.
	cfg.EnableGRPCGateway = false
	// Sandbox data is disposable. Skipping fsync makes writes several
	// times faster and only risks data on a machine crash, not on a process
	// crash (the page cache still holds every write).
	cfg.UnsafeNoFsync = true

	logger, err := newEtcdLogger(verbose, &s.stopping)
	if err != nil {
		return nil, fmt.Errorf("building etcd logger: %w", err)
	}
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embed.StartEtcd: %w", err)
	}
	s.etcd = e

	fail := func(err error) (*etcdServer, error) {
		return nil, errors.Join(err, s.stop())
	}
	timer := time.NewTimer(etcdReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fail(fmt.Errorf("etcd failed while starting: %w", err))
	case <-timer.C:
		return fail(fmt.Errorf("etcd not ready after %v", etcdReadyTimeout))
	case <-ctx.Done():
		return fail(fmt.Errorf("waiting for etcd: %w", ctx.Err()))
	}
	if len(e.Clients) == 0 {
		return fail(errors.New("etcd has no client listener"))
	}
	s.url = "http://" + e.Clients[0].Addr().String()
	return s, nil
}

// stop closes etcd and returns the errors it reported while running.
func (s *etcdServer) stop() error {
	s.stopping.Store(true)
	// Close blocks until the server and its listeners are down, then
	// closes Err(); errors raised because of the shutdown are not sent.
	s.etcd.Close()
	var errs []error
	for err := range s.etcd.Err() {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// compact compacts the key-value history at the current revision (physically,
// so that the old revisions are gone when it returns) and returns it.
func (s *etcdServer) compact(ctx context.Context) (int64, error) {
	rev := s.etcd.Server.KV().Rev()
	if _, err := s.etcd.Server.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true}); err != nil {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	return rev, nil
}

// bump raises the revision by n (writes to a key of its own, outside
// kube-apiserver's prefix) and compacts everything before it, as
// `etcdutl snapshot restore --bump-revision n --mark-compacted` leaves a
// restored member.
func (s *etcdServer) bump(ctx context.Context, n int) error {
	for i := range n {
		if _, err := s.etcd.Server.Put(ctx, &pb.PutRequest{Key: []byte("/kgc-sandbox-bump"), Value: []byte(fmt.Sprint(i))}); err != nil {
			return fmt.Errorf("bumping etcd's revision: %w", err)
		}
	}
	_, err := s.compact(ctx)
	return err
}
