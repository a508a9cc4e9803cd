//go:build cgo && linux

package main

import (
	"context"
	"testing"
	"time"
)

// TestSetMallocArenas: glibc takes the bound (mallopt answers 1).
func TestSetMallocArenas(t *testing.T) {
	if !setMallocArenas(2) {
		t.Fatal("mallopt(M_ARENA_MAX, 2) refused")
	}
}

// TestTrimMallocEvery: a trim runs, and the loop returns once its context ends.
func TestTrimMallocEvery(t *testing.T) {
	trimMalloc()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		trimMallocEvery(ctx, time.Millisecond)
		close(done)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("trimMallocEvery did not return after its context ended")
	}
}
