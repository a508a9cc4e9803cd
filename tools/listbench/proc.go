package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Memory is a process's memory from /proc/PID/status, in KiB.
type Memory struct {
	RSSKiB     int64 `json:"vm_rss_kib"`
	PeakKiB    int64 `json:"vm_hwm_kib"`
	AnonKiB    int64 `json:"rss_anon_kib"`
	FileKiB    int64 `json:"rss_file_kib"`
	ThreadsNum int64 `json:"threads"`
}

func procMemory(pid int) (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	var m Memory
	fields := map[string]*int64{"VmRSS": &m.RSSKiB, "VmHWM": &m.PeakKiB, "RssAnon": &m.AnonKiB, "RssFile": &m.FileKiB, "Threads": &m.ThreadsNum}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if p := fields[name]; ok && p != nil {
			v := strings.Fields(val)
			if len(v) > 0 {
				*p, _ = strconv.ParseInt(v[0], 10, 64)
			}
		}
	}
	if m.RSSKiB == 0 {
		return m, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, sc.Err()
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on every Linux Go supports).
const clockTicks = 100

// procCPU is the CPU time (user+system) process pid has used, or -1 if unknown.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Field 2, the command name, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	st, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * time.Second / clockTicks
}

// Machine describes where the benchmark ran.
type Machine struct {
	Cores     int    `json:"cores"`
	MemBytes  int64  `json:"mem_bytes"`
	CPUModel  string `json:"cpu_model"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	OSArch    string `json:"os_arch"`
	DataFS    string `json:"data_fs"`
}

func machine(dataDir string) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OSArch: runtime.GOOS + "/" + runtime.GOARCH, DataFS: fsType(dataDir)}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					m.MemBytes = kb << 10
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	return m
}
