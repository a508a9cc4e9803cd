// Package replicatest is the conformance suite of replica.Replica: every implementation
// (the local store, a remote node over the internode protocol) must give the same answers
// and the same error kinds to the same calls.
package replicatest

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
)

// Bucket is the bucket the suite writes to: the replicas given to Run must have it.
const Bucket = "b"

// Run runs the suite. newReplica returns a replica that holds nothing but the empty
// bucket Bucket; every subtest gets a new one.
func Run(t *testing.T, newReplica func(t *testing.T) replica.Replica) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, r replica.Replica)
	}{
		{"PutOpenStat", testPutOpenStat},
		{"Abandoned", testAbandoned},
		{"Versions", testVersions},
		{"RepairAndIfAbsent", testRepairAndIfAbsent},
		{"Ranges", testRanges},
		{"List", testList},
		{"Multipart", testMultipart},
		{"UploadEnd", testUploadEnd},
		{"Errors", testErrors},
		{"DigestsAndScan", testDigestsAndScan},
		{"UpdateMeta", testUpdateMeta},
		{"LateVersion", testLateVersion},
		{"RangeWrites", testRangeWrites},
		{"RangeBatches", testRangeBatches},
		{"PutBatches", testPutBatches},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newReplica(t)) })
	}
}

var ctx = context.Background()

func body(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func etag(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// put writes b as key at version, streaming (final metadata after the body) or not.
func put(t *testing.T, r replica.Replica, key string, version uint64, b []byte, streamed bool) (*object.Object, error) {
	t.Helper()
	meta := &object.Object{ContentType: "application/x-test", UserMeta: [][2]string{{"k", "v"}}, ModTime: 1000 + int64(version)}
	fin := *meta
	fin.Size, fin.ETag = int64(len(b)), etag(b)
	w := replica.Write{Bucket: Bucket, Key: key, Meta: meta, Body: bytes.NewReader(b), Size: int64(len(b)), Version: version}
	if streamed {
		w.Size, w.Final = -1, func() *object.Object { return &fin }
	} else {
		w.FinalNow = &fin
	}
	return r.Put(ctx, w)
}

func read(t *testing.T, r replica.Replica, key string) ([]byte, *object.Object, error) {
	t.Helper()
	rd, err := r.Open(ctx, Bucket, key, replica.OpenOptions{})
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	var buf bytes.Buffer
	o := rd.Info()
	if _, err := rd.WriteRange(ctx, &buf, 0, o.BodySize()); err != nil {
		return nil, nil, err
	}
	return buf.Bytes(), o, nil
}

func mustRead(t *testing.T, r replica.Replica, key string, want []byte) *object.Object {
	t.Helper()
	got, o, err := read(t, r, key)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %s: %d bytes, want %d (content differs)", key, len(got), len(want))
	}
	return o
}

func wantKind(t *testing.T, what string, err error, k errors.Kind) {
	t.Helper()
	if !errors.Is(k, err) {
		t.Fatalf("%s: error %v (kind %v), want kind %v", what, err, errors.KindOf(err), k)
	}
}

func testPutOpenStat(t *testing.T, r replica.Replica) {
	for i, n := range []int{0, 1, 1000, 100 << 10, 3<<20 + 17} {
		for _, streamed := range []bool{false, true} {
			key := fmt.Sprintf("k%d-%v", i, streamed)
			b := body(uint64(i), n)
			o, err := put(t, r, key, uint64(10+i), b, streamed)
			if err != nil {
				t.Fatalf("put %s: %v", key, err)
			}
			if o.HLC != uint64(10+i) || o.Size != int64(n) || o.ETag != etag(b) {
				t.Fatalf("put %s answered %+v", key, o)
			}
			got := mustRead(t, r, key, b)
			st, err := r.Stat(ctx, Bucket, key)
			if err != nil {
				t.Fatalf("stat %s: %v", key, err)
			}
			for _, rec := range []*object.Object{got, st} {
				if rec.HLC != uint64(10+i) || rec.Size != int64(n) || rec.ETag != etag(b) || rec.ContentType != "application/x-test" ||
					!slices.Equal(rec.UserMeta, [][2]string{{"k", "v"}}) || rec.ModTime != 1000+int64(10+i) || rec.Deleted {
					t.Fatalf("record of %s: %+v", key, rec)
				}
			}
			if st.Body != nil {
				t.Fatalf("stat of %s returned a body of %d bytes: a record's Stat has none", key, len(st.Body))
			}
		}
	}
}

// testAbandoned: a write whose coordinator gives no final metadata, or whose body is not
// the size the coordinator confirms, keeps nothing.
func testAbandoned(t *testing.T, r replica.Replica) {
	b := body(1, 200<<10)
	_, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "a", Meta: &object.Object{}, Body: bytes.NewReader(b), Size: -1, Version: 5,
		Final: func() *object.Object { return nil }})
	if err == nil {
		t.Fatal("an abandoned write succeeded")
	}
	fin := &object.Object{Size: int64(len(b)) + 1, ETag: etag(b)}
	if _, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "a", Meta: &object.Object{}, Body: bytes.NewReader(b), Size: int64(len(b)), Version: 5,
		FinalNow: fin}); err == nil {
		t.Fatal("a write whose body is shorter than confirmed succeeded")
	}
	_, err = r.Stat(ctx, Bucket, "a")
	wantKind(t, "stat after abandoned writes", err, errors.NotExist)
}

func testVersions(t *testing.T, r replica.Replica) {
	v10, v5 := body(10, 5000), body(5, 7000)
	if _, err := put(t, r, "k", 10, v10, false); err != nil {
		t.Fatal(err)
	}
	o, err := put(t, r, "k", 5, v5, true)
	if err != nil || o.HLC != 10 {
		t.Fatalf("older write over a newer version: %+v, %v (want the newer record back)", o, err)
	}
	mustRead(t, r, "k", v10)
	d, err := r.Delete(ctx, Bucket, "k", object.Object{HLC: 20, ModTime: 2000})
	if err != nil || !d.Deleted || d.HLC != 20 {
		t.Fatalf("delete: %+v, %v", d, err)
	}
	st, err := r.Stat(ctx, Bucket, "k")
	if err != nil || !st.Deleted || st.HLC != 20 {
		t.Fatalf("stat of a tombstone: %+v, %v", st, err)
	}
	_, _, err = read(t, r, "k")
	wantKind(t, "open of a deleted key", err, errors.NotExist)
	if o, err := put(t, r, "k", 15, v5, false); err != nil || o.HLC != 20 || !o.Deleted {
		t.Fatalf("older write over a newer tombstone: %+v, %v (want the tombstone back)", o, err)
	}
	if _, err := put(t, r, "k", 30, v5, true); err != nil {
		t.Fatal(err)
	}
	mustRead(t, r, "k", v5)
	// An older delete does not remove a newer version.
	if d, err := r.Delete(ctx, Bucket, "k", object.Object{HLC: 25, ModTime: 0}); err != nil || d.HLC != 30 || d.Deleted {
		t.Fatalf("older delete over a newer version: %+v, %v", d, err)
	}
	mustRead(t, r, "k", v5)
	// A delete of a key never written leaves a tombstone.
	if d, err := r.Delete(ctx, Bucket, "never", object.Object{HLC: 40, ModTime: 0}); err != nil || !d.Deleted || d.HLC != 40 {
		t.Fatalf("delete of a missing key: %+v, %v", d, err)
	}
}

func testRepairAndIfAbsent(t *testing.T, r replica.Replica) {
	a, b := body(1, 3000), body(2, 3000)
	if _, err := put(t, r, "k", 7, a, false); err != nil {
		t.Fatal(err)
	}
	// The same version again, without repair: the stored one stays.
	if _, err := put(t, r, "k", 7, b, false); err != nil {
		t.Fatal(err)
	}
	mustRead(t, r, "k", a)
	fin := &object.Object{Size: int64(len(b)), ETag: etag(b)}
	if _, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "k", Meta: &object.Object{}, Body: bytes.NewReader(b), Size: int64(len(b)), Version: 7,
		FinalNow: fin, Repair: true}); err != nil {
		t.Fatalf("repair: %v", err)
	}
	mustRead(t, r, "k", b)
	_, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "k", Meta: &object.Object{}, Body: bytes.NewReader(a), Size: int64(len(a)), Version: 9,
		FinalNow: &object.Object{Size: int64(len(a)), ETag: etag(a)}, IfAbsent: true})
	wantKind(t, "if-absent write over an object", err, errors.Precondition)
	mustRead(t, r, "k", b)
	if _, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "free", Meta: &object.Object{}, Body: bytes.NewReader(a), Size: int64(len(a)), Version: 9,
		FinalNow: &object.Object{Size: int64(len(a)), ETag: etag(a)}, IfAbsent: true}); err != nil {
		t.Fatalf("if-absent write on a free key: %v", err)
	}
}

func testRanges(t *testing.T, r replica.Replica) {
	b := body(3, 1<<20+333)
	if _, err := put(t, r, "k", 3, b, true); err != nil {
		t.Fatal(err)
	}
	for _, rg := range [][2]int64{{0, 1}, {5, 100}, {1 << 19, 1<<19 + 333}, {int64(len(b)) - 1, 1}, {0, int64(len(b))}, {10, 0}} {
		for _, pre := range []bool{false, true} {
			opts := replica.OpenOptions{Version: 3}
			if pre {
				opts.Off, opts.N = rg[0], rg[1]
			}
			rd, err := r.Open(ctx, Bucket, "k", opts)
			if err != nil {
				t.Fatalf("open for %v: %v", rg, err)
			}
			var buf bytes.Buffer
			n, err := rd.WriteRange(ctx, &buf, rg[0], rg[1])
			rd.Close()
			if err != nil || n != rg[1] || !bytes.Equal(buf.Bytes(), b[rg[0]:rg[0]+rg[1]]) {
				t.Fatalf("range %v (opened for it: %v): %d bytes, %v", rg, pre, n, err)
			}
		}
	}
	_, err := r.Open(ctx, Bucket, "k", replica.OpenOptions{Version: 4})
	wantKind(t, "open of another version", err, errors.Precondition)
}

func testList(t *testing.T, r replica.Replica) {
	for i, k := range []string{"a/1", "a/2", "b/1", "c", "d"} {
		if _, err := put(t, r, k, uint64(i+1), body(uint64(i), 10), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Delete(ctx, Bucket, "c", object.Object{HLC: 100, ModTime: 0}); err != nil {
		t.Fatal(err)
	}
	res, err := r.List(ctx, Bucket, object.ListOptions{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.Objects {
		got = append(got, fmt.Sprintf("%s:%d:%v", e.Key, e.Object.HLC, e.Object.Deleted))
	}
	if want := []string{"a/1:1:false", "a/2:2:false", "b/1:3:false", "c:100:true", "d:5:false"}; !slices.Equal(got, want) {
		t.Fatalf("list = %v, want %v (tombstones included)", got, want)
	}
	res, err = r.List(ctx, Bucket, object.ListOptions{Delimiter: "/", Max: 100})
	if err != nil || !slices.Equal(res.CommonPrefixes, []string{"a/", "b/"}) || len(res.Objects) != 2 {
		t.Fatalf("list with a delimiter: %+v, %v", res, err)
	}
	res, err = r.List(ctx, Bucket, object.ListOptions{Prefix: "a/", After: "a/1", Max: 1})
	if err != nil || len(res.Objects) != 1 || res.Objects[0].Key != "a/2" {
		t.Fatalf("list after a/1 under a/: %+v, %v", res, err)
	}
	res, err = r.List(ctx, Bucket, object.ListOptions{Max: 2})
	if err != nil || len(res.Objects) != 2 || !res.Truncated || res.Next != "a/2" {
		t.Fatalf("a page of two: %+v, %v", res, err)
	}
}

// upload makes an upload of key with two parts and returns its id and the parts' bodies.
func upload(t *testing.T, r replica.Replica, key, id string) [][]byte {
	t.Helper()
	if err := r.CreateUpload(ctx, Bucket, key, id, &object.Object{ContentType: "text/x-mp", ModTime: 5}); err != nil {
		t.Fatalf("create upload: %v", err)
	}
	parts := [][]byte{body(7, 300<<10), body(8, 1234)}
	for i, p := range parts {
		fin := &object.Object{Size: int64(len(p)), ETag: etag(p)}
		w := replica.Write{Bucket: Bucket, Key: key, UploadID: id, Part: i + 1, Body: bytes.NewReader(p), Size: int64(len(p)), FinalNow: fin}
		if i == 0 {
			w.FinalNow, w.Size, w.Final = nil, -1, func() *object.Object { return fin }
		}
		o, err := r.Put(ctx, w)
		if err != nil || o.ETag != etag(p) || o.Size != int64(len(p)) {
			t.Fatalf("part %d: %+v, %v", i+1, o, err)
		}
	}
	return parts
}

func testMultipart(t *testing.T, r replica.Replica) {
	id := store.NewUploadID()
	parts := upload(t, r, "mp", id)
	ups, err := r.ListUploads(ctx, Bucket, object.UploadListOptions{Max: 10})
	if err != nil || len(ups.Uploads) != 1 || ups.Uploads[0].UploadID != id || ups.Uploads[0].Key != "mp" {
		t.Fatalf("list uploads: %+v, %v", ups, err)
	}
	page, err := r.Parts(ctx, Bucket, "mp", id, 0, 1)
	if err != nil || page.End != nil || page.Upload == nil || page.Upload.ContentType != "text/x-mp" || len(page.Parts) != 1 || !page.Truncated ||
		page.Parts[0].Number != 1 || page.Parts[0].ETag != etag(parts[0]) {
		t.Fatalf("parts page 1: %+v, %v", page, err)
	}
	page, err = r.Parts(ctx, Bucket, "mp", id, 1, 10)
	if err != nil || len(page.Parts) != 1 || page.Truncated || page.Parts[0].Number != 2 || page.Parts[0].Size != int64(len(parts[1])) {
		t.Fatalf("parts page 2: %+v, %v", page, err)
	}
	list := []object.CompletePart{{Number: 1, ETag: etag(parts[0])}, {Number: 2, ETag: etag(parts[1])}}
	o, err := r.Complete(ctx, replica.Completion{Bucket: Bucket, Key: "mp", UploadID: id, Parts: list, MinPart: 5, Version: 50, ModTime: 77,
		Final: &object.Object{ChecksumAlgo: "CRC32C", Checksum: "AAAAAA==", ChecksumType: "COMPOSITE"}})
	if err != nil || o.HLC != 50 || o.Size != int64(len(parts[0])+len(parts[1])) || !slices.Equal(o.PartSizes, []int64{int64(len(parts[0])), int64(len(parts[1]))}) ||
		o.ChecksumAlgo != "CRC32C" || o.ContentType != "text/x-mp" {
		t.Fatalf("complete: %+v, %v", o, err)
	}
	mustRead(t, r, "mp", append(append([]byte{}, parts[0]...), parts[1]...))
	page, err = r.Parts(ctx, Bucket, "mp", id, 0, 10)
	if err != nil || page.End == nil || page.End.State != object.UploadCompleted || page.End.Result == nil || page.End.Result.HLC != 50 || len(page.Parts) != 0 {
		t.Fatalf("parts of a completed upload: %+v, %v", page, err)
	}
	ups, err = r.ListUploads(ctx, Bucket, object.UploadListOptions{Max: 10})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("uploads after completion: %+v, %v", ups, err)
	}
	// A part for the ended upload is refused.
	p := body(9, 10)
	_, err = r.Put(ctx, replica.Write{Bucket: Bucket, Key: "mp", UploadID: id, Part: 3, Body: bytes.NewReader(p), Size: 10, FinalNow: &object.Object{Size: 10, ETag: etag(p)}})
	wantKind(t, "part of a completed upload", err, errors.NotExist)
	if !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Fatalf("part of a completed upload: %v, want NoSuchUpload", err)
	}
}

func testUploadEnd(t *testing.T, r replica.Replica) {
	id := store.NewUploadID()
	upload(t, r, "ab", id)
	e := &object.UploadEnd{Bucket: Bucket, Key: "ab", UploadID: id, State: object.UploadAborted, Ended: 99}
	if err := r.EndUpload(ctx, e); err != nil {
		t.Fatalf("end upload: %v", err)
	}
	page, err := r.Parts(ctx, Bucket, "ab", id, 0, 10)
	if err != nil || page.End == nil || page.End.State != object.UploadAborted || page.End.Ended != 99 {
		t.Fatalf("parts of an aborted upload: %+v, %v", page, err)
	}
	// An end record for an upload this holder never saw is kept as well.
	other := store.NewUploadID()
	if err := r.EndUpload(ctx, &object.UploadEnd{Bucket: Bucket, Key: "ab", UploadID: other, State: object.UploadAborted, Ended: 1}); err != nil {
		t.Fatalf("end of an unknown upload: %v", err)
	}
	if page, err := r.Parts(ctx, Bucket, "ab", other, 0, 10); err != nil || page.End == nil {
		t.Fatalf("parts of an unknown ended upload: %+v, %v", page, err)
	}
	_, err = r.Parts(ctx, Bucket, "ab", store.NewUploadID(), 0, 10)
	wantKind(t, "parts of an unknown upload", err, errors.NotExist)
}

func testErrors(t *testing.T, r replica.Replica) {
	_, err := r.Stat(ctx, Bucket, "missing")
	wantKind(t, "stat of a missing key", err, errors.NotExist)
	_, _, err = read(t, r, "missing")
	wantKind(t, "open of a missing key", err, errors.NotExist)
	if !errors.IsErr(err, object.ErrNoSuchKey) {
		t.Fatalf("open of a missing key: %v, want NoSuchKey", err)
	}
	_, err = r.Stat(ctx, "nobucket", "k")
	wantKind(t, "stat in a missing bucket", err, errors.NotExist)
	if !errors.IsErr(err, object.ErrNoSuchBucket) {
		t.Fatalf("stat in a missing bucket: %v, want NoSuchBucket", err)
	}
	_, err = r.List(ctx, "nobucket", object.ListOptions{Max: 10})
	wantKind(t, "list of a missing bucket", err, errors.NotExist)
	b := body(1, 10)
	_, err = r.Put(ctx, replica.Write{Bucket: "nobucket", Key: "k", Meta: &object.Object{}, Body: bytes.NewReader(b), Size: 10, Version: 1,
		FinalNow: &object.Object{Size: 10, ETag: etag(b)}})
	wantKind(t, "put in a missing bucket", err, errors.NotExist)
}

func testDigestsAndScan(t *testing.T, r replica.Replica) {
	const P = 16
	all := make([]int, P)
	for i := range all {
		all[i] = i
	}
	empty, err := r.Digests(ctx, P, all)
	if err != nil || len(empty) != P || slices.ContainsFunc(empty, func(d uint64) bool { return d != 0 }) {
		t.Fatalf("digests of an empty holder: %v, %v", empty, err)
	}
	for i := range 20 {
		if _, err := put(t, r, fmt.Sprintf("k%02d", i), uint64(i+1), body(uint64(i), 10), false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Delete(ctx, Bucket, "k03", object.Object{HLC: 100, ModTime: 0}); err != nil {
		t.Fatal(err)
	}
	before, err := r.Digests(ctx, P, all)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]uint64{}
	var deleted []string
	if err := r.Scan(ctx, P, all, func(e object.VersionEntry) {
		seen[e.Key] = e.HLC
		if e.Deleted {
			deleted = append(deleted, e.Key)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 20 || seen["k03"] != 100 || !slices.Equal(deleted, []string{"k03"}) {
		t.Fatalf("scan: %v, deleted %v", seen, deleted)
	}
	// A subset of partitions, in another order.
	some := []int{5, 1}
	sub, err := r.Digests(ctx, P, some)
	if err != nil || sub[0] != before[5] || sub[1] != before[1] {
		t.Fatalf("digests of partitions %v: %v, all: %v, %v", some, sub, before, err)
	}
	if _, err := put(t, r, "k00", 500, body(0, 10), false); err != nil {
		t.Fatal(err)
	}
	after, err := r.Digests(ctx, P, all)
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for i := range after {
		if after[i] != before[i] {
			changed++
		}
	}
	if changed != 1 {
		t.Fatalf("one new version changed %d partition digests", changed)
	}
}

// testUpdateMeta: a conditional in-place change of a version's tags applies only to that
// version, only when newer than the record's last change, keeps the body, ETag and
// modification time, is carried by copies of the record (Put of the same version with a
// later MetaHLC, a repair), shows in Scan and changes the digest.
func testUpdateMeta(t *testing.T, r replica.Replica) {
	const P = 8
	all := make([]int, P)
	for i := range all {
		all[i] = i
	}
	b := body(9, 5000)
	o, err := put(t, r, "k", 10, b, false)
	if err != nil {
		t.Fatal(err)
	}
	before, err := r.Digests(ctx, P, all)
	if err != nil {
		t.Fatal(err)
	}
	tags := [][2]string{{"a", "1"}, {"b", ""}}
	u := object.MetaUpdate{Bucket: Bucket, Key: "k", Version: 10, MetaHLC: 20, Tags: tags}
	rec, err := r.UpdateMeta(ctx, u)
	if err != nil || replica.UpdateOutcome(u, rec) != replica.MetaApplied || !slices.Equal(rec.Tags, tags) || rec.MetaHLC != 20 {
		t.Fatalf("update: %+v, %v", rec, err)
	}
	got := mustRead(t, r, "k", b)
	if got.HLC != 10 || got.MetaHLC != 20 || !slices.Equal(got.Tags, tags) || got.ETag != o.ETag || got.ModTime != o.ModTime ||
		got.ContentType != "application/x-test" || !slices.Equal(got.UserMeta, [][2]string{{"k", "v"}}) {
		t.Fatalf("record after update: %+v", got)
	}
	// An older change, or a retry of this one, changes nothing.
	old := object.MetaUpdate{Bucket: Bucket, Key: "k", Version: 10, MetaHLC: 15, Tags: [][2]string{{"old", "x"}}}
	if rec, err := r.UpdateMeta(ctx, old); err != nil || rec.MetaHLC != 20 || !slices.Equal(rec.Tags, tags) || replica.UpdateOutcome(old, rec) != replica.MetaApplied {
		t.Fatalf("older update: %+v, %v", rec, err)
	}
	// Another version: nothing changes, the record says why.
	other := object.MetaUpdate{Bucket: Bucket, Key: "k", Version: 9, MetaHLC: 30, Tags: nil}
	if rec, err := r.UpdateMeta(ctx, other); err != nil || rec.HLC != 10 || rec.MetaHLC != 20 || replica.UpdateOutcome(other, rec) != replica.MetaSuperseded {
		t.Fatalf("update of an older version: %+v, %v", rec, err)
	}
	missed := object.MetaUpdate{Bucket: Bucket, Key: "k", Version: 11, MetaHLC: 30}
	if rec, err := r.UpdateMeta(ctx, missed); err != nil || rec.HLC != 10 || replica.UpdateOutcome(missed, rec) != replica.MetaMissing {
		t.Fatalf("update of a version not held: %+v, %v", rec, err)
	}
	_, err = r.UpdateMeta(ctx, object.MetaUpdate{Bucket: Bucket, Key: "none", Version: 1, MetaHLC: 2})
	wantKind(t, "update of a key without a record", err, errors.NotExist)
	// Scan and digests see the change.
	var seen object.VersionEntry
	if err := r.Scan(ctx, P, all, func(e object.VersionEntry) { seen = e }); err != nil || seen.HLC != 10 || seen.MetaHLC != 20 {
		t.Fatalf("scan after update: %+v, %v", seen, err)
	}
	after, err := r.Digests(ctx, P, all)
	if err != nil || slices.Equal(before, after) {
		t.Fatalf("digests unchanged by an update: %v, %v", after, err)
	}
	// A copy of the same version with a later change takes the change and keeps the body.
	later := [][2]string{{"c", "3"}}
	meta := &object.Object{ContentType: "application/x-test", ModTime: 5, Tags: later, MetaHLC: 40}
	fin := &object.Object{Size: int64(len(b)), ETag: etag(b)}
	if rec, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "k", Meta: meta, Body: bytes.NewReader(b), Size: int64(len(b)), Version: 10, FinalNow: fin}); err != nil ||
		rec.MetaHLC != 40 || !slices.Equal(rec.Tags, later) {
		t.Fatalf("copy with a later change: %+v, %v", rec, err)
	}
	// A repair of the version with an older change keeps the later one held here.
	c := body(10, 5000)
	if _, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "k", Meta: &object.Object{Tags: tags, MetaHLC: 20}, Body: bytes.NewReader(c), Size: int64(len(c)), Version: 10,
		FinalNow: &object.Object{Size: int64(len(c)), ETag: etag(c)}, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, r, "k", c); got.MetaHLC != 40 || !slices.Equal(got.Tags, later) {
		t.Fatalf("repair lost a later change: %+v", got)
	}
	// A new version has its own tags (none here): the change was to the old version.
	if _, err := put(t, r, "k", 50, b, false); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, r, "k", b); got.MetaHLC != 0 || len(got.Tags) != 0 {
		t.Fatalf("new version inherited tags: %+v", got)
	}
	// A tombstone is superseding.
	if _, err := r.Delete(ctx, Bucket, "k", object.Object{HLC: 60, ModTime: 0}); err != nil {
		t.Fatal(err)
	}
	dead := object.MetaUpdate{Bucket: Bucket, Key: "k", Version: 50, MetaHLC: 70}
	if rec, err := r.UpdateMeta(ctx, dead); err != nil || !rec.Deleted || replica.UpdateOutcome(dead, rec) != replica.MetaSuperseded {
		t.Fatalf("update of a deleted key: %+v, %v", rec, err)
	}
}

// testRangeWrites: in-place writes of a mutable object (inline, chunked, a hole) read back
// whole and by range; a write at the wrong order is a Precondition error and changes
// nothing; a newer whole copy replaces the object and writes continue from its order.
func testRangeWrites(t *testing.T, r replica.Replica) {
	rw, ok := r.(replica.RangeWriter)
	if !ok {
		t.Fatalf("%T takes no range writes", r)
	}
	const size = 1 << 20
	model := make([]byte, size)
	order := uint64(0)
	for i, w := range []object.RangeWrite{
		{Off: 100, Data: body(1, 500)},
		{Off: 4096, Data: body(2, 300<<10)},
		{Off: 50000, Len: 100000},
		{Off: size - 10, Data: body(3, 10)},
	} {
		w.Bucket, w.Key, w.Size, w.Prev, w.Next = Bucket, "vol", size, order, order+1
		o, err := rw.WriteRange(ctx, w)
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if !o.Mutable || o.HLC != order+1 || o.Size != size {
			t.Fatalf("write %d: record %+v", i, o)
		}
		order++
		if w.Data != nil {
			copy(model[w.Off:], w.Data)
		} else {
			clear(model[w.Off : w.Off+w.Len])
		}
	}
	if got := readRange(t, r, "vol", 0, -1); !bytes.Equal(got, model) {
		t.Fatal("the object differs from its writes")
	}
	if got := readRange(t, r, "vol", 4000, 10000); !bytes.Equal(got, model[4000:14000]) {
		t.Fatal("a range of the object differs")
	}
	_, err := rw.WriteRange(ctx, object.RangeWrite{Bucket: Bucket, Key: "vol", Size: size, Data: []byte("x"), Prev: order + 3, Next: order + 4})
	if !errors.Is(errors.Precondition, err) {
		t.Fatalf("a write after a missed one: %v", err)
	}
	if o, err := r.Stat(ctx, Bucket, "vol"); err != nil || o.HLC != order {
		t.Fatalf("stat after a refused write: %+v %v", o, err)
	}
	next := body(4, size)
	if _, err := r.Put(ctx, replica.Write{Bucket: Bucket, Key: "vol", Meta: &object.Object{Mutable: true}, Body: bytes.NewReader(next), Size: size,
		Version: order + 5, FinalNow: &object.Object{Size: size, Mutable: true}, Repair: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := rw.WriteRange(ctx, object.RangeWrite{Bucket: Bucket, Key: "vol", Size: size, Off: 0, Data: []byte("q"), Prev: order + 5, Next: order + 6}); err != nil {
		t.Fatal(err)
	}
	next[0] = 'q'
	if got := readRange(t, r, "vol", 0, -1); !bytes.Equal(got, next) {
		t.Fatal("the object differs after a whole copy and a write")
	}
}

// testRangeBatches: a batch of range writes (inline, large, a hole, unsynced, two of one
// key in order, one at the wrong order) applies each as it would alone and answers each
// one's outcome: the write at the wrong order is a Precondition error and changes
// nothing, the others read back.
func testRangeBatches(t *testing.T, r replica.Replica) {
	rb, ok := r.(replica.RangeBatcher)
	if !ok {
		t.Fatalf("%T takes no range batches", r)
	}
	const size = 1 << 20
	models := map[string][]byte{"v1": make([]byte, size), "v2": make([]byte, size), "v3": make([]byte, size)}
	ws := []object.RangeWrite{
		{Key: "v1", Off: 100, Data: body(11, 500), Prev: 0, Next: 1},
		{Key: "v2", Off: 4096, Data: body(12, 200<<10), Prev: 0, Next: 1},
		{Key: "v1", Off: 300, Data: body(13, 4096), Prev: 1, Next: 2, Unsynced: true},
		{Key: "v3", Off: 0, Data: body(14, 10), Prev: 5, Next: 6}, // the wrong order
		{Key: "v2", Off: 5000, Len: 10000, Prev: 1, Next: 2},
	}
	for i := range ws {
		ws[i].Bucket, ws[i].Size = Bucket, size
	}
	res, err := rb.WriteRanges(ctx, ws)
	if err != nil || len(res) != len(ws) {
		t.Fatalf("batch: %d results, %v", len(res), err)
	}
	for i, w := range ws {
		if w.Key == "v3" {
			if !errors.Is(errors.Precondition, res[i].Err) {
				t.Fatalf("write %d at the wrong order: %v", i, res[i].Err)
			}
			continue
		}
		if res[i].Err != nil || res[i].Object == nil || res[i].Object.HLC != w.Next {
			t.Fatalf("write %d: %+v, %v", i, res[i].Object, res[i].Err)
		}
		if w.Data != nil {
			copy(models[w.Key][w.Off:], w.Data)
		} else {
			clear(models[w.Key][w.Off : w.Off+w.Len])
		}
	}
	for _, k := range []string{"v1", "v2"} {
		if got := readRange(t, r, k, 0, -1); !bytes.Equal(got, models[k]) {
			t.Fatalf("%s differs from its batched writes", k)
		}
	}
	if _, err := r.Stat(ctx, Bucket, "v3"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the refused write left a record: %v", err)
	}
}

// testPutBatches: a batch of object writes (two of one key in order, a repair, an
// if-absent write over a record, an older version than the holder's, an empty body)
// applies each as Put would alone and answers each one's outcome.
func testPutBatches(t *testing.T, r replica.Replica) {
	pb, ok := r.(replica.PutBatcher)
	if !ok {
		t.Fatalf("%T takes no put batches", r)
	}
	if _, err := put(t, r, "old", 9, body(20, 100), false); err != nil {
		t.Fatal(err)
	}
	w := func(key string, version uint64, b []byte) replica.Write {
		meta := &object.Object{ContentType: "application/x-test", ModTime: 1000 + int64(version)}
		fin := *meta
		fin.Size, fin.ETag = int64(len(b)), etag(b)
		return replica.Write{Bucket: Bucket, Key: key, Meta: meta, Body: bytes.NewReader(b), Size: int64(len(b)), Version: version, FinalNow: &fin}
	}
	a1, a2, c, e := body(21, 4096), body(22, 60<<10), body(23, 10), []byte{}
	absent := w("old", 12, body(24, 10))
	absent.IfAbsent = true
	repair := w("old", 9, c)
	repair.Repair = true
	ws := []replica.Write{w("a", 5, a1), w("a", 6, a2), absent, w("old", 3, body(25, 10)), w("empty", 4, e), repair}
	res, err := pb.PutBatch(ctx, ws)
	if err != nil || len(res) != len(ws) {
		t.Fatalf("batch: %d results, %v", len(res), err)
	}
	for i, want := range []uint64{5, 6, 0, 9, 4, 9} {
		if want == 0 {
			wantKind(t, "an if-absent write over a record", res[i].Err, errors.Precondition)
			continue
		}
		if res[i].Err != nil || res[i].Object == nil || res[i].Object.HLC != want {
			t.Fatalf("write %d (%s): %+v, %v; want version %d", i, ws[i].Key, res[i].Object, res[i].Err, want)
		}
	}
	mustRead(t, r, "a", a2)
	mustRead(t, r, "old", c)
	mustRead(t, r, "empty", e)
}

// readRange reads n bytes of key from off (n < 0: to the end).
func readRange(t *testing.T, r replica.Replica, key string, off, n int64) []byte {
	t.Helper()
	rd, err := r.Open(ctx, Bucket, key, replica.OpenOptions{Off: off, N: max(n, 0)})
	if err != nil {
		t.Fatalf("open %s: %v", key, err)
	}
	defer rd.Close()
	if n < 0 {
		n = rd.Info().Size - off
	}
	var buf bytes.Buffer
	if _, err := rd.WriteRange(ctx, &buf, off, n); err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return buf.Bytes()
}
