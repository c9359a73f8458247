//go:build unix

package cpproc

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on path, waiting for it, and returns
// the function that releases it. The kernel releases it too when the
// process exits, however it exits.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
