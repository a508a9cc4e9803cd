package gateway

import (
	"bytes"
	"context"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

// ecUpload starts an upload of b/key into EC42 and sends parts of the given sizes,
// numbered from 1; it returns the upload, the completion list and the parts' bytes.
func ecUpload(t *testing.T, c *testCluster, key string, sizes ...int) (string, []object.CompletePart, [][]byte) {
	t.Helper()
	ctx := context.Background()
	id, err := c.nodes[0].gw.CreateUpload(ctx, "b", key, &object.Object{StorageClass: "EC42"})
	if err != nil {
		t.Fatal(err)
	}
	var list []object.CompletePart
	var bodies [][]byte
	for i, size := range sizes {
		body := randBody(uint64(200+i), size)
		src, fin := md5Finish(bytes.NewReader(body))
		p, err := c.nodes[i%6].gw.PutPart(ctx, "b", key, id, i+1, src, int64(size), fin)
		if err != nil || !p.Striped {
			t.Fatalf("part %d: %+v %v", i+1, p, err)
		}
		list = append(list, object.CompletePart{Number: i + 1, ETag: p.ETag})
		bodies = append(bodies, body)
	}
	return id, list, bodies
}

// collectAll runs a sync round on every node and returns the shards collected.
func (c *testCluster) collectAll() int {
	n := 0
	for _, st := range c.syncAll() {
		n += st.Collected
	}
	return n
}

// Shards of multipart parts are collected by the sync once nothing can read them: the
// upload was aborted, or the object it made was overwritten or deleted, or a part was left
// out of the completion (or sent again smaller, leaving stripes past its new end). They
// stay while the upload is in progress or its object current, and while a holder of the
// object cannot be asked.
func TestECCollectsPartShards(t *testing.T) {
	const big = 5<<20 + 3 // two stripes: 12 shards; a part of 1000 bytes has 6
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// run makes the case and returns the shards to be collected and the object's
		// bytes afterwards (nil: no object).
		run func(t *testing.T, c *testCluster) (collect int, want []byte)
	}{
		{"aborted", func(t *testing.T, c *testCluster) (int, []byte) {
			id, _, _ := ecUpload(t, c, "mp", big, 1000)
			if err := c.nodes[1].gw.AbortUpload(ctx, "b", "mp", id); err != nil {
				t.Fatal(err)
			}
			return 18, nil
		}},
		{"completed, then overwritten by a plain PUT", func(t *testing.T, c *testCluster) (int, []byte) {
			id, list, _ := ecUpload(t, c, "mp", big, 1000)
			if _, err := c.nodes[2].gw.CompleteUpload(ctx, "b", "mp", id, list, 5<<20, nil); err != nil {
				t.Fatal(err)
			}
			body := randBody(300, 300<<10)
			if o := mustPut(t, c.nodes[3].gw, "b", "mp", body); o.Striped {
				t.Fatalf("plain PUT stored %+v", o)
			}
			return 18, body
		}},
		{"completed, then overwritten by an EC PUT", func(t *testing.T, c *testCluster) (int, []byte) {
			id, list, _ := ecUpload(t, c, "mp", big, 1000)
			if _, err := c.nodes[2].gw.CompleteUpload(ctx, "b", "mp", id, list, 5<<20, nil); err != nil {
				t.Fatal(err)
			}
			body := randBody(301, 5<<20)
			if _, err := putClass(ctx, c.nodes[3].gw, "b", "mp", "EC42", body); err != nil {
				t.Fatal(err)
			}
			return 18, body
		}},
		{"completed, then deleted", func(t *testing.T, c *testCluster) (int, []byte) {
			id, list, _ := ecUpload(t, c, "mp", big, 1000)
			if _, err := c.nodes[2].gw.CompleteUpload(ctx, "b", "mp", id, list, 5<<20, nil); err != nil {
				t.Fatal(err)
			}
			if err := c.nodes[4].gw.DeleteObject(ctx, "b", "mp"); err != nil {
				t.Fatal(err)
			}
			return 18, nil
		}},
		{"completed and current", func(t *testing.T, c *testCluster) (int, []byte) {
			id, list, parts := ecUpload(t, c, "mp", big, 1000)
			if _, err := c.nodes[2].gw.CompleteUpload(ctx, "b", "mp", id, list, 5<<20, nil); err != nil {
				t.Fatal(err)
			}
			return 0, bytes.Join(parts, nil)
		}},
		{"completed without a part, one part sent again smaller", func(t *testing.T, c *testCluster) (int, []byte) {
			id, list, parts := ecUpload(t, c, "mp", big, 1000, 2000)
			// Part 1 again, one stripe instead of two: its stripe 1 is left behind.
			small := randBody(303, 4000)
			src, fin := md5Finish(bytes.NewReader(small))
			p, err := c.nodes[5].gw.PutPart(ctx, "b", "mp", id, 1, src, int64(len(small)), fin)
			if err != nil {
				t.Fatal(err)
			}
			list[0].ETag = p.ETag
			// Complete with parts 1 and 3: part 2 (6 shards) and part 1's stripe 1 (6) go.
			if _, err := c.nodes[2].gw.CompleteUpload(ctx, "b", "mp", id, []object.CompletePart{list[0], list[2]}, 0, nil); err != nil {
				t.Fatal(err)
			}
			return 12, append(small, parts[2]...)
		}},
		{"in progress", func(t *testing.T, c *testCluster) (int, []byte) {
			ecUpload(t, c, "mp", big, 1000)
			return 0, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newECCluster(t)
			collect, want := tc.run(t, c)
			before, _ := c.shardsOf()
			if got := c.collectAll(); got != collect {
				t.Fatalf("collected %d shards, want %d", got, collect)
			}
			if after, _ := c.shardsOf(); after != before-collect {
				t.Fatalf("%d shards left of %d, want %d", after, before, before-collect)
			}
			if again := c.collectAll(); again != 0 {
				t.Fatalf("a second round collected %d more", again)
			}
			if want != nil {
				for _, i := range []int{0, 5} {
					got, _, err := get(ctx, c.nodes[i].gw, "b", "mp", 0, -1)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("read via %s after collection: %v", c.nodes[i].id, err)
					}
				}
			}
		})
	}
}

// An upload that is gone still keeps its parts' shards while a holder of the object does
// not answer (it might hold the upload, or a record made from it); they go once it does.
// An upload still in progress keeps them until it completes, and then they stay as the
// object's.
func TestECPartShardsNeedEveryHolder(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	id, _, _ := ecUpload(t, c, "mp", 5<<20+3, 1000)
	if err := c.nodes[0].gw.AbortUpload(ctx, "b", "mp", id); err != nil {
		t.Fatal(err)
	}
	holders, _ := c.replicaSet("b", "mp")
	c.stop(holders[1])
	for i, nd := range c.nodes {
		if i == holders[1] {
			continue
		}
		st, _ := nd.rep.Sync(ctx) // errors expected: a peer does not answer
		if st.Collected != 0 {
			t.Fatalf("%s collected %d shards while a holder of the object is away", nd.id, st.Collected)
		}
	}
	c.restart(holders[1])
	if n := c.collectAll(); n != 18 {
		t.Fatalf("collected %d shards once every holder answered, want 18", n)
	}

	// In progress, then completed: nothing is collected at either point.
	id, list, parts := ecUpload(t, c, "mp2", 5<<20+3, 1000)
	if n := c.collectAll(); n != 0 {
		t.Fatalf("collected %d shards of an upload in progress", n)
	}
	if _, err := c.nodes[1].gw.CompleteUpload(ctx, "b", "mp2", id, list, 5<<20, nil); err != nil {
		t.Fatal(err)
	}
	if n := c.collectAll(); n != 0 {
		t.Fatalf("collected %d shards of a current object", n)
	}
	got, _, err := get(ctx, c.nodes[3].gw, "b", "mp2", 0, -1)
	if err != nil || !bytes.Equal(got, bytes.Join(parts, nil)) {
		t.Fatalf("read after collection: %v", err)
	}
}
