package main

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestInOrder: results come in order whatever order the workers finish in, at most
// 2*workers ahead, and the first error stops it.
func TestInOrder(t *testing.T) {
	var ahead, maxAhead atomic.Int64
	var got []int
	err := inOrder(100, 4, func(k int) (int, error) {
		if a := ahead.Add(1); a > maxAhead.Load() {
			maxAhead.Store(a)
		}
		return k * k, nil
	}, func(k, v int) error {
		ahead.Add(-1)
		if v != k*k {
			t.Fatalf("use(%d, %d)", k, v)
		}
		got = append(got, k)
		return nil
	})
	if err != nil || len(got) != 100 || maxAhead.Load() > 9 {
		t.Fatalf("err %v, %d results, %d ahead", err, len(got), maxAhead.Load())
	}
	boom := errors.New("boom")
	n := 0
	err = inOrder(1000, 4, func(k int) (int, error) {
		if k == 10 {
			return 0, boom
		}
		return k, nil
	}, func(k, v int) error { n++; return nil })
	if err != boom || n != 10 {
		t.Fatalf("an error at 10: %v after %d", err, n)
	}
}

// TestInOrderMemory: inOrder's memory does not grow with n. It made a channel per k up
// front: 26 million of them (gigabytes) to export a thin 100 TiB volume.
func TestInOrderMemory(t *testing.T) {
	allocs := testing.AllocsPerRun(2, func() {
		if err := inOrder(100000, 4, func(k int) (int, error) { return k, nil }, func(k, v int) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1000 {
		t.Fatalf("%.0f allocations for 100000 items", allocs)
	}
}
