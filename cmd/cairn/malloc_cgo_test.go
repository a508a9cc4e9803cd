//go:build cgo && linux

package main

import "testing"

// TestSetMallocArenas: glibc takes the bound (mallopt answers 1).
func TestSetMallocArenas(t *testing.T) {
	if !setMallocArenas(2) {
		t.Fatal("mallopt(M_ARENA_MAX, 2) refused")
	}
}
