package proc

import "syscall"

// defaultSysProcAttr has the kernel kill a started server when the process that started
// it dies, even by SIGKILL or a test binary's panic.
func defaultSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
