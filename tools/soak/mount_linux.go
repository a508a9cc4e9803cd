package main

import (
	"errors"
	"os"
	"syscall"
)

// mountTmpfs mounts a tmpfs of the given size (mount(8) syntax, e.g. 256m) on dir.
func mountTmpfs(dir, size string) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size)
}

// unmount unmounts dir, lazily if it is still busy.
func unmount(dir string) error {
	err := syscall.Unmount(dir, 0)
	if errors.Is(err, syscall.EBUSY) {
		err = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	return err
}

// procAttr puts a node in its own process group (a Ctrl-C meant for the soak does not
// reach it: the soak stops it) and has the kernel kill it if the soak dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// fallocate allocates n bytes to f at once.
func fallocate(f *os.File, n int64) error { return syscall.Fallocate(int(f.Fd()), 0, 0, n) }
