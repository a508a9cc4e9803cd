//go:build gendata

package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// TestGenerateFormatData writes testdata/format-v1 (see formatDir): a data directory with
// one of each kind of record, closed cleanly, and expect.json describing it. Run it only at
// the commit tagged format-v1-gen; later code must read that data, not rewrite it.
func TestGenerateFormatData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(formatConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const bucket = "fmt"
	if err := s.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	exp := formatExpect{Bucket: bucket}
	objects := map[string]formatObject{}
	etag := func(b []byte) string { h := md5.Sum(b); return hex.EncodeToString(h[:]) }
	put := func(key string, seed uint64, n int, meta [][2]string) {
		body := randBytes(seed, n)
		m := &object.Object{ContentType: "application/x-" + key, ETag: etag(body), UserMeta: meta}
		o, err := s.PutObject(ctx, bucket, key, m, bytes.NewReader(body), int64(n), object.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		layout, chunks := layoutOfObject(o)
		objects[key] = formatObject{Key: key, Size: int64(n), SHA256: sha256Hex(body), ETag: m.ETag,
			ContentType: m.ContentType, UserMeta: meta, Layout: layout, Chunks: chunks}
	}
	put("embedded", 1, 100, [][2]string{{"color", "blue"}, {"shape", "round"}})
	put("empty", 2, 0, nil)
	put("inline", 3, 12<<10, nil)               // over the embed limit: its own index key
	put("one-chunk", 4, 20<<10, nil)            // a chunk written through the page cache
	put("multi-chunk", 5, 2*(64<<10)+5000, nil) // two aligned chunks and a short one
	put("dir/nested", 6, 300, nil)              // a key with a delimiter
	put("overwritten", 7, 70<<10, nil)          // an aligned chunk, then replaced
	put("overwritten", 8, 3000, nil)            // ... by an embedded body
	put("deleted", 9, 30<<10, nil)              // chunk garbage after the delete
	put("tombstoned", 10, 200, nil)             // deleted with a tombstone
	if err := s.DeleteObject(bucket, "deleted"); err != nil {
		t.Fatal(err)
	}
	delete(objects, "deleted")
	if _, err := s.DeleteVersion(bucket, "tombstoned", 0, 0); err != nil {
		t.Fatal(err)
	}
	delete(objects, "tombstoned")
	exp.Absent = []string{"deleted", "tombstoned"}
	exp.Tombstones = []string{"tombstoned"}

	// A completed multipart upload, and one left pending.
	upload := func(key string, seed uint64, sizes []int) (string, []formatPart, [][]byte) {
		id, err := s.CreateUpload(bucket, key, &object.Object{ContentType: "application/x-" + key})
		if err != nil {
			t.Fatal(err)
		}
		var parts []formatPart
		var bodies [][]byte
		for i, n := range sizes {
			body := randBytes(seed+uint64(i), n)
			tag := etag(body)
			if _, err := s.PutPart(ctx, bucket, key, id, i+1, bytes.NewReader(body), int64(n), func(p *object.Object) error {
				p.ETag = tag
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			parts = append(parts, formatPart{Number: i + 1, Size: int64(n), SHA256: sha256Hex(body), ETag: tag})
			bodies = append(bodies, body)
		}
		return id, parts, bodies
	}
	id, parts, bodies := upload("multipart", 20, []int{70 << 10, 10 << 10})
	var list []object.CompletePart
	for _, p := range parts {
		list = append(list, object.CompletePart{Number: p.Number, ETag: p.ETag})
	}
	o, err := s.CompleteUpload(bucket, "multipart", id, list, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	whole := bytes.Join(bodies, nil)
	layout, chunks := layoutOfObject(o)
	objects["multipart"] = formatObject{Key: "multipart", Size: int64(len(whole)), SHA256: sha256Hex(whole),
		ETag: o.ETag, ContentType: o.ContentType, PartSizes: o.PartSizes, Layout: layout, Chunks: chunks}
	id, parts, _ = upload("pending", 30, []int{5000, 66 << 10})
	exp.Uploads = []formatUpload{{Key: "pending", UploadID: id, Parts: parts}}

	res, err := s.List(bucket, object.ListOptions{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Objects {
		exp.Objects = append(exp.Objects, objects[e.Key])
	}
	if len(exp.Objects) != len(objects) {
		t.Fatalf("listed %d objects, put %d", len(exp.Objects), len(objects))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(formatDir, "data")
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	copyTree(t, dir, out)
	js, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(formatDir, "expect.json"), append(js, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
