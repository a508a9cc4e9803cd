//go:build cgo && linux

package main

/*
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

// cairn_arenas bounds the C allocator's arenas (glibc's mallopt M_ARENA_MAX) at a
// quarter of the cores, at least 2, unless MALLOC_ARENA_MAX sets them. It runs as the
// program loads, before the Go runtime starts its threads: glibc gives each new thread
// that allocates an arena of its own while under the bound, so a bound set later, from
// Go, leaves the arenas made before it (measured: 5 instead of 2).
__attribute__((constructor)) static void cairn_arenas(void) {
	if (getenv("MALLOC_ARENA_MAX") != NULL) {
		return;
	}
	long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;
	mallopt(M_ARENA_MAX, n < 2 ? 2 : (int)n);
}

static int cairn_set_arenas(int n) { return mallopt(M_ARENA_MAX, n); }
*/
import "C"

import (
	"context"
	"time"
)

// The index (pebble) allocates its block cache and memtables with C malloc when cgo is
// on, as in this build. glibc's default is up to 8 arenas per core, one per thread that
// allocates, and memory freed in one arena is reused only by that arena: the block
// cache's churn spread over them held about 20 MiB more than the cache's 64 MiB after
// listing a million objects (docs/benchmarks.md, "10 M objects on one node"). pebble
// allocates in C only for cache misses and new memtables, so a few arenas do not contend.
// The bound is set by the C constructor above; setMallocArenas is for tests.

// setMallocArenas sets the bound at n; it reports whether glibc took it.
func setMallocArenas(n int) bool { return C.cairn_set_arenas(C.int(n)) == 1 }

// trimMallocEvery hands the C allocator's free memory back to the kernel every d until
// ctx ends (glibc's malloc_trim, which also releases free pages inside an arena, not only
// at its top). The block cache's churn leaves freed blocks scattered through the arenas:
// after listing 10 M objects the server held 17 MiB less anonymous memory with it (107.5
// against 90.1 MiB; docs/benchmarks.md, "10 M objects on one node"). A trim takes 1-20 ms
// (a loaded machine), during which C allocations in the arena being trimmed wait: only
// the index's cache misses and new memtables allocate there.
func trimMallocEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			trimMalloc()
		}
	}
}

// trimMalloc runs one trim.
func trimMalloc() { C.malloc_trim(0) }
