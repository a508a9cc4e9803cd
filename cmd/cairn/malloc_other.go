//go:build !cgo || !linux

package main

// setMallocArenas does nothing: without cgo the index allocates in the Go heap.
func setMallocArenas(n int) bool { return false }
