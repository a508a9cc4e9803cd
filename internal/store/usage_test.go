package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/object"
)

// TestUsage: every way a current record changes (put, overwrite, tombstone, delete,
// forget, a completed upload, an older version that loses, a tag change) moves the
// bucket's counters by what it did, internal buckets are not counted, and a reopened
// store counts the same from its index.
func TestUsage(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	ctx := context.Background()
	for _, b := range []string{"a", "b", ".shards"} {
		if err := s.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]Usage{}
	check := func(step string) {
		t.Helper()
		got := s.Usage()
		for b, w := range want {
			if got[b] != w {
				t.Fatalf("%s: bucket %s: %+v, want %+v (all: %v)", step, b, got[b], w, got)
			}
		}
		for b, g := range got {
			if _, ok := want[b]; !ok && g != (Usage{}) {
				t.Fatalf("%s: bucket %s counted %+v, want nothing", step, b, g)
			}
		}
	}
	put(t, s, "a", "small", make([]byte, 100))
	put(t, s, "a", "big", randBytes(1, 200<<10)) // chunked
	put(t, s, ".shards", "x", make([]byte, 10))
	want["a"] = Usage{Objects: 2, Bytes: 100 + 200<<10}
	check("puts")
	put(t, s, "a", "small", make([]byte, 7)) // overwrite
	want["a"] = Usage{Objects: 2, Bytes: 7 + 200<<10}
	check("overwrite")
	if _, err := s.DeleteVersion("a", "small", 0, 0); err != nil { // tombstone
		t.Fatal(err)
	}
	want["a"] = Usage{Objects: 1, Bytes: 200 << 10}
	check("tombstone")
	if _, err := s.DeleteVersion("a", "small", 0, 0); err != nil { // tombstone over tombstone
		t.Fatal(err)
	}
	check("second tombstone")
	o := put(t, s, "b", "k", make([]byte, 50))
	if _, err := s.PutObject(ctx, "b", "k", &object.Object{}, bytes.NewReader(make([]byte, 9)), 9, object.PutOptions{Version: o.HLC - 1}); err != nil {
		t.Fatal(err) // older: the stored record stays
	}
	if _, err := s.UpdateMeta(object.MetaUpdate{Bucket: "b", Key: "k", Version: o.HLC, MetaHLC: o.HLC + 1, Tags: [][2]string{{"t", "v"}}}); err != nil {
		t.Fatal(err)
	}
	want["b"] = Usage{Objects: 1, Bytes: 50}
	check("older version and tag change")
	if ok, err := s.Forget("b", "k", o.HLC); err != nil || !ok {
		t.Fatalf("forget: %v %v", ok, err)
	}
	want["b"] = Usage{}
	check("forget")
	if err := s.DeleteObject("a", "big"); err != nil {
		t.Fatal(err)
	}
	want["a"] = Usage{}
	check("delete")

	id, err := s.CreateUpload("b", "mp", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	var parts []object.CompletePart
	for n := 1; n <= 2; n++ {
		data := randBytes(uint64(n), 150<<10)
		sum := md5.Sum(data)
		etag := hex.EncodeToString(sum[:])
		if _, err := s.PutPart(ctx, "b", "mp", id, n, bytes.NewReader(data), int64(len(data)), func(o *object.Object) error { o.ETag = etag; return nil }); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, object.CompletePart{Number: n, ETag: etag})
	}
	check("parts uploaded") // an upload in progress is not counted
	if _, err := s.CompleteUpload("b", "mp", id, parts, 100<<10, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteUpload("b", "mp", id, parts, 100<<10, nil); err != nil { // a retry
		t.Fatal(err)
	}
	put(t, s, "a", "again", make([]byte, 3000))
	want["b"] = Usage{Objects: 1, Bytes: 300 << 10}
	want["a"] = Usage{Objects: 1, Bytes: 3000}
	check("completed upload")

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	waitCounted(t, s)
	check("reopened")
	if err := s.DeleteObject("a", "again"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBucket("a"); err != nil {
		t.Fatal(err)
	}
	delete(want, "a")
	check("bucket deleted")
}

// waitCounted waits until s has counted its index after opening.
func waitCounted(t testing.TB, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		s.usageMu.Lock()
		done := s.counted
		s.usageMu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the usage count at open did not finish in 30 s")
		}
	}
}

// recount runs the count of the index at open again, from an iterator made now, with
// between(), writes that happen after the iterator was made and before the count runs.
func recount(t testing.TB, s *Store, between func()) {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxObject), UpperBound: prefixEnd([]byte(pfxObject))})
	if err != nil {
		t.Fatal(err)
	}
	vit, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxVersion), UpperBound: prefixEnd([]byte(pfxVersion))})
	if err != nil {
		t.Fatal(err)
	}
	s.usageMu.Lock()
	s.usage, s.counted, s.dropped = map[string]Usage{}, false, map[string]bool{}
	s.usageMu.Unlock()
	between()
	s.countUsage(context.Background(), it, vit)
}

// TestUsageCountedWhileWritten: the count at open sees the index as it was at open, and
// the writes made while it runs are added to it once: puts, deletes, and a bucket
// emptied, deleted and created again.
func TestUsageCountedWhileWritten(t *testing.T) {
	s := openStore(t, testConfig(t))
	waitCounted(t, s)
	s.CreateBucket("a")
	s.CreateBucket("b")
	put(t, s, "a", "1", make([]byte, 10))
	put(t, s, "a", "2", make([]byte, 20))
	put(t, s, "b", "1", make([]byte, 5))
	recount(t, s, func() {
		put(t, s, "a", "3", make([]byte, 30)) // new
		put(t, s, "a", "1", make([]byte, 1))  // overwritten
		s.DeleteObject("b", "1")
		if err := s.DeleteBucket("b"); err != nil {
			t.Fatal(err)
		}
		s.CreateBucket("b")
		put(t, s, "b", "x", make([]byte, 7))
		if s.UsageComplete() {
			t.Fatal("complete before the count ran")
		}
	})
	if got, want := s.Usage(), map[string]Usage{"a": {Objects: 3, Bytes: 51}, "b": {Objects: 1, Bytes: 7}}; !maps.Equal(got, want) || !s.UsageComplete() {
		t.Fatalf("usage %v (complete %v), want %v", got, s.UsageComplete(), want)
	}
}

// TestUsageCountAtOpen measures what counting the buckets costs at open (the index's
// object records read once, in the background): CAIRN_USAGE_OBJECTS objects with
// 100-byte embedded bodies, 20,000 by default.
func TestUsageCountAtOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("long: writes many objects")
	}
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("CAIRN_USAGE_OBJECTS")); err == nil && v > 0 {
		n = v
	}
	cfg := testConfig(t)
	s := openStore(t, cfg)
	s.CreateBucket("b")
	b := s.db.NewBatch()
	for i := 0; i < n; i++ {
		o := object.Object{Size: 100, Inline: true, Embedded: true, Body: make([]byte, 100), HLC: uint64(i + 1)}
		b.Set(objectKey("b", fmt.Sprintf("key/%08d", i)), marshalRecord(&o), nil)
	}
	if err := s.commit(b); err != nil {
		t.Fatal(err)
	}
	s.Close()
	start := time.Now()
	s = openStore(t, cfg)
	opened := time.Since(start)
	waitCounted(t, s)
	took := time.Since(start)
	if u := s.Usage()["b"]; u != (Usage{Objects: int64(n), Bytes: 100 * int64(n)}) || !s.UsageComplete() {
		t.Fatalf("counted %+v, want %d objects", u, n)
	}
	t.Logf("opened in %v; counted %d objects by %v after the open began (%.0f ns per object)", opened, n, took, float64(took.Nanoseconds())/float64(n))
}
