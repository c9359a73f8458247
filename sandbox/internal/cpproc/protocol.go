package cpproc

import "errors"

// The child's protocol pipes, as file descriptors of the child: what
// exec.Cmd.ExtraFiles makes of its first two entries.
const (
	// RequestFD is read by the child: one Request per line.
	RequestFD = 3
	// MessageFD is written by the child: one Message per line.
	MessageFD = 4
)

// Op names a request.
type Op string

// The requests, each the ControlPlane method of the same name (controlplane
// package), but OpCancel.
const (
	OpStart            Op = "start"
	OpStopAPIServer    Op = "stop-apiserver"
	OpStartAPIServer   Op = "start-apiserver"
	OpRestartAPIServer Op = "restart-apiserver"
	OpCompactEtcd      Op = "compact-etcd"
	OpSnapshotEtcd     Op = "snapshot-etcd"
	OpRestoreEtcd      Op = "restore-etcd"
	OpStop             Op = "stop"
	// OpGatherMetrics gathers the child's process-wide component-base
	// registry (legacyregistry), where kube-apiserver and
	// kube-controller-manager export their series.
	OpGatherMetrics Op = "gather-metrics"
	// OpCancel cancels the context of request ID, if it is still in
	// progress or not yet begun. It has no reply of its own.
	OpCancel Op = "cancel"
)

// Request is one line the parent writes to the child.
type Request struct {
	ID int64 `json:"id"`
	Op Op    `json:"op"`
	// Options are OpStart's.
	Options *StartOptions `json:"options,omitempty"`
	// Path is the snapshot directory of OpSnapshotEtcd and OpRestoreEtcd.
	Path string `json:"path,omitempty"`
	// Bump is OpRestoreEtcd's revision bump.
	Bump int `json:"bump,omitempty"`
}

// StartOptions are the fields of controlplane.Options that cross the
// process boundary, and the feature gates the child sets before starting.
type StartOptions struct {
	Dir                    string          `json:"dir,omitempty"`
	Verbose                bool            `json:"verbose,omitempty"`
	WatchCacheSizes        []string        `json:"watchCacheSizes,omitempty"`
	Cluster                bool            `json:"cluster,omitempty"`
	Nodes                  int             `json:"nodes,omitempty"`
	ControllerManagerFlags []string        `json:"controllerManagerFlags,omitempty"`
	FeatureGates           map[string]bool `json:"featureGates,omitempty"`
}

// Message is one line the child writes to the parent: a progress line
// (Log) or the reply to the request in progress (Reply).
type Message struct {
	Log   string `json:"log,omitempty"`
	Reply *Reply `json:"reply,omitempty"`
}

// Reply answers one request.
type Reply struct {
	ID int64 `json:"id"`
	// Error is the operation's error, if it failed.
	Error string `json:"error,omitempty"`
	// Started is OpStart's result.
	Started *Started `json:"started,omitempty"`
	// EtcdURL is etcd's client URL after OpStart, OpSnapshotEtcd and
	// OpRestoreEtcd (which start etcd again on a new port).
	EtcdURL string `json:"etcdURL,omitempty"`
	// Revision is the revision OpCompactEtcd compacted at.
	Revision int64 `json:"revision,omitempty"`
	// Metrics are OpGatherMetrics' metric families in the Prometheus
	// delimited protobuf format, which keeps them exactly as gathered.
	Metrics []byte `json:"metrics,omitempty"`
}

// err returns the reply's error, or nil.
func (r Reply) err() error {
	if r.Error == "" {
		return nil
	}
	return errors.New(r.Error)
}

// Started describes the running control plane: the fields of
// controlplane.ControlPlane, its Config in the fields of rest.Config that
// it sets.
type Started struct {
	Host           string  `json:"host"`
	BearerToken    string  `json:"bearerToken,omitempty"`
	ServerName     string  `json:"serverName,omitempty"`
	CAData         []byte  `json:"caData,omitempty"`
	CertData       []byte  `json:"certData,omitempty"`
	KeyData        []byte  `json:"keyData,omitempty"`
	QPS            float32 `json:"qps,omitempty"`
	Burst          int     `json:"burst,omitempty"`
	KubeconfigPath string  `json:"kubeconfigPath"`
	Dir            string  `json:"dir"`
}
