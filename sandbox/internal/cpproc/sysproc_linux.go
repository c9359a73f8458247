package cpproc

import "syscall"

// childProcAttr makes Linux send the child SIGTERM when its parent dies:
// the child then stops its control plane and exits (see the package
// documentation).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
