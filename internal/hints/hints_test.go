package hints

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// TestHintsQueue checks the queue's bookkeeping: one entry per (node, bucket, key) holding
// the newest version, counted once, kept across a reopen.
func TestHintsQueue(t *testing.T) {
	dir := t.TempDir()
	h, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.Add("n1", "b", "k", 5))
	must(h.Add("n1", "b", "k", 3)) // older: ignored
	must(h.Add("n1", "b", "k", 7))
	must(h.Add("n2", "b", "k", 1))
	must(h.Add("n1", "b", "k2", 1))
	if h.Len() != 3 {
		t.Fatalf("Len %d, want 3", h.Len())
	}
	es, err := h.Entries(10, func(string) bool { return false })
	if err != nil || len(es) != 3 {
		t.Fatalf("entries: %+v %v", es, err)
	}
	if e := es[0]; e.Node != "n1" || e.Bucket != "b" || e.Key != "k" || e.Version != 7 {
		t.Fatalf("first entry %+v", e)
	}
	// done removes an entry unless a newer version was queued meanwhile.
	must(h.Add("n2", "b", "k", 9))
	h.Done(es[2]) // n2/b/k at version 1: superseded, kept
	h.Done(es[0])
	if h.Len() != 2 {
		t.Fatalf("Len %d after done, want 2", h.Len())
	}
	h.Close()
	h, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Len() != 2 {
		t.Fatalf("Len %d after reopen, want 2", h.Len())
	}
	es, _ = h.Entries(10, func(string) bool { return false })
	if len(es) != 2 || es[1].Node != "n2" || es[1].Version != 9 {
		t.Fatalf("entries after reopen: %+v", es)
	}
}

// TestHintsConcurrentAdd queues the same (node, bucket, key) from many goroutines at once,
// as concurrent failed writes and read repairs of one object do: it is one entry holding
// the newest version, Len must say 1, and 0 once it is delivered. (The race is timing
// dependent: the test tries several rounds.)
func TestHintsConcurrentAdd(t *testing.T) {
	h, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for round := range 30 {
		key := fmt.Sprintf("hot/%d", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if err := h.Add("n3", "b", key, uint64(100+i)); err != nil {
					t.Error(err)
				}
			}()
		}
		close(start)
		wg.Wait()
		es, err := h.Entries(100, func(string) bool { return false })
		if err != nil || len(es) != 1 {
			t.Fatalf("round %d: entries: %+v, %v; want one", round, es, err)
		}
		bad := false
		if es[0].Version != 115 {
			t.Errorf("round %d: the entry asks for version %d; want the newest queued, 115", round, es[0].Version)
			bad = true
		}
		if n := h.Len(); n != 1 {
			t.Errorf("round %d: Len %d for a queue holding 1 entry", round, n)
			bad = true
		}
		h.Done(es[0])
		if es, _ := h.Entries(100, func(string) bool { return false }); len(es) != 0 {
			t.Fatalf("round %d: entries left after done: %+v", round, es)
		}
		if n := h.Len(); n != 0 {
			t.Errorf("round %d: Len %d for an empty queue", round, n)
			bad = true
		}
		if bad {
			return
		}
	}
}

// Below the reserve of free space the queue refuses new entries with a NoSpace error and
// does not touch its database (pebble treats a full disk as fatal); with room again it
// takes them, and what was queued before is intact.
func TestHintsRefuseOnFullDisk(t *testing.T) {
	h, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Add("n1", "b", "before", 1); err != nil {
		t.Fatal(err)
	}
	free := int64(reserve - 1)
	h.free = func() int64 { return free }
	if err := h.Add("n1", "b", "k", 2); !errors.Is(errors.NoSpace, err) {
		t.Fatalf("Add on a full disk: %v, want a NoSpace error", err)
	}
	if h.Len() != 1 {
		t.Fatalf("%d entries after a refused Add, want 1", h.Len())
	}
	free = reserve
	if err := h.Add("n1", "b", "k", 2); err != nil {
		t.Fatalf("Add with room again: %v", err)
	}
	es, err := h.Entries(10, func(string) bool { return false })
	if err != nil || len(es) != 2 {
		t.Fatalf("entries: %v %+v", err, es)
	}
}
