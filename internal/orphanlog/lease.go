package orphanlog

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// Annotation is where LeaseStore keeps the entries.
const Annotation = "kgc.dev/orphaned-owners"

// ErrUnreadable is what Load answers (wrapped) for a journal whose stored
// form cannot be read: a corrupt annotation, or one a newer kgc wrote.
var ErrUnreadable = errors.New("the orphan journal cannot be read")

// LeaseStore keeps the journal in an annotation of a coordination.k8s.io
// Lease of its own (not the leader-election Lease: its renewals every few
// seconds would conflict with the journal's writes). kgc's leader-election
// Role (get, create, update on Leases in kgc's namespace) covers it. The
// Lease is created on the first write.
type LeaseStore struct {
	Client          coordinationv1client.LeasesGetter
	Namespace, Name string

	// lease is the Lease last read or written, so that Save keeps its
	// other fields.
	mu    sync.Mutex
	lease *coordinationv1.Lease
}

func (s *LeaseStore) String() string { return "Lease " + s.Namespace + "/" + s.Name }

// Load implements Store.
func (s *LeaseStore) Load(ctx context.Context) (map[types.UID]time.Time, string, error) {
	l, err := s.Client.Leases(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s.keep(nil)
		return map[types.UID]time.Time{}, "", nil
	}
	if err != nil {
		return nil, "", err
	}
	entries, err := Decode(l.Annotations[Annotation])
	if err != nil {
		return nil, "", fmt.Errorf("%w: annotation %s of %s: %w", ErrUnreadable, Annotation, s, err)
	}
	s.keep(l)
	return entries, versionOf(l), nil
}

// unversioned is the version of a Lease served without a resourceVersion
// (only fake clients do that): it is then updated unconditionally.
const unversioned = "unversioned"

func versionOf(l *coordinationv1.Lease) string {
	if l.ResourceVersion == "" {
		return unversioned
	}
	return l.ResourceVersion
}

func (s *LeaseStore) keep(l *coordinationv1.Lease) {
	s.mu.Lock()
	s.lease = l
	s.mu.Unlock()
}

// Save implements Store: an Update at version, or a Create when version is
// "".
func (s *LeaseStore) Save(ctx context.Context, entries map[types.UID]time.Time, version string) (string, error) {
	s.mu.Lock()
	l := s.lease
	s.mu.Unlock()
	if l == nil || version == "" {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}
	} else {
		l = l.DeepCopy()
	}
	l.ResourceVersion = version
	if version == unversioned {
		l.ResourceVersion = ""
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[Annotation] = Encode(entries)
	var out *coordinationv1.Lease
	var err error
	if version == "" {
		out, err = s.Client.Leases(s.Namespace).Create(ctx, l, metav1.CreateOptions{})
	} else {
		out, err = s.Client.Leases(s.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return "", err
	}
	s.keep(out)
	return versionOf(out), nil
}

// Encode writes entries compactly, for an annotation (whose total size
// kube-apiserver limits to 256 KiB: DefaultMaxEntries take at most about
// 182 KB). Times are rounded up to the next multiple of Granularity (an
// entry is kept a little longer, never shorter). The format, version 1, is
// the line "v1" followed by one line per time at which entries were
// recorded, oldest first: the time — Unix seconds on the first line, the
// seconds since the previous line's time on the others — then the UIDs,
// separated by spaces. A UID that is a canonical UUID (every kube-apiserver
// UID) is written as its 16 bytes in unpadded base64url (22 characters);
// any other as "~" and its URL path escape.
func Encode(entries map[types.UID]time.Time) string {
	bySecond := map[int64][]types.UID{}
	for uid, at := range entries {
		sec := roundUp(at)
		bySecond[sec] = append(bySecond[sec], uid)
	}
	var b strings.Builder
	b.WriteString("v1")
	prev := int64(0)
	for _, sec := range slices.Sorted(maps.Keys(bySecond)) {
		b.WriteByte('\n')
		b.WriteString(strconv.FormatInt(sec-prev, 10))
		prev = sec
		uids := bySecond[sec]
		slices.Sort(uids)
		for _, uid := range uids {
			b.WriteByte(' ')
			b.WriteString(encodeUID(uid))
		}
	}
	return b.String()
}

// Decode reads what Encode wrote ("" is no entries).
func Decode(s string) (map[types.UID]time.Time, error) {
	out := map[types.UID]time.Time{}
	if s == "" {
		return out, nil
	}
	lines := strings.Split(s, "\n")
	if lines[0] != "v1" {
		return nil, fmt.Errorf("unknown format %q (this kgc reads v1)", lines[0])
	}
	sec := int64(0)
	for i, line := range lines[1:] {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		d, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: the time %q: %w", i+2, fields[0], err)
		}
		sec += d
		at := time.Unix(sec, 0)
		for _, f := range fields[1:] {
			uid, err := decodeUID(f)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+2, err)
			}
			out[uid] = at
		}
	}
	return out, nil
}

// Granularity is the precision of the times Encode writes.
const Granularity = 10 * time.Second

func roundUp(at time.Time) int64 {
	g := int64(Granularity / time.Second)
	sec := at.Unix()
	if at.Nanosecond() > 0 {
		sec++
	}
	if r := sec % g; r != 0 {
		sec += g - r
	}
	return sec
}

func encodeUID(uid types.UID) string {
	if u, err := uuid.Parse(string(uid)); err == nil && u.String() == string(uid) {
		return base64.RawURLEncoding.EncodeToString(u[:])
	}
	return "~" + url.PathEscape(string(uid))
}

func decodeUID(f string) (types.UID, error) {
	if raw, ok := strings.CutPrefix(f, "~"); ok {
		s, err := url.PathUnescape(raw)
		if err != nil {
			return "", fmt.Errorf("the UID %q: %w", f, err)
		}
		return types.UID(s), nil
	}
	b, err := base64.RawURLEncoding.DecodeString(f)
	if err != nil || len(b) != 16 {
		return "", fmt.Errorf("the UID %q is neither 22 characters of base64url nor ~-escaped", f)
	}
	u, _ := uuid.FromBytes(b)
	return types.UID(u.String()), nil
}

// MemoryStore is a Store in memory: for tests and the simulator, where it
// outlives the collectors started on it.
type MemoryStore struct {
	mu      sync.Mutex
	entries map[types.UID]time.Time
	version int
	fail    error
	saves   int
}

func (m *MemoryStore) String() string { return "memory" }

// Load implements Store.
func (m *MemoryStore) Load(context.Context) (map[types.UID]time.Time, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, "", m.fail
	}
	if m.version == 0 {
		return map[types.UID]time.Time{}, "", nil
	}
	return maps.Clone(m.entries), strconv.Itoa(m.version), nil
}

// Save implements Store.
func (m *MemoryStore) Save(_ context.Context, entries map[types.UID]time.Time, version string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return "", m.fail
	}
	cur := ""
	if m.version > 0 {
		cur = strconv.Itoa(m.version)
	}
	if version != cur {
		return "", apierrors.NewConflict(coordinationv1.Resource("leases"), "memory", fmt.Errorf("at version %s, not %s", cur, version))
	}
	m.entries = maps.Clone(entries)
	m.version++
	m.saves++
	return strconv.Itoa(m.version), nil
}

// Entries returns what is stored.
func (m *MemoryStore) Entries() map[types.UID]time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.entries)
}

// SetFail makes every Load and Save fail with err until it is set to nil.
func (m *MemoryStore) SetFail(err error) {
	m.mu.Lock()
	m.fail = err
	m.mu.Unlock()
}

// Saves returns the number of successful Saves.
func (m *MemoryStore) Saves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves
}
