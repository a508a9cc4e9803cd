package store

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

func putTestPart(t *testing.T, s *Store, key, id string, n int, body []byte) object.CompletePart {
	t.Helper()
	sum := md5.Sum(body)
	etag := hex.EncodeToString(sum[:])
	if _, err := s.PutPart(context.Background(), "b", key, id, n, bytes.NewReader(body), int64(len(body)),
		func(o *object.Object) error { o.ETag = etag; return nil }); err != nil {
		t.Fatal(err)
	}
	return object.CompletePart{Number: n, ETag: `"` + etag + `"`}
}

// TestUploadEndRecords: a completed upload answers a retry of its completion with the
// recorded result and writes nothing, refuses anything else, and an applied end record
// drops a pending upload's parts; records expire.
func TestUploadEndRecords(t *testing.T) {
	s := openStore(t, testConfig(t))
	if err := s.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	id, err := s.CreateUpload("b", "k", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	list := []object.CompletePart{putTestPart(t, s, "k", id, 1, randBytes(1, 70<<10)), putTestPart(t, s, "k", id, 2, randBytes(2, 10))}
	o, err := s.CompleteUpload("b", "k", id, list, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.CompleteUpload("b", "k", id, list, 0, nil)
	if err != nil || again.ETag != o.ETag || again.HLC != o.HLC {
		t.Fatalf("retried completion: %+v, %v; want ETag %s version %d", again, err, o.ETag, o.HLC)
	}
	if cur, err := s.StatObject("b", "k"); err != nil || cur.HLC != o.HLC {
		t.Fatalf("object after the retry: %+v, %v", cur, err)
	}
	if _, err := s.CompleteUpload("b", "k", id, list[:1], 0, nil); !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Errorf("completion with another list: %v; want NoSuchUpload", err)
	}
	if err := s.AbortUpload("b", "k", id); !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Errorf("abort of a completed upload: %v; want NoSuchUpload", err)
	}
	if err := s.CreateUploadID("b", "k", id, &object.Object{}); err == nil {
		t.Error("an ended upload id was created again")
	}

	// Another replica's end record drops this store's pending upload and its parts.
	id2, err := s.CreateUpload("b", "k", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	putTestPart(t, s, "k", id2, 1, randBytes(3, 70<<10))
	if err := s.EndUpload(&object.UploadEnd{Bucket: "b", Key: "k", UploadID: id2, State: object.UploadAborted, Ended: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	if ps, err := s.parts(id2); err != nil || len(ps) != 0 {
		t.Errorf("parts left after the end record: %d, %v", len(ps), err)
	}
	if _, err := s.Upload("b", "k", id2); !errors.Is(errors.NotExist, err) {
		t.Errorf("upload after the end record: %v", err)
	}
	if _, err := s.PutPart(context.Background(), "b", "k", id2, 2, bytes.NewReader([]byte("x")), 1, nil); !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Errorf("part of an ended upload: %v", err)
	}
	n := 0
	if err := s.PendingUploads(func(object.PendingUpload) error { n++; return nil }); err != nil || n != 0 {
		t.Errorf("pending uploads: %d, %v", n, err)
	}
	// Records live UploadEndLifetime.
	if n, err := s.GCUploadEnds(time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Errorf("young records collected: %d, %v", n, err)
	}
	if n, err := s.GCUploadEnds(time.Now().Add(time.Second)); err != nil || n != 2 {
		t.Errorf("expired records collected: %d, %v; want 2", n, err)
	}
	if _, err := s.UploadEnd("b", "k", id); !errors.Is(errors.NotExist, err) {
		t.Errorf("record after collection: %v", err)
	}
}
