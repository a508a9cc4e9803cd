//go:build !linux

package main

import (
	"errors"
	"os"
	"syscall"
)

func mountTmpfs(dir, size string) error { return errors.New("tmpfs mounts need Linux") }

func unmount(dir string) error { return nil }

func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func fallocate(f *os.File, n int64) error { return errors.ErrUnsupported }
