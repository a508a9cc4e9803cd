package store

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// flipIndexBytes flips bytes in the middle of the data blocks of every .sst of the index
// in dir (the footer and index blocks at the end are left alone), as the testers did.
func flipIndexBytes(t *testing.T, dir string) int {
	t.Helper()
	ssts, _ := filepath.Glob(filepath.Join(dir, "index", "*.sst"))
	for _, p := range ssts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, at := range []int{len(b) / 8, len(b) / 4, len(b) / 3} {
			b[at] ^= 0xff
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return len(ssts)
}

// TestDamagedIndex is the reported flapping node: a byte flipped in an index .sst made
// the first read of the bad block end the process (pebble's fatal logger). Now such reads
// fail with a Corrupt error (the gateway reads another replica), the others still work,
// and the store reports itself damaged (and its bucket usage incomplete).
func TestDamagedIndex(t *testing.T) {
	cfg := testConfig(t)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	keys := 3000
	for i := 0; i < keys; i++ {
		put(t, s, "b", "key-"+strings.Repeat("x", i%7)+itoa(i), randBytes(uint64(i), 300))
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if n := flipIndexBytes(t, cfg.Dir); n == 0 {
		t.Fatal("no .sst after a flush")
	}
	s = openStore(t, cfg)
	corrupt, ok := 0, 0
	for i := 0; i < keys; i++ {
		r, err := s.OpenObject("b", "key-"+strings.Repeat("x", i%7)+itoa(i))
		if err == nil {
			r.Close()
		}
		switch {
		case err == nil:
			ok++
		case errors.Is(errors.Corrupt, err):
			corrupt++
		default:
			t.Fatalf("read of a damaged index: %v (kind %v), want Corrupt", err, errors.KindOf(err))
		}
	}
	if corrupt == 0 {
		t.Fatal("no read hit the flipped bytes")
	}
	files, reads := s.Damaged()
	if len(files) == 0 || reads == 0 {
		t.Fatalf("Damaged() = %v, %d after %d corrupt reads", files, reads, corrupt)
	}
	waitCounted(t, s) // the count at open runs into the damage
	if s.UsageComplete() {
		t.Fatal("the buckets' usage counted at open claims to be complete over a damaged index")
	}
	t.Logf("%d reads ok, %d refused as corrupt; damaged: %v", ok, corrupt, files)
}

func itoa(i int) string { return strconv.Itoa(i) }
