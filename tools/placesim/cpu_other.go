//go:build !unix

package main

import "time"

// cpuTime returns 0 where getrusage is not available: table times are then wall time.
func cpuTime() time.Duration { return 0 }
