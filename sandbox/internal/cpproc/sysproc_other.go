//go:build !linux

package cpproc

import "syscall"

// childProcAttr is nil where there is no parent-death signal: the child
// still exits when its request pipe closes.
func childProcAttr() *syscall.SysProcAttr {
	return nil
}
