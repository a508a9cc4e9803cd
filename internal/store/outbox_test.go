package store

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// TestOutbox: an outbox entry exists exactly for each change that committed (a write, a
// delete), none for a write dropped as older than the stored version or for an internal
// bucket; entries survive a reopen with their seqs, the next seq continues after them,
// and removed or dead entries are counted.
func TestOutbox(t *testing.T) {
	cfg := testConfig(t)
	cfg.Outbox = func(bucket, key string, o *object.Object) [][]byte {

		return [][]byte{[]byte(fmt.Sprintf("%s/%s@%d deleted=%v", bucket, key, o.HLC, o.Deleted))}
	}
	st, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket("b"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(key string, version uint64) *object.Object {
		t.Helper()
		o, err := st.PutObject(ctx, "b", key, &object.Object{ETag: "e"}, bytes.NewReader([]byte("x")), 1, object.PutOptions{Version: version})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	scan := func(s *Store) []string {
		var out []string
		if err := s.ScanOutbox(0, func(seq uint64, e []byte) bool { out = append(out, fmt.Sprintf("%d %s", seq, e)); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	put("k", 100)
	put("k", 50) // older: dropped, no entry
	if _, err := st.DeleteVersion("b", "k", 200, 0); err != nil {
		t.Fatal(err)
	}
	got := scan(st)
	want := []string{"1 b/k@100 deleted=false", "2 b/k@200 deleted=true"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outbox %q, want %q", got, want)
	}
	if held, sent, _ := st.OutboxHeld("b", "k", 100); !held || sent {
		t.Fatalf("version 100: held %v sent %v, want held, pending", held, sent)
	}
	if held, _, _ := st.OutboxHeld("b", "k", 50); held {
		t.Fatal("a held mark for the dropped version 50")
	}
	if p, _ := st.OutboxLen(); p != 2 || st.OutboxFloor() != 3 {
		t.Fatalf("pending %d floor %d", p, st.OutboxFloor())
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := scan(st); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after reopen %q", got)
	}
	put("j", 300)
	if err := st.DoneOutbox([]uint64{1}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeadOutbox([]uint64{2}); err != nil {
		t.Fatal(err)
	}
	if held, sent, _ := st.OutboxHeld("b", "k", 100); !held || !sent {
		t.Fatalf("version 100 after done: held %v sent %v", held, sent)
	}
	if got := scan(st); len(got) != 1 || got[0] != "3 b/j@300 deleted=false" {
		t.Fatalf("after done and dead: %q", got)
	}
	if p, d := st.OutboxLen(); p != 1 || d != 1 {
		t.Fatalf("pending %d dead %d", p, d)
	}
}
