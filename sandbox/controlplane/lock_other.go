//go:build !unix

package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDir only opens a marker file where flock is unavailable; running two
// control planes on one directory is then the caller's mistake to avoid.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return f, nil
}
