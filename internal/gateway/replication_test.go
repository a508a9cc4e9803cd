package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
)

// TestReplication writes through one gateway and checks that every replica holds the same
// version and that every gateway, replica or not, reads the same bytes, whole or ranged.
func TestReplication(t *testing.T) {
	c := newCluster(t, 4, clusterConfig{})
	c.createBucket("b")
	ctx := context.Background()
	const (
		primary = iota
		secondary
		nonReplica
	)
	cases := []struct {
		name    string
		size    int
		unknown bool // send with an unknown length (always streamed)
		via     int
	}{
		{"1KiB", 1 << 10, false, primary},
		{"3MiB-streamed", 3 << 20, false, primary},
		{"3MiB-unknown-length", 3 << 20, true, secondary},
		{"1MiB-exactly", 1 << 20, false, secondary},
		{"1KiB-via-non-replica", 1 << 10, false, nonReplica},
		{"3MiB-via-non-replica", 3 << 20, false, nonReplica},
		{"empty", 0, false, primary},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "obj/" + tc.name
			reps, others := c.replicaSet("b", key)
			if len(reps) != 3 || len(others) != 1 {
				t.Fatalf("placement of %s: replicas %v, others %v; want 3 and 1", key, reps, others)
			}
			via := others[0]
			if tc.via != nonReplica {
				via = reps[tc.via]
			}
			body := randBody(uint64(i+1), tc.size)
			size := int64(len(body))
			if tc.unknown {
				size = -1
			}
			o, err := put(ctx, c.nodes[via].gw, "b", key, body, size)
			if err != nil {
				t.Fatalf("put via %s: %v", c.nodes[via].id, err)
			}
			if o.HLC == 0 || o.Size != int64(len(body)) || o.ETag != md5Hex(body) {
				t.Fatalf("put returned HLC %d size %d ETag %q; want a version, %d, %q", o.HLC, o.Size, o.ETag, len(body), md5Hex(body))
			}
			var rs []ReplicaState
			if !waitFor(5*time.Second, func() bool {
				rs = c.replicaStates(via, "b", key)
				return converged(rs, o.HLC, false)
			}) {
				t.Fatalf("replicas did not converge on %d: %+v", o.HLC, rs)
			}
			var ids []string
			for _, r := range rs {
				ids = append(ids, r.Node)
				if r.ETag != o.ETag || r.Size != o.Size {
					t.Errorf("replica %s: ETag %q size %d; want %q %d", r.Node, r.ETag, r.Size, o.ETag, o.Size)
				}
			}
			var want []string
			for _, r := range reps {
				want = append(want, c.nodes[r].id)
			}
			slices.Sort(ids)
			slices.Sort(want)
			if !slices.Equal(ids, want) {
				t.Errorf("Replicas lists %v, placement says %v", ids, want)
			}
			for _, nd := range c.nodes {
				got, info, err := get(ctx, nd.gw, "b", key, 0, -1)
				if err != nil {
					t.Fatalf("read via %s: %v", nd.id, err)
				}
				if !bytes.Equal(got, body) {
					t.Errorf("read via %s: %d bytes differ from the %d written", nd.id, len(got), len(body))
				}
				if info.HLC != o.HLC || info.ETag != o.ETag || info.Size != o.Size {
					t.Errorf("read via %s: record HLC %d ETag %q size %d; want %d %q %d", nd.id, info.HLC, info.ETag, info.Size, o.HLC, o.ETag, o.Size)
				}
				st, err := nd.gw.StatObject(ctx, "b", key)
				if err != nil || st.HLC != o.HLC || st.ETag != o.ETag || st.ContentType != "application/octet-stream" {
					t.Errorf("stat via %s: %+v, %v", nd.id, st, err)
				}
			}
			if len(body) < 16 {
				return
			}
			// Ranges through the gateway that holds no copy: every byte comes over the network.
			nr := c.nodes[others[0]].gw
			for _, r := range [][2]int64{{int64(len(body)/2 - 3), 777}, {1, int64(len(body) - 2)}, {int64(len(body) - 5), 5}, {0, 1}} {
				off, n := r[0], min(r[1], int64(len(body))-r[0])
				got, _, err := get(ctx, nr, "b", key, off, n)
				if err != nil {
					t.Fatalf("range %d+%d via non-replica %s: %v", off, n, c.nodes[others[0]].id, err)
				}
				if !bytes.Equal(got, body[off:off+n]) {
					t.Errorf("range %d+%d via non-replica: wrong bytes", off, n)
				}
			}
			// Two ranges from one open reader.
			rd, err := nr.OpenObject(ctx, "b", key)
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			for _, off := range []int64{int64(len(body) / 3), 0} {
				var buf bytes.Buffer
				if _, err := rd.WriteRange(ctx, &buf, off, 10); err != nil || !bytes.Equal(buf.Bytes(), body[off:off+10]) {
					t.Errorf("second range at %d on one reader: %v", off, err)
				}
			}
		})
	}
}

// TestWriteQuorum checks writes with 0, 1 and 2 of the 3 replica servers closed, for a
// small body and a streamed one: with W=2 one closed replica is tolerated and gets a hint
// that is delivered once it is back; two are not.
func TestWriteQuorum(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{4 << 10, 2<<20 + 5} {
		for _, closed := range []int{0, 1, 2} {
			t.Run(fmt.Sprintf("size=%d/closed=%d", size, closed), func(t *testing.T) {
				c := newCluster(t, 3, clusterConfig{})
				c.createBucket("b")
				const via = 0
				g, h := c.nodes[via].gw, c.nodes[via].hints
				body := randBody(uint64(size+closed), size)
				for i := range closed {
					c.stop(2 - i)
				}
				o, err := put(ctx, g, "b", "k", body, int64(len(body)))
				if closed == 2 {
					if err == nil {
						t.Fatal("a write with 2 of 3 replicas unreachable succeeded with W=2")
					}
					if !errors.Is(errors.Transient, err) || !strings.Contains(err.Error(), "quorum") {
						t.Fatalf("error %q (kind %v); want a Transient quorum error", err, errors.KindOf(err))
					}
					return
				}
				if err != nil {
					t.Fatalf("write with %d of 3 replicas closed: %v", closed, err)
				}
				if closed == 0 {
					if !waitFor(2*time.Second, func() bool { return converged(c.replicaStates(via, "b", "k"), o.HLC, false) }) {
						t.Fatalf("replicas: %+v", c.replicaStates(via, "b", "k"))
					}
					if n := h.Len(); n != 0 {
						t.Errorf("%d hints queued for a write that reached every replica", n)
					}
					return
				}
				down := c.nodes[2].id
				if !waitFor(2*time.Second, func() bool { return h.Len() > 0 }) {
					t.Fatal("no hint queued for the closed replica")
				}
				if es := c.hintsFor(via, down, "b", "k"); len(es) != 1 || es[0].Version != o.HLC {
					t.Fatalf("hints for %s: %+v; want one at version %d", down, es, o.HLC)
				}
				rs := c.replicaStates(via, "b", "k")
				if s := stateOf(rs, down); s.Error == "" {
					t.Fatalf("closed replica %s answered: %+v", down, s)
				}
				for _, r := range rs {
					if r.Node != down && (r.HLC != o.HLC || r.ETag != o.ETag) {
						t.Errorf("replica %s: %+v; want HLC %d", r.Node, r, o.HLC)
					}
				}
				c.restart(2)
				c.runHints(via, 50*time.Millisecond)
				if !waitFor(10*time.Second, func() bool {
					rs = c.replicaStates(via, "b", "k")
					return converged(rs, o.HLC, false) && stateOf(rs, down).ETag == o.ETag
				}) {
					t.Fatalf("the restarted replica did not converge: %+v", rs)
				}
				if !waitFor(5*time.Second, func() bool { return h.Len() == 0 }) {
					t.Fatalf("%d hints left after delivery", h.Len())
				}
				got, _, err := get(ctx, c.nodes[2].gw, "b", "k", 0, -1)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("read from the repaired node: %v", err)
				}
			})
		}
	}
}

// TestReadRepair makes one replica stale (written while it was down, brought back without
// hint delivery) and reads through every gateway: reads return the newest version and
// queue a repair of the stale replica, which hint delivery then performs.
func TestReadRepair(t *testing.T) {
	ctx := context.Background()
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("R=%d", r), func(t *testing.T) {
			c := newCluster(t, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: r, D: 2}})
			c.createBucket("b")
			const stale = 2
			staleID := c.nodes[stale].id
			old := randBody(1, 3<<10)
			v1 := mustPut(t, c.nodes[0].gw, "b", "older", old)
			if !waitFor(2*time.Second, func() bool { return converged(c.replicaStates(0, "b", "older"), v1.HLC, false) }) {
				t.Fatal("first version did not reach every replica")
			}
			c.stop(stale)
			newBody := randBody(2, 5<<10)
			missing := mustPut(t, c.nodes[0].gw, "b", "missing", newBody) // the stale node has no record
			v2 := mustPut(t, c.nodes[0].gw, "b", "older", newBody)        // the stale node has v1
			c.restart(stale)

			if s := stateOf(c.replicaStates(0, "b", "missing"), staleID); !s.Missing {
				t.Fatalf("stale replica of 'missing': %+v; want missing", s)
			}
			if s := stateOf(c.replicaStates(0, "b", "older"), staleID); s.HLC != v1.HLC {
				t.Fatalf("stale replica of 'older': %+v; want HLC %d", s, v1.HLC)
			}
			type check struct {
				key  string
				want *object.Object
				via  []int
			}
			checks := []check{{"missing", missing, []int{stale, 1, 0}}}
			if r >= 2 {
				// With R=1 a gateway whose own replica holds an older live version answers
				// from it (one lookup, by design); with R=2 every gateway sees the newest.
				checks = append(checks, check{"older", v2, []int{stale, 1, 0}})
			}
			for _, ck := range checks {
				for _, i := range ck.via {
					g := c.nodes[i].gw
					st, err := g.StatObject(ctx, "b", ck.key)
					if err != nil || st.HLC != ck.want.HLC || st.ETag != ck.want.ETag {
						t.Errorf("stat %s via %s: %+v, %v; want HLC %d", ck.key, c.nodes[i].id, st, err, ck.want.HLC)
					}
					got, info, err := get(ctx, g, "b", ck.key, 0, -1)
					if err != nil || !bytes.Equal(got, newBody) || info.HLC != ck.want.HLC {
						t.Errorf("read %s via %s: err %v, HLC %v; want the newest bytes", ck.key, c.nodes[i].id, err, info)
					}
				}
				// A gateway that asked the stale replica queued its repair: with R=1 only the
				// stale node's own (its local copy is asked first and has nothing); with R=2
				// every gateway asks two or more replicas.
				askers := []int{stale}
				if r >= 2 {
					askers = append(askers, 1)
				}
				for _, i := range askers {
					es := c.hintsFor(i, staleID, "b", ck.key)
					if len(es) != 1 || es[0].Version != ck.want.HLC {
						t.Errorf("repair hints for %s/%s on %s's queue: %+v; want one at version %d", staleID, ck.key, c.nodes[i].id, es, ck.want.HLC)
					}
				}
			}
			// The stale node repairs itself from its own queue.
			c.runHints(stale, 50*time.Millisecond)
			for _, ck := range checks {
				var rs []ReplicaState
				if !waitFor(10*time.Second, func() bool {
					rs = c.replicaStates(stale, "b", ck.key)
					return converged(rs, ck.want.HLC, false)
				}) {
					t.Fatalf("read repair of %s did not converge: %+v", ck.key, rs)
				}
				got, err := storeRead(c.nodes[stale].store, "b", ck.key)
				if err != nil || !bytes.Equal(got, newBody) {
					t.Errorf("the repaired replica's own store holds wrong bytes for %s: %v", ck.key, err)
				}
			}
			if !waitFor(5*time.Second, func() bool { return c.nodes[stale].hints.Len() == 0 }) {
				t.Errorf("%d repair hints left on the stale node", c.nodes[stale].hints.Len())
			}
		})
	}
}

// storeRead reads bucket/key directly from a store.
func storeRead(s *store.Store, bucket, key string) ([]byte, error) {
	rd, err := s.OpenObject(bucket, key)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var buf bytes.Buffer
	if _, err := rd.WriteRange(context.Background(), &buf, 0, rd.Object.Size); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// listKeys lists bucket through g in pages, each continuing after the previous page's
// Next, and returns every key and common prefix. It checks that every page holds at most
// Max entries, all after the page's After, and that the entries come in order, once.
func listKeys(t *testing.T, g *Gateway, bucket string, opts object.ListOptions) (keys, prefixes []string) {
	t.Helper()
	var seq []string
	for page := 0; ; page++ {
		if page > 10000 {
			t.Fatal("listing does not end")
		}
		res, err := g.List(context.Background(), bucket, opts)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(res.Objects) + len(res.CommonPrefixes); n > opts.Max {
			t.Fatalf("page of %d entries with Max %d", n, opts.Max)
		}
		var entries []string
		for _, e := range res.Objects {
			if e.Object == nil || e.Object.Deleted {
				t.Fatalf("listing returned a tombstone or no record for %q", e.Key)
			}
			keys = append(keys, e.Key)
			entries = append(entries, e.Key)
		}
		prefixes = append(prefixes, res.CommonPrefixes...)
		entries = append(entries, res.CommonPrefixes...)
		slices.Sort(entries)
		for _, e := range entries {
			if opts.After != "" && e <= opts.After {
				t.Fatalf("entry %q in a page after %q", e, opts.After)
			}
		}
		seq = append(seq, entries...)
		if !res.Truncated {
			break
		}
		if res.Next == "" || res.Next <= opts.After {
			t.Fatalf("truncated page with Next %q after %q", res.Next, opts.After)
		}
		opts.After = res.Next
	}
	if !slices.IsSorted(seq) || len(slices.Compact(slices.Clone(seq))) != len(seq) {
		t.Fatalf("entries out of order or repeated across pages: %q", seq)
	}
	return keys, prefixes
}

// TestDeleteTombstones checks that deletes leave tombstones, that a stale replica holding
// the old version (down during the delete) does not bring the object back in listings or
// reads, and that hint delivery gives it the tombstone.
func TestDeleteTombstones(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const stale = 2
	staleID := c.nodes[stale].id
	for _, k := range []string{"gone", "stale", "keep"} {
		o := mustPut(t, c.nodes[0].gw, "b", k, randBody(7, 2<<10))
		if !waitFor(2*time.Second, func() bool { return converged(c.replicaStates(0, "b", k), o.HLC, false) }) {
			t.Fatalf("%s did not reach every replica", k)
		}
	}
	// A delete with every replica up: a tombstone on each, at one version.
	if err := c.nodes[1].gw.DeleteObject(ctx, "b", "gone"); err != nil {
		t.Fatal(err)
	}
	var rs []ReplicaState
	if !waitFor(2*time.Second, func() bool {
		rs = c.replicaStates(0, "b", "gone")
		return len(rs) == 3 && converged(rs, rs[0].HLC, true)
	}) {
		t.Fatalf("tombstones of 'gone': %+v", rs)
	}
	// A delete while one replica is down.
	liveHLC := stateOf(c.replicaStates(0, "b", "stale"), staleID).HLC
	c.stop(stale)
	if err := c.nodes[0].gw.DeleteObject(ctx, "b", "stale"); err != nil {
		t.Fatalf("delete with one replica down (D=2): %v", err)
	}
	c.restart(stale)
	rs = c.replicaStates(0, "b", "stale")
	tomb := stateOf(rs, c.nodes[0].id)
	if !tomb.Deleted || tomb.HLC <= liveHLC {
		t.Fatalf("coordinator's record after the delete: %+v", tomb)
	}
	if s := stateOf(rs, c.nodes[1].id); !s.Deleted || s.HLC != tomb.HLC {
		t.Fatalf("second replica after the delete: %+v; want the tombstone %d", s, tomb.HLC)
	}
	if s := stateOf(rs, staleID); s.Deleted || s.HLC != liveHLC {
		t.Fatalf("stale replica: %+v; want the old live version %d", s, liveHLC)
	}

	absent := func(t *testing.T, via []int) {
		t.Helper()
		for _, i := range via {
			g := c.nodes[i].gw
			for _, opts := range []object.ListOptions{{Max: 1000}, {Max: 1}, {Max: 2, Prefix: "s"}} {
				keys, _ := listKeys(t, g, "b", opts)
				want := []string{"keep"}
				if opts.Prefix == "s" {
					want = nil
				}
				if !slices.Equal(keys, want) {
					t.Errorf("list %+v via %s: %q; want %q", opts, c.nodes[i].id, keys, want)
				}
			}
			for _, k := range []string{"gone", "stale"} {
				if o, err := g.StatObject(ctx, "b", k); !errors.Is(errors.NotExist, err) {
					t.Errorf("stat %s via %s: %+v, %v; want NotExist", k, c.nodes[i].id, o, err)
				}
				if rd, err := g.OpenObject(ctx, "b", k); !errors.Is(errors.NotExist, err) {
					if rd != nil {
						rd.Close()
					}
					t.Errorf("open %s via %s: %v; want NotExist", k, c.nodes[i].id, err)
				}
			}
		}
	}
	t.Run("R=1", func(t *testing.T) {
		// Listings merge every node; reads through the up-to-date replicas see the tombstone
		// (a read through the stale node's own gateway with R=1 answers from its local copy
		// by design, so it is left out here).
		absent(t, []int{0, 1})
		for _, i := range []int{0, 1, stale} {
			keys, _ := listKeys(t, c.nodes[i].gw, "b", object.ListOptions{Max: 1000})
			if !slices.Equal(keys, []string{"keep"}) {
				t.Errorf("list via %s: %q", c.nodes[i].id, keys)
			}
		}
	})
	t.Run("R=2", func(t *testing.T) {
		c.setClass(clustermap.Class{N: 3, W: 2, R: 2, D: 2})
		defer c.setClass(clustermap.Class{N: 3, W: 2, R: 1, D: 2})
		absent(t, []int{0, 1, stale})
	})
	// Hint delivery brings the tombstone to the stale replica.
	c.runHints(0, 50*time.Millisecond)
	if !waitFor(10*time.Second, func() bool {
		rs = c.replicaStates(0, "b", "stale")
		return converged(rs, tomb.HLC, true)
	}) {
		t.Fatalf("the stale replica did not get the tombstone: %+v", rs)
	}
	if o, err := c.nodes[stale].store.StatVersion("b", "stale"); err != nil || !o.Deleted || o.HLC != tomb.HLC {
		t.Fatalf("stale node's store: %+v, %v", o, err)
	}
	if !waitFor(5*time.Second, func() bool { return c.nodes[0].hints.Len() == 0 }) {
		t.Errorf("%d hints left", c.nodes[0].hints.Len())
	}
	absent(t, []int{0, 1, stale})
}

// TestListDelimiterStaleReplica: a key deleted while one replica was down must not come
// back as a common prefix in a delimited listing because the stale replica still holds it
// live.
func TestListDelimiterStaleReplica(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	ctx := context.Background()
	o := mustPut(t, c.nodes[0].gw, "b", "dir/only", []byte("x"))
	mustPut(t, c.nodes[0].gw, "b", "top", []byte("y"))
	if !waitFor(2*time.Second, func() bool { return converged(c.replicaStates(0, "b", "dir/only"), o.HLC, false) }) {
		t.Fatal("not replicated")
	}
	c.stop(2)
	if err := c.nodes[0].gw.DeleteObject(ctx, "b", "dir/only"); err != nil {
		t.Fatal(err)
	}
	c.restart(2)
	keys, _ := listKeys(t, c.nodes[0].gw, "b", object.ListOptions{Max: 100})
	if !slices.Equal(keys, []string{"top"}) {
		t.Fatalf("flat listing: %q", keys)
	}
	keys, prefixes := listKeys(t, c.nodes[0].gw, "b", object.ListOptions{Max: 100, Delimiter: "/"})
	if !slices.Equal(keys, []string{"top"}) || len(prefixes) != 0 {
		t.Fatalf("delimited listing: keys %q, common prefixes %q; want [top] and none: the only key under dir/ is deleted (its tombstone is newest on 2 of 3 replicas)", keys, prefixes)
	}
}

// slowReader yields n bytes of body in small pieces with a pause, calling at(off) after
// each piece.
type slowReader struct {
	body  []byte
	off   int
	piece int
	pause time.Duration
	at    func(off int)
	fail  error // returned once failAt bytes were read, if set
	from  int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.fail != nil && r.off >= r.from {
		return 0, r.fail
	}
	if r.off >= len(r.body) {
		return 0, io.EOF
	}
	n := min(len(p), r.piece, len(r.body)-r.off)
	if r.fail != nil {
		n = min(n, r.from-r.off)
	}
	copy(p, r.body[r.off:r.off+n])
	r.off += n
	if r.pause > 0 {
		time.Sleep(r.pause) // deliberate: a slow client, its body trickling in
	}
	if r.at != nil {
		r.at(r.off)
	}
	return n, nil
}

// TestStreamingFailures covers streamed writes that lose a replica, whose source fails,
// or whose Finish vetoes them.
func TestStreamingFailures(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	allGateways := func() {
		for _, nd := range c.nodes {
			nd.gw.bg.Wait()
		}
	}
	t.Run("replica-lost-midway", func(t *testing.T) {
		body := randBody(11, 8<<20)
		const lost = 2
		var once sync.Once
		var stopped sync.WaitGroup
		src := &slowReader{body: body, piece: 64 << 10, pause: time.Millisecond, at: func(off int) {
			if off >= 2<<20 {
				once.Do(func() {
					stopped.Add(1)
					go func() { defer stopped.Done(); c.stop(lost) }()
				})
			}
		}}
		r, fin := md5Finish(src)
		o, err := c.nodes[0].gw.PutObject(ctx, "b", "big", &object.Object{}, r, int64(len(body)), object.PutOptions{Finish: fin})
		stopped.Wait()
		if err != nil {
			t.Fatalf("streamed write that lost 1 of 3 replicas (W=2): %v", err)
		}
		if o.ETag != md5Hex(body) || o.Size != int64(len(body)) {
			t.Fatalf("result %+v", o)
		}
		rs := c.replicaStates(0, "b", "big")
		for _, i := range []int{0, 1} {
			if s := stateOf(rs, c.nodes[i].id); s.HLC != o.HLC || s.ETag != o.ETag || s.Size != o.Size {
				t.Errorf("replica %s: %+v; want %d", c.nodes[i].id, s, o.HLC)
			}
			got, _, err := get(ctx, c.nodes[i].gw, "b", "big", 0, -1)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("read via %s: %v", c.nodes[i].id, err)
			}
		}
		allGateways()
		if _, err := c.nodes[lost].store.StatVersion("b", "big"); !errors.Is(errors.NotExist, err) {
			t.Errorf("the lost replica committed a record of the cut-off stream: %v", err)
		}
		if len(c.hintsFor(0, c.nodes[lost].id, "b", "big")) != 1 {
			t.Errorf("no hint for the lost replica")
		}
		c.restart(lost)
		stop := c.runHints(0, 50*time.Millisecond)
		defer stop()
		if !waitFor(10*time.Second, func() bool { return converged(c.replicaStates(0, "b", "big"), o.HLC, false) }) {
			t.Fatalf("lost replica not repaired: %+v", c.replicaStates(0, "b", "big"))
		}
		if got, err := storeRead(c.nodes[lost].store, "b", "big"); err != nil || !bytes.Equal(got, body) {
			t.Errorf("repaired replica's bytes: %v", err)
		}
	})
	srcErr := errors.New("source broke")
	finErr := errors.New("checksum mismatch")
	cases := []struct {
		name    string
		size    int
		unknown bool
		failAt  int  // the source fails after this many bytes (0: it does not)
		veto    bool // Finish fails
		prior   bool // an older version exists and must stay
	}{
		{"source-error-small", 512 << 10, false, 100 << 10, false, false},
		{"source-error-streamed", 4 << 20, false, 2 << 20, false, false},
		{"source-error-unknown-length", 4 << 20, true, 2 << 20, false, true},
		{"source-error-over-older-version", 4 << 20, false, 3 << 20, false, true},
		{"finish-error-small", 1 << 10, false, 0, true, false},
		{"finish-error-streamed", 3 << 20, false, 0, true, true},
		{"finish-error-unknown-length", 3 << 20, true, 0, true, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "fail/" + tc.name
			var prior *object.Object
			if tc.prior {
				prior = mustPut(t, c.nodes[1].gw, "b", key, []byte("prior"))
				if !waitFor(2*time.Second, func() bool { return converged(c.replicaStates(0, "b", key), prior.HLC, false) }) {
					t.Fatal("prior version not replicated")
				}
			}
			body := randBody(uint64(100+i), tc.size)
			src := &slowReader{body: body, piece: 128 << 10}
			if tc.failAt > 0 {
				src.fail, src.from = srcErr, tc.failAt
			}
			r, fin := md5Finish(src)
			if tc.veto {
				fin = func(*object.Object) error { return finErr }
			}
			size := int64(len(body))
			if tc.unknown {
				size = -1
			}
			o, err := c.nodes[0].gw.PutObject(ctx, "b", key, &object.Object{}, r, size, object.PutOptions{Finish: fin})
			want := srcErr
			if tc.veto {
				want = finErr
			}
			if err == nil || !errors.IsErr(err, want) {
				t.Fatalf("put: %+v, %v; want an error wrapping %q", o, err, want)
			}
			allGateways()
			for _, s := range c.replicaStates(0, "b", key) {
				switch {
				case prior == nil && !s.Missing:
					t.Errorf("replica %s holds %+v after a failed write; want nothing", s.Node, s)
				case prior != nil && (s.HLC != prior.HLC || s.ETag != prior.ETag):
					t.Errorf("replica %s holds %+v after a failed write; want the prior version %d", s.Node, s, prior.HLC)
				}
			}
			for _, nd := range c.nodes {
				o, err := nd.store.StatVersion("b", key)
				if prior == nil && !errors.Is(errors.NotExist, err) {
					t.Errorf("store of %s: %+v, %v; want NotExist", nd.id, o, err)
				}
			}
		})
	}
}

// TestAbandonedWriteQueuesNoHints: a streamed write that the coordinator abandons (the
// client's body fails, or Finish vetoes it) is a failure of the write as a whole, not of a
// replica. gateway.hint says abandoned writes are not retried; no hint may be queued for
// the replicas that were told to drop it (they would be retried for a minute for a version
// that exists nowhere, and counted in cairn_hints_pending).
func TestAbandonedWriteQueuesNoHints(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	for _, veto := range []bool{false, true} {
		name := "source-error"
		if veto {
			name = "finish-veto"
		}
		t.Run(name, func(t *testing.T) {
			body := randBody(41, 4<<20)
			src := &slowReader{body: body, piece: 128 << 10}
			if !veto {
				src.fail, src.from = errors.New("client went away"), 2<<20
			}
			r, fin := md5Finish(src)
			if veto {
				fin = func(*object.Object) error { return errors.E(errors.Invalid, "bad checksum") }
			}
			key := "abandoned/" + name
			if _, err := c.nodes[0].gw.PutObject(ctx, "b", key, &object.Object{}, r, int64(len(body)), object.PutOptions{Finish: fin}); err == nil {
				t.Fatal("the abandoned write succeeded")
			}
			c.nodes[0].gw.bg.Wait()
			for _, nd := range c.nodes {
				if es := c.hintsFor(0, nd.id, "b", key); len(es) != 0 {
					t.Errorf("hint queued for %s after an abandoned write: %+v", nd.id, es)
				}
			}
		})
	}
}
