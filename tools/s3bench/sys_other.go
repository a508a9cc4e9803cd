//go:build !linux

package main

import (
	"time"
)

func selfCPU() time.Duration     { return 0 }
func procCPU(int) time.Duration  { return -1 }
func fsType(string) string       { return "" }
func machineBusy() time.Duration { return -1 }

func procTimes() map[int]procTime { return nil }
