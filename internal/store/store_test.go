package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

func testConfig(t testing.TB) Config {
	return Config{
		Dir:         t.TempDir(),
		InlineMax:   1 << 10,
		ChunkSize:   64 << 10,
		SegmentSize: 1 << 20,
		Reserve:     1,
		Logger:      nil,
	}
}

func openStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func readAll(t testing.TB, s *Store, bucket, key string) []byte {
	t.Helper()
	r, err := s.OpenObject(bucket, key)
	if err != nil {
		t.Fatalf("open %s/%s: %v", bucket, key, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := r.WriteRange(context.Background(), &buf, 0, r.Object.Size); err != nil {
		t.Fatalf("read %s/%s: %v", bucket, key, err)
	}
	return buf.Bytes()
}

func put(t testing.TB, s *Store, bucket, key string, data []byte) *object.Object {
	t.Helper()
	o, err := s.PutObject(context.Background(), bucket, key, &object.Object{ContentType: "x/y"}, bytes.NewReader(data), int64(len(data)), object.PutOptions{})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
	return o
}

func TestPutGetSizes(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	sizes := []int{0, 1, cfg.InlineMax - 1, cfg.InlineMax, cfg.InlineMax + 1, cfg.ChunkSize - 1, cfg.ChunkSize, cfg.ChunkSize + 1, 3*cfg.ChunkSize + 17}
	for i, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := randBytes(uint64(i), n)
			key := fmt.Sprintf("k%d", n)
			o := put(t, s, "b", key, data)
			if o.Size != int64(n) || o.Inline != (n <= cfg.InlineMax) {
				t.Fatalf("size %d inline %v", o.Size, o.Inline)
			}
			if got := readAll(t, s, "b", key); !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, differ", len(got))
			}
			// Ranges.
			r, err := s.OpenObject("b", key)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for _, rg := range [][2]int{{0, n}, {n / 3, n / 2}, {n - min(n, 5), min(n, 5)}} {
				var buf bytes.Buffer
				if _, err := r.WriteRange(context.Background(), &buf, int64(rg[0]), int64(rg[1]-min(rg[1], 0))); err != nil && rg[0]+rg[1] <= n {
					t.Fatal(err)
				}
				if rg[0]+rg[1] <= n && !bytes.Equal(buf.Bytes(), data[rg[0]:rg[0]+rg[1]]) {
					t.Fatalf("range %v differs", rg)
				}
			}
		})
	}
}

func TestShortBodyStoresNothing(t *testing.T) {
	s := openStore(t, testConfig(t))
	s.CreateBucket("b")
	data := randBytes(1, 200<<10)
	_, err := s.PutObject(context.Background(), "b", "k", &object.Object{}, bytes.NewReader(data[:100<<10]), int64(len(data)), object.PutOptions{})
	if err == nil {
		t.Fatal("short body accepted")
	}
	if _, err := s.StatObject("b", "k"); !errors.IsErr(err, object.ErrNoSuchKey) {
		t.Fatalf("stat after short body: %v", err)
	}
	vetoed := errors.New("veto")
	_, err = s.PutObject(context.Background(), "b", "k", &object.Object{}, bytes.NewReader(data), int64(len(data)), object.PutOptions{Finish: func(*object.Object) error { return vetoed }})
	if !errors.IsErr(err, vetoed) {
		t.Fatalf("veto: %v", err)
	}
	if _, err := s.StatObject("b", "k"); !errors.IsErr(err, object.ErrNoSuchKey) {
		t.Fatalf("stat after veto: %v", err)
	}
}

func TestOverwriteDeleteCompactReopen(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	s.CreateBucket("b")
	want := map[string][]byte{}
	for round := 0; round < 4; round++ {
		for i := 0; i < 20; i++ {
			key := fmt.Sprintf("obj%02d", i)
			data := randBytes(uint64(round*100+i), 100<<10+i*1000)
			put(t, s, "b", key, data)
			want[key] = data
		}
	}
	for i := 0; i < 20; i += 3 {
		key := fmt.Sprintf("obj%02d", i)
		if err := s.DeleteObject("b", key); err != nil {
			t.Fatal(err)
		}
		delete(want, key)
	}
	before := s.Stats()
	if before.GarbageBytes == 0 {
		t.Fatal("no garbage after overwrites")
	}
	for {
		did, err := s.CompactOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !did {
			break
		}
	}
	after := s.Stats()
	t.Logf("segments %d->%d bytes, garbage %d->%d", before.SegmentBytes, after.SegmentBytes, before.GarbageBytes, after.GarbageBytes)
	if after.SegmentBytes >= before.SegmentBytes {
		t.Fatalf("compaction reclaimed nothing")
	}
	check := func(s *Store) {
		for k, v := range want {
			if got := readAll(t, s, "b", k); !bytes.Equal(got, v) {
				t.Fatalf("%s differs", k)
			}
		}
		res, err := s.List("b", object.ListOptions{Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Objects) != len(want) {
			t.Fatalf("list has %d objects, want %d", len(res.Objects), len(want))
		}
	}
	check(s)
	s.Close()
	s2 := openStore(t, cfg)
	check(s2)
	if st := s2.Stats(); st.LiveBytes != after.LiveBytes {
		t.Fatalf("live bytes after reopen %d, before %d", st.LiveBytes, after.LiveBytes)
	}
}

func TestTornTailDropped(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	s.CreateBucket("b")
	data := randBytes(7, 300<<10)
	put(t, s, "b", "k", data)
	seg := s.segs.Active()
	path := s.segs.Path(seg)
	s.Close()
	// Simulate a crash mid-append: garbage after the last committed record.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte{0xCA}, 5000))
	f.Close()
	st, _ := os.Stat(path)
	s2 := openStore(t, cfg)
	st2, _ := os.Stat(path)
	if st2.Size() != st.Size()-5000 {
		t.Fatalf("tail not dropped: %d -> %d", st.Size(), st2.Size())
	}
	if got := readAll(t, s2, "b", "k"); !bytes.Equal(got, data) {
		t.Fatal("data differs after recovery")
	}
}

func TestBitRotDetected(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	s.CreateBucket("b")
	data := randBytes(9, 200<<10)
	put(t, s, "b", "k", data)
	path := s.segs.Path(s.segs.Active())
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	f.ReadAt(b[:], 70000)
	b[0] ^= 0x10
	f.WriteAt(b[:], 70000)
	f.Close()
	r, err := s.OpenObject("b", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var buf bytes.Buffer
	_, err = r.WriteRange(context.Background(), &buf, 0, r.Object.Size)
	if !errors.Is(errors.Corrupt, err) {
		t.Fatalf("corrupt read gave %v", err)
	}
	// Only whole verified chunks may have been written.
	if buf.Len()%cfg.ChunkSize != 0 || !bytes.Equal(buf.Bytes(), data[:buf.Len()]) {
		t.Fatalf("corrupt bytes served: %d bytes", buf.Len())
	}
}

func TestListDelimiter(t *testing.T) {
	s := openStore(t, testConfig(t))
	s.CreateBucket("b")
	keys := []string{"a", "b/1", "b/2", "c/x/1", "c/y", "d", "e/"}
	for _, k := range keys {
		put(t, s, "b", k, []byte(k))
	}
	var got []string
	after := ""
	for {
		res, err := s.List("b", object.ListOptions{Delimiter: "/", After: after, Max: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Objects {
			got = append(got, o.Key)
		}
		got = append(got, res.CommonPrefixes...)
		if !res.Truncated {
			break
		}
		after = res.Next
	}
	want := fmt.Sprint([]string{"a", "b/", "c/", "d", "e/"})
	// Objects and prefixes interleave per page; compare as a set.
	if len(got) != 5 {
		t.Fatalf("got %v want %s", got, want)
	}
	res, _ := s.List("b", object.ListOptions{Prefix: "c/", Delimiter: "/", Max: 100})
	if len(res.CommonPrefixes) != 1 || res.CommonPrefixes[0] != "c/x/" || len(res.Objects) != 1 || res.Objects[0].Key != "c/y" {
		t.Fatalf("prefix listing %+v", res)
	}
}

func TestMultipart(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	s.CreateBucket("b")
	id, err := s.CreateUpload("b", "big", &object.Object{ContentType: "a/b"})
	if err != nil {
		t.Fatal(err)
	}
	var parts []object.CompletePart
	var all []byte
	md := md5.New()
	for n := 1; n <= 3; n++ {
		data := randBytes(uint64(n), 150<<10)
		sum := md5.Sum(data)
		etag := hex.EncodeToString(sum[:])
		_, err := s.PutPart(context.Background(), "b", "big", id, n, bytes.NewReader(data), int64(len(data)), func(o *object.Object) error { o.ETag = etag; return nil })
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, object.CompletePart{Number: n, ETag: etag})
		all = append(all, data...)
		md.Write(sum[:])
	}
	if _, err := s.CompleteUpload("b", "big", id, []object.CompletePart{parts[1], parts[0]}, 100<<10, nil); !errors.IsErr(err, object.ErrInvalidPartOrder) {
		t.Fatalf("order: %v", err)
	}
	if _, err := s.CompleteUpload("b", "big", id, parts, 200<<10, nil); !errors.IsErr(err, object.ErrEntityTooSmall) {
		t.Fatalf("small: %v", err)
	}
	o, err := s.CompleteUpload("b", "big", id, parts, 100<<10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%x-3", md.Sum(nil)); o.ETag != want {
		t.Fatalf("etag %s want %s", o.ETag, want)
	}
	if got := readAll(t, s, "b", "big"); !bytes.Equal(got, all) {
		t.Fatal("multipart body differs")
	}
	if _, _, err := s.ListParts("b", "big", id, 0, 10); !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Fatalf("upload still there: %v", err)
	}
}

// closingWriter closes the reader on its first Write, as a caller that gives up on a copy
// streaming through a pipe does while the copy is still reading.
type closingWriter struct {
	rd  *Reader
	buf bytes.Buffer
}

func (w *closingWriter) Write(p []byte) (int, error) {
	if w.buf.Len() == 0 {
		w.rd.Close()
	}
	return w.buf.Write(p)
}

// TestCloseDuringWriteRange: a Reader closed while WriteRange runs keeps its snapshot
// until WriteRange returns (it panicked with "pebble: closed" in the read-ahead of the
// next chunk: the soak with --class and 6 MiB objects, a node copying a replica to a
// node whose disk was full), and a WriteRange after Close fails instead of panicking.
func TestCloseDuringWriteRange(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{cfg.InlineMax, 5*cfg.ChunkSize + 17} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := randBytes(uint64(n), n)
			put(t, s, "b", "k", data)
			rd, err := s.OpenObject("b", "k")
			if err != nil {
				t.Fatal(err)
			}
			w := &closingWriter{rd: rd}
			if _, err := rd.WriteRange(context.Background(), w, 0, int64(n)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.buf.Bytes(), data) {
				t.Fatalf("read %d bytes, differ", w.buf.Len())
			}
			s.readers.mu.Lock()
			active := len(s.readers.active)
			s.readers.mu.Unlock()
			if active != 0 {
				t.Fatalf("%d readers still active after the closed reader's WriteRange returned", active)
			}
			if _, err := rd.WriteRange(context.Background(), io.Discard, 0, int64(n)); err == nil {
				t.Fatal("WriteRange after Close succeeded")
			}
			rd.Close() // a second Close is harmless
		})
	}
}

// TestBucketConfig: configurations set, replaced, deleted, kept across a reopen, and gone
// with their bucket (a bucket created again under the name starts with none).
func TestBucketConfig(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg)
	if err := s.SetBucketConfig("nope", "cors", []byte("x")); !errors.Is(errors.NotExist, err) {
		t.Fatalf("config of a missing bucket: %v", err)
	}
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ kind, doc string }{{"cors", "one"}, {"tagging", "t"}, {"cors", "two"}, {"tagging", ""}} {
		if err := s.SetBucketConfig("b", c.kind, []byte(c.doc)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	b, err := s.HeadBucket("b")
	if err != nil || len(b.Config) != 1 || b.Config["cors"] != "two" {
		t.Fatalf("after reopen: %+v %v", b, err)
	}
	if err := s.DeleteBucket("b"); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	if b, err := s.HeadBucket("b"); err != nil || b.Config != nil {
		t.Fatalf("recreated bucket: %+v %v", b, err)
	}
}
