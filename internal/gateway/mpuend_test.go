package gateway

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// mpuParts uploads parts through g and returns their completion list and the whole body.
func mpuParts(t *testing.T, g *Gateway, bucket, key, id string, first int, parts ...[]byte) []object.CompletePart {
	t.Helper()
	var list []object.CompletePart
	for i, p := range parts {
		o, err := putPart(context.Background(), g, bucket, key, id, first+i, p)
		if err != nil {
			t.Fatalf("part %d: %v", first+i, err)
		}
		list = append(list, object.CompletePart{Number: first + i, ETag: `"` + o.ETag + `"`})
	}
	return list
}

// noSuchUpload fails t unless err is NoSuchUpload.
func noSuchUpload(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(errors.NotExist, err) || !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Errorf("%s: %v; want NoSuchUpload", what, err)
	}
}

// TestMultipartStaleReplicaComplete is issue 12's data loss: a replica misses the later
// parts and the completion of an upload, returns with the upload still pending, and a
// completion retried with that replica's part list must not replace the acknowledged
// object (before the fix, the stale replica committed a newer, truncated version, the
// gateway answered "nothing was acknowledged", and sync spread the truncated version).
// Afterwards: a retry with the original list answers the original result and writes
// nothing, every operation on the upload is NoSuchUpload on every gateway, and once hints
// and sync ran, every replica holds the full object and no replica the stale upload.
func TestMultipartStaleReplicaComplete(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const key = "mp/stale"
	const stale = 2
	g := c.nodes[0].gw
	id, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	p := [][]byte{randBody(41, 3<<10), randBody(42, 3<<10), randBody(43, 1<<10)}
	whole := bytes.Join(p, nil)
	list := mpuParts(t, g, "b", key, id, 1, p[0])
	if !waitFor(2*time.Second, func() bool {
		ps, _, err := c.nodes[stale].store.ListParts("b", key, id, 0, 10)
		return err == nil && len(ps) == 1
	}) {
		t.Fatal("the replica never got part 1")
	}
	c.stop(stale)
	list = append(list, mpuParts(t, g, "b", key, id, 2, p[1], p[2])...)
	// While the upload is in progress, its parts are listed from every replica: the
	// returning one's gap does not hide parts 2 and 3.
	c.restart(stale)
	for i, nd := range c.nodes {
		ps, trunc, err := nd.gw.ListParts(ctx, "b", key, id, 0, 10)
		if err != nil || trunc || len(ps) != 3 {
			t.Fatalf("ListParts via node %d with a replica missing parts: %d parts, %v, %v; want 3", i, len(ps), trunc, err)
		}
		if ps, trunc, err := nd.gw.ListParts(ctx, "b", key, id, 1, 1); err != nil || !trunc || len(ps) != 1 || ps[0].Number != 2 {
			t.Fatalf("ListParts page after 1 via node %d: %+v, %v, %v; want part 2, truncated", i, ps, trunc, err)
		}
	}
	c.stop(stale)
	o, err := g.CompleteUpload(ctx, "b", key, id, list, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.restart(stale)
	if _, err := c.nodes[stale].store.Upload("b", key, id); err != nil {
		t.Fatalf("the returning replica should still hold the stale upload: %v", err)
	}

	// The completion retried with the stale replica's part list: NoSuchUpload, no new version.
	_, err = c.nodes[stale].gw.CompleteUpload(ctx, "b", key, id, list[:1], 0, nil)
	noSuchUpload(t, "completion with the stale replica's part list", err)
	for _, r := range c.replicaStates(0, "b", key) {
		if r.HLC > o.HLC {
			t.Fatalf("replica %s has a version newer than the acknowledged one: %+v", r.Node, r)
		}
	}
	// The same completion retried: the original answer, nothing written.
	for i, nd := range c.nodes {
		r, err := nd.gw.CompleteUpload(ctx, "b", key, id, list, 0, nil)
		if err != nil || r.ETag != o.ETag || r.HLC != o.HLC || r.Size != int64(len(whole)) {
			t.Fatalf("retried completion via node %d: %+v, %v; want ETag %s version %d", i, r, err, o.ETag, o.HLC)
		}
	}
	// Every other operation on the ended upload is NoSuchUpload on every gateway.
	for i, nd := range c.nodes {
		_, _, err := nd.gw.ListParts(ctx, "b", key, id, 0, 10)
		noSuchUpload(t, fmt.Sprintf("ListParts via node %d", i), err)
		_, err = putPart(ctx, nd.gw, "b", key, id, 4, []byte("late"))
		noSuchUpload(t, fmt.Sprintf("UploadPart via node %d", i), err)
		_, err = nd.gw.CompleteUpload(ctx, "b", key, id, list[1:], 0, nil)
		noSuchUpload(t, fmt.Sprintf("completion with another list via node %d", i), err)
		noSuchUpload(t, fmt.Sprintf("abort via node %d", i), nd.gw.AbortUpload(ctx, "b", key, id))
	}

	c.runHints(0, 20*time.Millisecond)
	var rs []ReplicaState
	if !waitFor(5*time.Second, func() bool {
		rs = c.replicaStates(0, "b", key)
		return converged(rs, o.HLC, false) && c.hints(0) == 0
	}) {
		t.Fatalf("replicas after hints: %+v, %d hints left", rs, c.hints(0))
	}
	c.syncAll()
	want := md5.Sum(whole)
	for i, nd := range c.nodes {
		if _, err := nd.store.Upload("b", key, id); !errors.Is(errors.NotExist, err) {
			t.Errorf("node %d still holds the upload: %v", i, err)
		}
		got, err := storeRead(nd.store, "b", key)
		if err != nil || md5.Sum(got) != want {
			t.Errorf("node %d's replica: %d bytes, %v; want the full object", i, len(got), err)
		}
		got, _, err = get(ctx, nd.gw, "b", key, 0, -1)
		if err != nil || md5.Sum(got) != want {
			t.Errorf("read via node %d: %d bytes, %v; want the full object", i, len(got), err)
		}
		if ids := uploadsOf(t, nd.gw, "b", key); len(ids) != 0 {
			t.Errorf("uploads listed via node %d: %q", i, ids)
		}
	}
	if rs := c.replicaStates(1, "b", key); !converged(rs, o.HLC, false) {
		t.Errorf("replicas after sync: %+v", rs)
	}
}

// hints is the number of entries in node i's hint queue.
func (c *testCluster) hints(i int) int64 { return c.nodes[i].hints.Len() }

// TestMultipartStaleUploadSync: a replica that missed an upload's completion and abort,
// and whose hints were lost, drops the stale uploads and their parts in its next sync round.
func TestMultipartStaleUploadSync(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const key = "mp/sync"
	const stale = 1
	g := c.nodes[0].gw
	done, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	aborted, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	list := mpuParts(t, g, "b", key, done, 1, randBody(51, 2<<10))
	mpuParts(t, g, "b", key, aborted, 1, randBody(52, 2<<10))
	if !waitFor(2*time.Second, func() bool {
		a, _, err1 := c.nodes[stale].store.ListParts("b", key, done, 0, 10)
		b, _, err2 := c.nodes[stale].store.ListParts("b", key, aborted, 0, 10)
		return err1 == nil && err2 == nil && len(a) == 1 && len(b) == 1
	}) {
		t.Fatal("the replica never got the parts")
	}
	c.stop(stale)
	o, err := g.CompleteUpload(ctx, "b", key, done, list, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.AbortUpload(ctx, "b", key, aborted); err != nil {
		t.Fatal(err)
	}
	c.restart(stale)
	st, err := c.nodes[stale].rep.Sync(ctx)
	if err != nil || st.UploadsEnded != 2 {
		t.Fatalf("sync on the returning replica: %+v, %v; want 2 uploads ended", st, err)
	}
	for _, id := range []string{done, aborted} {
		if _, err := c.nodes[stale].store.Upload("b", key, id); !errors.Is(errors.NotExist, err) {
			t.Errorf("upload %s still held: %v", id, err)
		}
	}
	if e, err := c.nodes[stale].store.UploadEnd("b", key, done); err != nil || e.State != object.UploadCompleted || e.Result.HLC != o.HLC {
		t.Errorf("end record of the completed upload: %+v, %v", e, err)
	}
	for i, nd := range c.nodes {
		if ids := uploadsOf(t, nd.gw, "b", key); len(ids) != 0 {
			t.Errorf("uploads listed via node %d: %q", i, ids)
		}
	}
	if rs := c.replicaStates(0, "b", key); !converged(rs, o.HLC, false) {
		t.Errorf("replicas after sync: %+v", rs)
	}

	// An upload only this node holds, initiated longer ago than end records live, ended
	// while it was away that long: it is dropped. A young one is kept.
	old, young := store.NewUploadID(), store.NewUploadID()
	long := time.Now().Add(-store.UploadEndLifetime - time.Hour).UnixNano()
	for id, mod := range map[string]int64{old: long, young: time.Now().UnixNano()} {
		if err := c.nodes[stale].store.CreateUploadID("b", key, id, &object.Object{ModTime: mod}); err != nil {
			t.Fatal(err)
		}
	}
	st, err = c.nodes[stale].rep.Sync(ctx)
	if err != nil || st.UploadsEnded != 1 {
		t.Fatalf("sync with an expired stale upload: %+v, %v; want 1 upload ended", st, err)
	}
	if _, err := c.nodes[stale].store.Upload("b", key, old); !errors.Is(errors.NotExist, err) {
		t.Errorf("the expired stale upload is still held: %v", err)
	}
	if _, err := c.nodes[stale].store.Upload("b", key, young); err != nil {
		t.Errorf("the young upload was dropped: %v", err)
	}
}

// TestMultipartCompleteTwoPhase: with fewer than W replicas holding every listed part,
// the completion is not sent and its error says that nothing was written.
func TestMultipartCompleteTwoPhase(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const key = "mp/twophase"
	g := c.nodes[0].gw
	id, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	list := mpuParts(t, g, "b", key, id, 1, randBody(61, 1<<10))
	c.stop(1)
	c.stop(2)
	_, err = g.CompleteUpload(ctx, "b", key, id, list, 0, nil)
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Unknown {
		t.Fatalf("completion with one replica reachable: %v; want a quorum error saying nothing was written", err)
	}
	if _, err := c.nodes[0].store.StatObject("b", key); !errors.Is(errors.NotExist, err) {
		t.Errorf("the reachable replica committed: %v", err)
	}
	if _, err := c.nodes[0].store.Upload("b", key, id); err != nil {
		t.Errorf("the upload is gone from the reachable replica: %v", err)
	}
	// An abort of a completed upload is NoSuchUpload, as in S3; so is an abort retried.
	c.restart(1)
	c.restart(2)
	o, err := g.CompleteUpload(ctx, "b", key, id, list, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Overwritten since: a retried completion still answers the recorded result and
	// writes nothing.
	w := mustPut(t, c.nodes[1].gw, "b", key, []byte("newer"))
	for i, nd := range c.nodes {
		r, err := nd.gw.CompleteUpload(ctx, "b", key, id, list, 0, nil)
		if err != nil || r.ETag != o.ETag || r.HLC != o.HLC {
			t.Errorf("retried completion of an overwritten upload via node %d: %+v, %v; want ETag %s version %d", i, r, err, o.ETag, o.HLC)
		}
	}
	if !waitFor(2*time.Second, func() bool { return converged(c.replicaStates(0, "b", key), w.HLC, false) }) {
		t.Errorf("replicas after retried completions: %+v; want the overwrite (version %d) everywhere", c.replicaStates(0, "b", key), w.HLC)
	}
	noSuchUpload(t, "abort of a completed upload", g.AbortUpload(ctx, "b", key, id))
	id2, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].gw.AbortUpload(ctx, "b", key, id2); err != nil {
		t.Fatal(err)
	}
	for i, nd := range c.nodes {
		noSuchUpload(t, fmt.Sprintf("abort retried via node %d", i), nd.gw.AbortUpload(ctx, "b", key, id2))
		_, err := nd.gw.CompleteUpload(ctx, "b", key, id2, list, 0, nil)
		noSuchUpload(t, fmt.Sprintf("completion of an aborted upload via node %d", i), err)
		_, _, err = nd.gw.ListParts(ctx, "b", key, id2, 0, 10)
		noSuchUpload(t, fmt.Sprintf("ListParts of an aborted upload via node %d", i), err)
		_, err = putPart(ctx, nd.gw, "b", key, id2, 1, []byte("x"))
		noSuchUpload(t, fmt.Sprintf("UploadPart of an aborted upload via node %d", i), err)
	}
}

// TestQuorumFailureWording: a quorum error says the outcome is unknown exactly when some
// replica applied the write or may have.
func TestQuorumFailureWording(t *testing.T) {
	a, b, c := topology.Target{ID: "a"}, topology.Target{ID: "b"}, topology.Target{ID: "c"}
	down := errors.E(errors.Transient, fmt.Errorf("node c is down: %w", errNotSent))
	timeout := errors.E(errors.Transient, "node b: context deadline exceeded")
	refused := errors.E(errors.Invalid, "part 2: invalid part")
	for _, tc := range []struct {
		name        string
		ok, failed  []replicaResult
		wantUnknown bool
		wantQuorum  bool
	}{
		{"one applied, two down", []replicaResult{{t: a}}, []replicaResult{{t: b, err: down}, {t: c, err: down}}, true, true},
		{"none applied, all down", nil, []replicaResult{{t: a, err: down}, {t: b, err: down}, {t: c, err: down}}, false, true},
		{"one refused, two down", nil, []replicaResult{{t: a, err: refused}, {t: b, err: down}, {t: c, err: down}}, false, true},
		{"one timed out", nil, []replicaResult{{t: a, err: refused}, {t: b, err: timeout}, {t: c, err: down}}, true, true},
		{"one not answered yet", nil, []replicaResult{{t: a, err: refused}, {t: b, err: refused}}, true, true},
		{"all refused", nil, []replicaResult{{t: a, err: refused}, {t: b, err: refused}, {t: c, err: refused}}, false, false},
	} {
		err := quorumFailure("write", tc.ok, tc.failed, 2, 3)
		var qe *QuorumError
		if isQ := errors.As(err, &qe); isQ != tc.wantQuorum || (isQ && qe.Unknown != tc.wantUnknown) {
			t.Errorf("%s: %v; want quorum error %v, unknown outcome %v", tc.name, err, tc.wantQuorum, tc.wantUnknown)
		}
	}
}

// TestHintsUploadEnd: upload-end hints are durable, one per (node, upload), apart from the
// object hints of the same key.
func TestHintsUploadEnd(t *testing.T) {
	dir := t.TempDir()
	h, err := hints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &object.UploadEnd{Bucket: "b", Key: "k\x00x", UploadID: store.NewUploadID(), State: object.UploadAborted, Ended: 1}
	for range 2 {
		if err := h.AddUploadEnd("n2", e); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Add("n2", "b", "k\x00x", 7); err != nil {
		t.Fatal(err)
	}
	h.Close()
	if h, err = hints.Open(dir); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	es, err := h.Entries(10, func(string) bool { return false })
	if err != nil || len(es) != 2 || h.Len() != 2 {
		t.Fatalf("entries after reopening: %+v, %v, Len %d; want an object hint and an end hint", es, err, h.Len())
	}
	var end hints.Entry
	for _, x := range es {
		if x.End != nil {
			end = x
		} else if x.Bucket != "b" || x.Key != "k\x00x" || x.Version != 7 {
			t.Errorf("object hint: %+v", x)
		}
	}
	if end.End == nil || end.Node != "n2" || end.End.UploadID != e.UploadID || end.End.Key != e.Key || end.End.State != object.UploadAborted {
		t.Fatalf("end hint: %+v", end)
	}
	h.Done(end)
	if h.Len() != 1 {
		t.Errorf("Len after delivering the end hint: %d; want 1", h.Len())
	}
}

// TestMultipartCompleteLosesToNewer: a completion whose key already holds a newer write
// (a PUT through another gateway whose version is later) leaves that write in place, and
// answers the upload's own object (its multipart ETag and version), not the newer write's.
func TestMultipartCompleteLosesToNewer(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, clusterConfig{})
	c.createBucket("b")
	const key = "mp/loses"
	// The coordinator is the node that holds no copy of the key: the newer write, put
	// on the three holders with a version ahead of every clock, never reaches its clock,
	// so its completion's version is older.
	_, ts, err := c.nodes[0].gw.topo.Replicas("b", key)
	if err != nil {
		t.Fatal(err)
	}
	holds := map[string]bool{}
	for _, tg := range ts {
		holds[tg.ID] = true
	}
	var g *Gateway
	var holders []*testNode
	for _, nd := range c.nodes {
		if holds[nd.id] {
			holders = append(holders, nd)
		} else {
			g = nd.gw
		}
	}
	id, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	list := mpuParts(t, g, "b", key, id, 1, randBody(62, 1<<10))
	future := g.clock.Next() + 1<<40
	for _, nd := range holders {
		if _, err := nd.store.PutObject(ctx, "b", key, &object.Object{}, strings.NewReader("newer"), 5, object.PutOptions{Version: future}); err != nil {
			t.Fatal(err)
		}
	}
	o, err := g.CompleteUpload(ctx, "b", key, id, list, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(o.ETag, "-1") || o.HLC == future || o.Size != 1<<10 {
		t.Fatalf("completion answered %+v; want the upload's object (ETag ...-1, 1 KiB), not the newer write", o)
	}
	for _, nd := range holders {
		got, err := nd.store.StatObject("b", key)
		if err != nil || got.HLC != future || got.Size != 5 {
			t.Errorf("%s holds %+v, %v; want the newer write kept", nd.id, got, err)
		}
	}
}

// TestCreateUploadQuorumFailure: a create that fails its quorum leaves no upload behind.
// The client never learns the id, so an upload left on the replicas that stored it would
// be listed until someone aborted it; the gateway sends every replica an aborted end
// record (the ones it cannot reach get it by hinted retry), and a create still on its way
// to a replica is refused there.
func TestCreateUploadQuorumFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults func(c *testCluster)
	}{
		// node1 and node2 apply the create, but their answers are lost.
		{"answers lost", func(c *testCluster) {
			c.faults(c.nodes[0].id, c.nodes[1].id).LoseAnswers()
			c.faults(c.nodes[0].id, c.nodes[2].id).LoseAnswers()
		}},
		// node1 applies it, its answer lost; node2 is not reached at all.
		{"answer lost, replica unreachable", func(c *testCluster) {
			c.faults(c.nodes[0].id, c.nodes[1].id).LoseAnswers()
			c.faults(c.nodes[0].id, c.nodes[2].id).Partition()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, 3, clusterConfig{})
			c.createBucket("b")
			tc.faults(c)
			if id, err := c.nodes[0].gw.CreateUpload(ctx, "b", "k", &object.Object{}); err == nil {
				t.Fatalf("create with two replicas failing answered %s, want a quorum error", id)
			}
			c.healAll()
			c.runHints(0, 10*time.Millisecond)
			if !waitFor(5*time.Second, func() bool { return c.hints(0) == 0 }) {
				t.Fatalf("node0 still has %d hints queued", c.hints(0))
			}
			for i, nd := range c.nodes {
				var pending []object.PendingUpload
				if err := nd.store.PendingUploads(func(u object.PendingUpload) error { pending = append(pending, u); return nil }); err != nil {
					t.Fatal(err)
				}
				if len(pending) != 0 {
					t.Errorf("node%d holds %d pending uploads after the failed create: %+v", i, len(pending), pending)
				}
				l, err := nd.gw.ListUploads(ctx, "b", object.UploadListOptions{})
				if err != nil || len(l.Uploads) != 0 {
					t.Errorf("ListUploads via node%d: %+v, %v; want no uploads", i, l, err)
				}
			}
		})
	}
}
