//go:build !linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

func mountTmpfs(dir, size string) error { return errors.New("tmpfs mounts need Linux") }

func unmount(dir string) error { return nil }

func setProcAttr(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

func fallocate(f *os.File, n int64) error { return errors.ErrUnsupported }
