//go:build !cgo || !linux

package main

import (
	"context"
	"time"
)

// setMallocArenas does nothing: without cgo the index allocates in the Go heap.
func setMallocArenas(n int) bool { return false }

// trimMallocEvery does nothing: without cgo there is no C allocator to trim.
func trimMallocEvery(ctx context.Context, d time.Duration) {}
