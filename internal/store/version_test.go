package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Replica writes carry HLC versions: the newest wins whatever the arrival order, and a
// delete leaves a tombstone that an older write arriving late cannot overturn.
func TestVersionsNewestWins(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	putV := func(key string, v uint64, data []byte) *object.Object {
		t.Helper()
		o, err := s.PutObject(ctx, "b", key, &object.Object{}, bytes.NewReader(data), int64(len(data)), object.PutOptions{Version: v})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	small, big := []byte("small body"), randBytes(7, 200<<10)
	for _, tc := range []struct {
		name string
		data []byte
	}{{"inline", small}, {"chunked", big}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k-" + tc.name
			putV(key, 100, tc.data)
			if o := putV(key, 50, []byte("older")); o.HLC != 100 {
				t.Fatalf("older write replaced the newer one: stored HLC %d", o.HLC)
			}
			if got := readAll(t, s, "b", key); !bytes.Equal(got, tc.data) {
				t.Fatal("body changed by an older write")
			}
			// An older delete does nothing.
			if o, err := s.DeleteVersion("b", key, 90, 0); err != nil || o.Deleted || o.HLC != 100 {
				t.Fatalf("older delete: %+v %v", o, err)
			}
			// A newer delete leaves a tombstone.
			if o, err := s.DeleteVersion("b", key, 200, 0); err != nil || !o.Deleted {
				t.Fatalf("newer delete: %+v %v", o, err)
			}
			if _, err := s.StatObject("b", key); !errors.Is(errors.NotExist, err) {
				t.Fatalf("stat after delete: %v", err)
			}
			if _, err := s.OpenObject("b", key); !errors.Is(errors.NotExist, err) {
				t.Fatalf("open after delete: %v", err)
			}
			if o, err := s.StatVersion("b", key); err != nil || !o.Deleted || o.HLC != 200 {
				t.Fatalf("raw stat after delete: %+v %v", o, err)
			}
			// A write older than the tombstone stays deleted; a newer one revives the key.
			putV(key, 150, []byte("late"))
			if _, err := s.StatObject("b", key); !errors.Is(errors.NotExist, err) {
				t.Fatalf("late write overturned the delete: %v", err)
			}
			putV(key, 300, tc.data)
			if got := readAll(t, s, "b", key); !bytes.Equal(got, tc.data) {
				t.Fatal("newer write after delete not readable")
			}
		})
	}
	// Conditional create treats a tombstone as absent.
	if _, err := s.DeleteVersion("b", "cond", 10, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutObject(ctx, "b", "cond", &object.Object{}, bytes.NewReader(small), int64(len(small)), object.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("If-None-Match over a tombstone: %v", err)
	}
}

func TestTombstonesHiddenFromListingAndBucketDelete(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "dir/x", "dir/y", "gone/z", "z"} {
		put(t, s, "b", k, []byte(k))
	}
	for _, k := range []string{"a", "dir/y", "gone/z"} {
		if _, err := s.DeleteVersion("b", k, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.List("b", object.ListOptions{Delimiter: "/", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.Objects {
		got = append(got, e.Key)
	}
	got = append(got, res.CommonPrefixes...)
	if want := "[z dir/]"; fmtList(got) != want {
		t.Fatalf("listing = %v, want %s (no tombstones, no prefix of only tombstones)", got, want)
	}
	raw, err := s.List("b", object.ListOptions{Max: 10, Tombstones: true})
	if err != nil {
		t.Fatal(err)
	}
	dead := 0
	for _, e := range raw.Objects {
		if e.Object.Deleted {
			dead++
		}
	}
	if len(raw.Objects) != 5 || dead != 3 {
		t.Fatalf("raw listing: %d entries, %d tombstones; want 5 and 3", len(raw.Objects), dead)
	}
	for _, k := range []string{"dir/x", "z"} {
		if _, err := s.DeleteVersion("b", k, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteBucket("b"); err != nil {
		t.Fatalf("bucket with only tombstones must be deletable: %v", err)
	}
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	if raw, _ := s.List("b", object.ListOptions{Max: 10, Tombstones: true}); len(raw.Objects) != 0 {
		t.Fatalf("recreated bucket shows %d old tombstones", len(raw.Objects))
	}
}

func fmtList(l []string) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, s := range l {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	b.WriteByte(']')
	return b.String()
}

// Replicas create an upload under the id the gateway chose, and completing it with an
// older version than the stored record leaves the newer record.
func TestUploadWithIDAndVersion(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	id := NewUploadID()
	for i := 0; i < 2; i++ { // idempotent
		if err := s.CreateUploadID("b", "k", id, &object.Object{ContentType: "text/plain"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateUploadID("b", "k", "not-an-id", &object.Object{}); !errors.Is(errors.Invalid, err) {
		t.Fatalf("malformed id: %v", err)
	}
	data := randBytes(3, 100<<10)
	p, err := s.PutPart(context.Background(), "b", "k", id, 1, bytes.NewReader(data), int64(len(data)), func(o *object.Object) error { o.ETag = md5hex(data); return nil })
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, "b", "k", []byte("newer")) // store clock: newer than version 5 below
	o, err := s.CompleteUploadVersion("b", "k", id, []object.CompletePart{{Number: 1, ETag: p.ETag}}, 0, 5, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.Size != 5 {
		t.Fatalf("older completion replaced the newer object (size %d)", o.Size)
	}
	if _, _, err := s.ListParts("b", "k", id, 0, 10); !errors.Is(errors.NotExist, err) {
		t.Fatalf("upload must be consumed: %v", err)
	}
}

func md5hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// A repair write replaces a record of the same version (a damaged copy); an ordinary
// write of the same version does not.
func TestRepairSameVersion(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, second := randBytes(1, 300<<10), randBytes(2, 300<<10)
	if _, err := s.PutObject(ctx, "b", "k", &object.Object{}, bytes.NewReader(first), int64(len(first)), object.PutOptions{Version: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutObject(ctx, "b", "k", &object.Object{}, bytes.NewReader(second), int64(len(second)), object.PutOptions{Version: 7}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s, "b", "k"), first) {
		t.Fatal("a write of the same version replaced the record")
	}
	if _, err := s.PutObject(ctx, "b", "k", &object.Object{}, bytes.NewReader(second), int64(len(second)), object.PutOptions{Version: 7, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s, "b", "k"), second) {
		t.Fatal("a repair of the same version did not replace the record")
	}
	if _, err := s.PutObject(ctx, "b", "k", &object.Object{}, bytes.NewReader(first), int64(len(first)), object.PutOptions{Version: 6, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s, "b", "k"), second) {
		t.Fatal("a repair with an older version replaced the record")
	}
}

// Forget removes a record only at the version given, leaves no tombstone, and frees the
// body's space for compaction.
func TestForget(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	body := randBytes(3, 300<<10)
	if _, err := s.PutObject(ctx, "b", "k", &object.Object{}, bytes.NewReader(body), int64(len(body)), object.PutOptions{Version: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteVersion("b", "gone", 12, 0); err != nil {
		t.Fatal(err)
	}
	live := s.Stats().LiveBytes
	for _, tc := range []struct {
		key     string
		version uint64
		removed bool
	}{
		{"k", 9, false},  // older than stored: a newer write arrived meanwhile
		{"k", 11, false}, // newer than stored
		{"missing", 1, false},
		{"k", 10, true},
		{"k", 10, false},   // already gone
		{"gone", 12, true}, // tombstones too
	} {
		got, err := s.Forget("b", tc.key, tc.version)
		if err != nil || got != tc.removed {
			t.Fatalf("Forget(%s, %d) = %v, %v; want %v", tc.key, tc.version, got, err, tc.removed)
		}
	}
	for _, k := range []string{"k", "gone"} {
		if o, err := s.StatVersion("b", k); !errors.Is(errors.NotExist, err) {
			t.Fatalf("%s after Forget: %+v, %v; want no record at all", k, o, err)
		}
	}
	if after := s.Stats().LiveBytes; after >= live {
		t.Fatalf("live bytes %d after Forget, %d before: body not released", after, live)
	}
	n := 0
	s.Scan(nil, func(object.VersionEntry) error { n++; return nil })
	if n != 0 {
		t.Fatalf("Scan sees %d records after Forget", n)
	}
}

// ForgetMeta keeps a record whose tags changed after the MetaHLC the new holders
// confirmed (hand-off), and removes it otherwise; UpdateMeta changes only the version it
// names, keeping the body.
func TestUpdateAndForgetMeta(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	body := randBytes(3, 200<<10) // chunked
	if _, err := s.PutObject(context.Background(), "b", "k", &object.Object{}, bytes.NewReader(body), int64(len(body)), object.PutOptions{Version: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateMeta(object.MetaUpdate{Bucket: "b", Key: "k", Version: 10}); !errors.Is(errors.Invalid, err) {
		t.Fatalf("update without a MetaHLC: %v", err)
	}
	o, err := s.UpdateMeta(object.MetaUpdate{Bucket: "b", Key: "k", Version: 10, MetaHLC: 20, Tags: [][2]string{{"a", "b"}}})
	if err != nil || o.MetaHLC != 20 {
		t.Fatalf("update: %+v, %v", o, err)
	}
	if got := readAll(t, s, "b", "k"); !bytes.Equal(got, body) {
		t.Fatal("body changed by a metadata update")
	}
	if gone, err := s.ForgetMeta("b", "k", 10, 15); err != nil || gone {
		t.Fatalf("ForgetMeta before the change: %v, %v; want kept", gone, err)
	}
	if gone, err := s.ForgetMeta("b", "k", 10, 20); err != nil || !gone {
		t.Fatalf("ForgetMeta of the confirmed change: %v, %v; want removed", gone, err)
	}
}

// The record of a striped (erasure-coded) object keeps the object's size and layout and
// has no body; it round-trips through the index, and a reader serves no bytes from it.
func TestStripedRecord(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	meta := &object.Object{Size: 9 << 20, ETag: "e", StorageClass: "EC42", Striped: true, Stripe: object.Stripe{K: 4, M: 2, Size: 4 << 20}}
	if _, err := s.PutObject(ctx, "b", "k", meta, bytes.NewReader(nil), 0, object.PutOptions{Version: 5}); err != nil {
		t.Fatal(err)
	}
	o, err := s.StatObject("b", "k")
	if err != nil || !o.Striped || o.Size != 9<<20 || o.Stripe.K != 4 || o.Stripe.Size != 4<<20 || o.ETag != "e" || o.BodySize() != 0 {
		t.Fatalf("stat: %+v %v", o, err)
	}
	rd, err := s.OpenObject("b", "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if _, err := rd.WriteRange(ctx, io.Discard, 0, 1); !errors.Is(errors.Invalid, err) {
		t.Fatalf("reading bytes of a striped record: %v", err)
	}
	for _, bad := range []*object.Object{
		{Size: 1, Striped: true, Stripe: object.Stripe{K: 0, M: 2, Size: 4}},
		{Size: 1, Striped: true, Stripe: object.Stripe{K: 4, M: 2, Size: 0}},
	} {
		if _, err := s.PutObject(ctx, "b", "bad", bad, bytes.NewReader(nil), 0, object.PutOptions{}); err == nil {
			t.Fatalf("accepted a striped record with layout %+v", bad.Stripe)
		}
	}
	if _, err := s.PutObject(ctx, "b", "bad", meta, bytes.NewReader([]byte("x")), 1, object.PutOptions{}); err == nil {
		t.Fatal("accepted a striped record with a body")
	}
}
