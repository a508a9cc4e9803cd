package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

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
	want["a"] = Usage{2, 100 + 200<<10}
	check("puts")
	put(t, s, "a", "small", make([]byte, 7)) // overwrite
	want["a"] = Usage{2, 7 + 200<<10}
	check("overwrite")
	if _, err := s.DeleteVersion("a", "small", 0, 0); err != nil { // tombstone
		t.Fatal(err)
	}
	want["a"] = Usage{1, 200 << 10}
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
	want["b"] = Usage{1, 50}
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
	want["b"] = Usage{1, 300 << 10}
	want["a"] = Usage{1, 3000}
	check("completed upload")

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
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

// TestUsageCountAtOpen measures what counting the buckets costs at open (the index's
// object records read once): CAIRN_USAGE_OBJECTS objects, 20,000 by default.
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
	s = openStore(t, cfg)
	s.usage = map[string]Usage{}
	start := time.Now()
	if err := s.countUsage(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if u := s.Usage()["b"]; u != (Usage{int64(n), 100 * int64(n)}) {
		t.Fatalf("counted %+v, want %d objects", u, n)
	}
	t.Logf("counted %d objects at open in %v (%.0f ns per object)", n, took, float64(took.Nanoseconds())/float64(n))
}
