//go:build unix

package controlplane

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive, non-blocking lock on dir, held until the
// returned file is closed (or the process exits, even by SIGKILL). Two
// control planes on one directory would share an etcd data directory; etcd
// would block forever on its database lock, so failing fast with a clear
// message is kinder.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is in use by another control plane: %w", dir, err)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f, nil
}
