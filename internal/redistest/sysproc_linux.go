package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the test binary dies, so an interrupted
// test run leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
