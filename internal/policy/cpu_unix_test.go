//go:build unix

package policy

import "syscall"

// processCPU returns the CPU time (user and system, in nanoseconds) this
// process has used, or -1 if it is not known. Benchmarks report it per
// operation next to wall time: on a shared, loaded machine it is the steadier
// figure.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
