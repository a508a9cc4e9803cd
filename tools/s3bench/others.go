package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// procTime is a process's CPU time so far.
type procTime struct {
	name string
	cpu  time.Duration
}

// topOthers names the processes other than this one and skip that used the most CPU
// between two procTimes snapshots, as "name(pid) 0.42" in cores over elapsed.
func topOthers(before, after map[int]procTime, skip int, elapsed time.Duration, n int) string {
	type use struct {
		pid int
		procTime
	}
	var uses []use
	for pid, a := range after {
		if pid == os.Getpid() || pid == skip {
			continue
		}
		d := a.cpu - before[pid].cpu // a process started meanwhile counts whole
		if d > elapsed/50 {
			uses = append(uses, use{pid, procTime{a.name, d}})
		}
	}
	slices.SortFunc(uses, func(a, b use) int { return cmp.Compare(b.cpu, a.cpu) })
	var parts []string
	for _, u := range uses[:min(n, len(uses))] {
		parts = append(parts, fmt.Sprintf("%s(%d) %.2f", u.name, u.pid, u.cpu.Seconds()/elapsed.Seconds()))
	}
	return strings.Join(parts, ", ")
}
