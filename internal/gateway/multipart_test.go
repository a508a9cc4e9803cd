package gateway

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// putPart uploads part n through g with an MD5 ETag.
func putPart(ctx context.Context, g *Gateway, bucket, key, id string, n int, body []byte) (*object.Object, error) {
	src, fin := md5Finish(bytes.NewReader(body))
	return g.PutPart(ctx, bucket, key, id, n, src, int64(len(body)), fin)
}

// uploadsOf returns the ids of bucket's pending uploads of key, listed through g.
func uploadsOf(t *testing.T, g *Gateway, bucket, key string) []string {
	t.Helper()
	ul, err := g.ListUploads(context.Background(), bucket, object.UploadListOptions{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, u := range ul.Uploads {
		if u.Key == key {
			ids = append(ids, u.UploadID)
		}
	}
	return ids
}

// TestMultipart runs uploads through different gateways (replicas and a non-replica):
// the completed object reads back byte-identical everywhere, pending uploads are listed
// from every node until they are completed or aborted.
func TestMultipart(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 4, clusterConfig{})
	c.createBucket("b")
	const key = "mp/object"
	reps, others := c.replicaSet("b", key)
	if len(reps) != 3 || len(others) != 1 {
		t.Fatalf("placement: %v %v", reps, others)
	}
	nr := others[0]
	const partSize = 5<<20 + 1
	parts := [][]byte{randBody(21, partSize), randBody(22, partSize)}
	whole := append(append([]byte{}, parts[0]...), parts[1]...)

	id, err := c.nodes[nr].gw.CreateUpload(ctx, "b", key, &object.Object{ContentType: "video/mp4", UserMeta: [][2]string{{"k", "v"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		if got := uploadsOf(t, nd.gw, "b", key); len(got) != 1 || got[0] != id {
			t.Fatalf("uploads listed via %s before completion: %q; want [%s]", nd.id, got, id)
		}
	}
	var list []object.CompletePart
	md := md5.New()
	for i, p := range parts {
		via := c.nodes[reps[i]].gw // part 1 via the primary, part 2 via the second replica
		o, err := putPart(ctx, via, "b", key, id, i+1, p)
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		if o.ETag != md5Hex(p) || o.Size != int64(len(p)) {
			t.Fatalf("part %d: %+v", i+1, o)
		}
		sum := md5.Sum(p)
		md.Write(sum[:])
		list = append(list, object.CompletePart{Number: i + 1, ETag: `"` + o.ETag + `"`})
	}
	ps, trunc, err := c.nodes[nr].gw.ListParts(ctx, "b", key, id, 0, 10)
	if err != nil || trunc || len(ps) != 2 || ps[0].Number != 1 || ps[1].Number != 2 || ps[1].Size != partSize {
		t.Fatalf("ListParts: %+v %v %v", ps, trunc, err)
	}
	// Every replica holds both parts before completion (straggling writes aside).
	for _, r := range reps {
		if !waitFor(2*time.Second, func() bool {
			ps, _, err := c.nodes[r].store.ListParts("b", key, id, 0, 10)
			return err == nil && len(ps) == 2
		}) {
			t.Fatalf("replica %s does not hold both parts", c.nodes[r].id)
		}
	}
	o, err := c.nodes[reps[2]].gw.CompleteUpload(ctx, "b", key, id, list, 5<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantETag := fmt.Sprintf("%s-2", hex.EncodeToString(md.Sum(nil)))
	if o.ETag != wantETag || o.Size != int64(len(whole)) || o.HLC == 0 {
		t.Fatalf("completed: ETag %q size %d HLC %d; want %q %d", o.ETag, o.Size, o.HLC, wantETag, len(whole))
	}
	var rs []ReplicaState
	if !waitFor(2*time.Second, func() bool {
		rs = c.replicaStates(nr, "b", key)
		return converged(rs, o.HLC, false)
	}) {
		t.Fatalf("replicas after completion: %+v", rs)
	}
	for _, r := range rs {
		if r.ETag != wantETag || r.Size != int64(len(whole)) {
			t.Errorf("replica %s: %+v", r.Node, r)
		}
	}
	for _, nd := range c.nodes {
		got, info, err := get(ctx, nd.gw, "b", key, 0, -1)
		if err != nil {
			t.Fatalf("read via %s: %v", nd.id, err)
		}
		if !bytes.Equal(got, whole) {
			t.Errorf("read via %s: bytes differ", nd.id)
		}
		if info.ContentType != "video/mp4" || len(info.UserMeta) != 1 || info.ETag != wantETag || len(info.PartSizes) != 2 {
			t.Errorf("record via %s: %+v", nd.id, info)
		}
		// A range across the part boundary.
		got, _, err = get(ctx, nd.gw, "b", key, partSize-10, 20)
		if err != nil || !bytes.Equal(got, whole[partSize-10:partSize+10]) {
			t.Errorf("range across the part boundary via %s: %v", nd.id, err)
		}
		if ids := uploadsOf(t, nd.gw, "b", key); len(ids) != 0 {
			t.Errorf("uploads listed via %s after completion: %q", nd.id, ids)
		}
	}

	// An aborted upload disappears everywhere and takes no more parts.
	id2, err := c.nodes[reps[1]].gw.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := putPart(ctx, c.nodes[nr].gw, "b", key, id2, 1, parts[0][:1<<10]); err != nil {
		t.Fatal(err)
	}
	if got := uploadsOf(t, c.nodes[0].gw, "b", key); len(got) != 1 || got[0] != id2 {
		t.Fatalf("uploads before abort: %q", got)
	}
	if err := c.nodes[nr].gw.AbortUpload(ctx, "b", key, id2); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		if ids := uploadsOf(t, nd.gw, "b", key); len(ids) != 0 {
			t.Errorf("uploads listed via %s after abort: %q", nd.id, ids)
		}
	}
	for _, r := range reps {
		if _, err := c.nodes[r].store.Upload("b", key, id2); !errors.Is(errors.NotExist, err) {
			t.Errorf("replica %s still has the aborted upload: %v", c.nodes[r].id, err)
		}
	}
	if _, err := putPart(ctx, c.nodes[reps[0]].gw, "b", key, id2, 2, []byte("late")); !errors.Is(errors.NotExist, err) || !errors.IsErr(err, object.ErrNoSuchUpload) {
		t.Errorf("part of an aborted upload: %v; want NoSuchUpload", err)
	}
	// The completed object is untouched by the aborted upload.
	if st, err := c.nodes[nr].gw.StatObject(ctx, "b", key); err != nil || st.HLC != o.HLC {
		t.Errorf("object after the abort: %+v, %v", st, err)
	}
}

// TestListUploadsDefaultMax: ListUploads treats Max <= 0 as 1000 when it merges the
// nodes' answers, so a zero Max must list the pending uploads, not an empty page that
// claims to be truncated (with no marker to continue from).
func TestListUploadsDefaultMax(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	id, err := c.nodes[0].gw.CreateUpload(ctx, "b", "k", &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	ul, err := c.nodes[1].gw.ListUploads(ctx, "b", object.UploadListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ul.Uploads) != 1 || ul.Uploads[0].UploadID != id || ul.Truncated {
		t.Fatalf("ListUploads with Max 0: %d uploads, truncated %v, next key %q; want the one upload %s, not truncated",
			len(ul.Uploads), ul.Truncated, ul.NextKey, id)
	}
}

// TestMultipartReplicaMissedPart: a replica that was down while a part was uploaded cannot
// complete the upload. The completion still succeeds with W=2, and (as multipart.go says)
// that replica must receive the object later by hinted retry; the upload must not stay
// listed as pending after it was completed.
func TestMultipartReplicaMissedPart(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const key = "mp/missed"
	const missed = 2
	g := c.nodes[0].gw
	id, err := g.CreateUpload(ctx, "b", key, &object.Object{})
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := randBody(31, 3<<10), randBody(32, 2<<10)
	o1, err := putPart(ctx, g, "b", key, id, 1, p1)
	if err != nil {
		t.Fatal(err)
	}
	c.stop(missed)
	o2, err := putPart(ctx, g, "b", key, id, 2, p2)
	if err != nil {
		t.Fatalf("part 2 with one replica down: %v", err)
	}
	c.restart(missed)
	o, err := g.CompleteUpload(ctx, "b", key, id, []object.CompletePart{{Number: 1, ETag: o1.ETag}, {Number: 2, ETag: o2.ETag}}, 0, nil)
	if err != nil {
		t.Fatalf("completion with 2 of 3 replicas holding every part: %v", err)
	}
	if ids := uploadsOf(t, g, "b", key); len(ids) != 0 {
		t.Errorf("the completed upload is still listed as pending: %q (left on %s, which missed part 2)", ids, c.nodes[missed].id)
	}
	if es := c.hintsFor(0, c.nodes[missed].id, "b", key); len(es) != 1 || es[0].Version != o.HLC {
		t.Errorf("hints for %s, which could not complete: %+v; want one at version %d", c.nodes[missed].id, es, o.HLC)
	}
	c.runHints(0, 50*time.Millisecond)
	var rs []ReplicaState
	if !waitFor(3*time.Second, func() bool {
		rs = c.replicaStates(0, "b", key)
		return converged(rs, o.HLC, false)
	}) {
		t.Fatalf("the replica that missed a part never received the object: %+v", rs)
	}
}
