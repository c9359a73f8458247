//go:build !unix

package cpproc

// lockFile does nothing where flock is unavailable: concurrent builds of
// the child by several processes then race on its binary.
func lockFile(string) (unlock func(), err error) {
	return func() {}, nil
}
