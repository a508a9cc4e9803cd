package replicatest

import (
	"bytes"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
)

// testLateVersion: a coordinator takes a new version once the body is complete and sends
// it with the final metadata; the version announced before the body is provisional. The
// holder commits at the final version, streamed or not; a final version older than the
// announced one is refused and nothing is kept; a later write at a provisional version
// between the two is still ordered by the final ones.
func testLateVersion(t *testing.T, r replica.Replica) {
	for _, streamed := range []bool{false, true} {
		key := "late"
		if streamed {
			key += "-streamed"
		}
		a, b := body(20, 5000), body(21, 200<<10)
		w := func(data []byte, announced, final uint64) replica.Write {
			fin := &object.Object{Size: int64(len(data)), ETag: etag(data), HLC: final}
			w := replica.Write{Bucket: Bucket, Key: key, Meta: &object.Object{ModTime: 1}, Body: bytes.NewReader(data), Size: int64(len(data)), Version: announced}
			if streamed {
				w.Size, w.Final = -1, func() *object.Object { return fin }
			} else {
				w.FinalNow = fin
			}
			return w
		}
		// Announced at 10, completed at 30.
		if o, err := r.Put(ctx, w(a, 10, 30)); err != nil || o.HLC != 30 {
			t.Fatalf("streamed=%v: a late version: %+v, %v", streamed, o, err)
		}
		if o := mustRead(t, r, key, a); o.HLC != 30 {
			t.Fatalf("streamed=%v: stored at %d, want the final version 30", streamed, o.HLC)
		}
		// Announced at 20 (after a's announcement), completed at 25 (before a's completion):
		// older than what is stored, dropped.
		if o, err := r.Put(ctx, w(b, 20, 25)); err != nil || o.HLC != 30 {
			t.Fatalf("streamed=%v: a write that completed earlier: %+v, %v", streamed, o, err)
		}
		mustRead(t, r, key, a)
		// A final version older than the announced one is refused.
		_, err := r.Put(ctx, w(b, 50, 40))
		wantKind(t, "a final version older than the announced one", err, errors.Invalid)
		if o := mustRead(t, r, key, a); o.HLC != 30 {
			t.Fatalf("streamed=%v: a refused write changed the record: %+v", streamed, o)
		}
	}
}
