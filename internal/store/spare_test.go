package store

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// With SegmentSpares, a sealed segment wakes compaction: segments emptied by overwrites
// come back as spares without waiting for CompactInterval, new segments reuse them, every
// object reads back, and spares go first when free space falls to the reserve.
func TestSegmentSpares(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 40)
	cfg := testConfig(t)
	cfg.SegmentSpares = 2
	cfg.CompactInterval = time.Hour // only seals wake compaction
	cfg.Reserve = 1 << 20
	cfg.FreeSpace = func() (int64, error) { return free.Load(), nil }
	s := openStore(t, cfg)
	ctx := context.Background()
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	const size = 200 << 10 // chunked (ChunkSize 64 KiB); five fill a 1 MiB segment
	bodies := map[string][]byte{}
	put := func(key string, seed uint64) { putRandom(t, s, bodies, key, seed, size) }
	// Overwrite 5 keys round after round: each round's segment holds only garbage once
	// the next round is written.
	seed := uint64(1)
	for round := range 12 {
		for k := range 5 {
			put(fmt.Sprintf("k%d", k), seed)
			seed++
		}
		if round == 5 {
			// The rounds so far sealed segments full of garbage: compaction emptied them,
			// and rolls reused them.
			proctest.WaitFor(t, 10*time.Second, func() error {
				if n := s.segs.Reused(); n < 2 {
					return fmt.Errorf("%d segments started in spare files", n)
				}
				return nil
			})
		}
	}
	if n := s.segs.Reused(); n < 4 {
		t.Fatalf("%d segments started in spare files after 12 rounds", n)
	}
	for k, want := range bodies {
		if got := readAll(t, s, "b", k); !bytes.Equal(got, want) {
			t.Fatalf("%s differs after writes into reused segment files", k)
		}
	}
	// Deleted, the objects leave only garbage: once sealed, their segments come back
	// as spares, and nothing is written after them.
	for k := range bodies {
		if err := s.DeleteObject("b", k); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.segs.Roll(); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, 10*time.Second, func() error {
		if n, _ := s.segs.Spares(); n == 0 {
			return fmt.Errorf("no spare")
		}
		return nil
	})
	st := s.Stats()
	if st.SpareBytes == 0 || st.FreeBytes != 1<<40+st.SpareBytes {
		t.Fatalf("Stats: %d spare bytes, %d free", st.SpareBytes, st.FreeBytes)
	}
	// Free space at the reserve: the spares are removed before a write is refused.
	free.Store(cfg.Reserve)
	if _, err := s.PutObject(ctx, "b", "full", &object.Object{}, bytes.NewReader(randBytes(99, size)), size, object.PutOptions{}); !errors.Is(errors.NoSpace, err) {
		t.Fatalf("a write at the reserve: %v, want NoSpace", err)
	}
	if n, bytes := s.segs.Spares(); n != 0 {
		t.Fatalf("%d spares (%d bytes) kept with free space at the reserve", n, bytes)
	}
	free.Store(1 << 40)
	// A restart finds the objects whatever files their segments are in.
	bodies = map[string][]byte{}
	for k := range 5 {
		put(fmt.Sprintf("k%d", k), seed)
		seed++
	}
	s.Close()
	s = openStore(t, cfg)
	for k, want := range bodies {
		if got := readAll(t, s, "b", k); !bytes.Equal(got, want) {
			t.Fatalf("%s differs after a reopen", k)
		}
	}
}

// While compaction moves the live records of one segment, the segments that overwrites
// emptied are removed between groups of moves rather than after the whole move, and every
// object reads back.
func TestCompactionReclaimsEmptyDuringMove(t *testing.T) {
	cfg := testConfig(t)
	cfg.CompactInterval = time.Hour // compaction runs only when the test calls it
	s := openStore(t, cfg)
	s.moveGroup = 64 << 10 // one chunk per group: reclaims run between every move
	ctx := context.Background()
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	const size = 200 << 10
	bodies := map[string][]byte{}
	put := func(key string, seed uint64) { putRandom(t, s, bodies, key, seed, size) }
	active := func() uint32 {
		for _, in := range s.segs.Segments() {
			if in.Active {
				return in.ID
			}
		}
		t.Fatal("no active segment")
		return 0
	}
	// A segment of live data, then segments that overwrites and a delete leave empty.
	for k := range 4 {
		put(fmt.Sprintf("live%d", k), uint64(k+1))
	}
	liveSeg := active()
	if err := s.segs.Roll(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		for k := range 4 {
			put(fmt.Sprintf("g%d", k), uint64(100+10*round+k))
		}
		if err := s.segs.Roll(); err != nil {
			t.Fatal(err)
		}
	}
	for k := range 4 {
		if err := s.DeleteObject("b", fmt.Sprintf("g%d", k)); err != nil {
			t.Fatal(err)
		}
		delete(bodies, fmt.Sprintf("g%d", k))
	}
	var empty []uint32
	for _, in := range s.segs.Segments() {
		if !in.Active && in.ID != liveSeg {
			empty = append(empty, in.ID)
		}
	}
	if len(empty) < 3 {
		t.Fatalf("%d sealed segments of garbage, want at least 3", len(empty))
	}
	var liveInfo segment.Info
	for _, in := range s.segs.Segments() {
		if in.ID == liveSeg {
			liveInfo = in
		}
	}
	s.compactMu.Lock()
	err := s.compactSegment(ctx, liveInfo, true)
	s.compactMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	left := map[uint32]bool{}
	for _, in := range s.segs.Segments() {
		left[in.ID] = true
	}
	for _, id := range append(empty, liveSeg) {
		if left[id] {
			t.Errorf("segment %d still present after the compaction of %d", id, liveSeg)
		}
	}
	for k, want := range bodies {
		if got := readAll(t, s, "b", k); !bytes.Equal(got, want) {
			t.Fatalf("%s differs after the compaction", k)
		}
	}
	s.Close()
	s = openStore(t, cfg)
	for k, want := range bodies {
		if got := readAll(t, s, "b", k); !bytes.Equal(got, want) {
			t.Fatalf("%s differs after a reopen", k)
		}
	}
}

// putRandom writes size random bytes of seed to b/key and keeps them in bodies.
func putRandom(t *testing.T, s *Store, bodies map[string][]byte, key string, seed uint64, size int) {
	t.Helper()
	body := randBytes(seed, size)
	if _, err := s.PutObject(context.Background(), "b", key, &object.Object{}, bytes.NewReader(body), int64(size), object.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	bodies[key] = body
}
