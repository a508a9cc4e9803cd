//go:build !linux

package proc

import "syscall"

func defaultSysProcAttr() *syscall.SysProcAttr { return nil }
