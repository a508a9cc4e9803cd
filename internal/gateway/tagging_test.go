package gateway

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// putTagged stores body as bucket/key through g with the given tags.
func putTagged(t *testing.T, g *Gateway, bucket, key string, body []byte, tags [][2]string) *object.Object {
	t.Helper()
	src, fin := md5Finish(bytes.NewReader(body))
	o, err := g.PutObject(context.Background(), bucket, key, &object.Object{Tags: tags}, src, int64(len(body)), object.PutOptions{Finish: fin})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return o
}

// storeRecord is node i's own record of bucket/key.
func (c *testCluster) storeRecord(i int, bucket, key string) *object.Object {
	c.tb.Helper()
	o, err := c.nodes[i].store.StatVersion(bucket, key)
	if err != nil {
		c.tb.Fatalf("record of %s on %s: %v", key, c.nodes[i].id, err)
	}
	return o
}

// tagsConverged reports whether every node's own record of bucket/key is version v with
// the tags want.
func (c *testCluster) tagsConverged(bucket, key string, v uint64, want [][2]string) bool {
	for i := range c.nodes {
		o, err := c.nodes[i].store.StatVersion(bucket, key)
		if err != nil || o.HLC != v || !slices.Equal(o.Tags, want) {
			return false
		}
	}
	return true
}

// TestClusterTagging: tags written with an object and changed through one gateway are
// read through another and held by every replica; a change keeps the version, body,
// ETag and modification time.
func TestClusterTagging(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	body := randBody(1, 300<<10) // chunked
	first := [][2]string{{"a", "1"}}
	o := putTagged(t, c.nodes[0].gw, "b", "k", body, first)
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, first) }) {
		t.Fatalf("tags written with the object are not on every replica: %+v", c.replicaStates(0, "b", "k"))
	}
	tags := [][2]string{{"env", "prod"}, {"team", "storage"}}
	if _, err := c.nodes[1].gw.SetObjectTags(ctx, "b", "k", tags); err != nil {
		t.Fatal(err)
	}
	st, err := c.nodes[2].gw.StatObject(ctx, "b", "k")
	if err != nil || st.HLC != o.HLC || !slices.Equal(st.Tags, tags) || st.MetaHLC == 0 || st.ETag != o.ETag || st.ModTime != o.ModTime {
		t.Fatalf("stat through another gateway: %+v, %v", st, err)
	}
	got, info, err := get(ctx, c.nodes[0].gw, "b", "k", 0, -1)
	if err != nil || !bytes.Equal(got, body) || !slices.Equal(info.Tags, tags) {
		t.Fatalf("read after tagging: %v, tags %q", err, info.Tags)
	}
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, tags) }) {
		t.Fatalf("the change is not on every replica: %+v", c.replicaStates(0, "b", "k"))
	}
	if _, err := c.nodes[2].gw.SetObjectTags(ctx, "b", "k", nil); err != nil {
		t.Fatal(err)
	}
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, nil) }) {
		t.Fatalf("the removal is not on every replica: %+v", c.replicaStates(0, "b", "k"))
	}
	if _, err := c.nodes[0].gw.SetObjectTags(ctx, "b", "nothing", tags); !isNoSuchKey(err) {
		t.Fatalf("tagging a missing key: %v", err)
	}
}

func isNoSuchKey(err error) bool { return err != nil && errors.IsErr(err, object.ErrNoSuchKey) }

// TestClusterTaggingConverges: a replica that was down while the tags changed gets the
// change from the hint queue, and one that missed a later change gets it from
// anti-entropy, both without a copy of the body (its record keeps its version id).
func TestClusterTaggingConverges(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	o := putTagged(t, c.nodes[0].gw, "b", "k", randBody(2, 200<<10), nil)
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, nil) }) {
		t.Fatal("the object did not reach every replica")
	}
	const down = 2
	vid := c.storeRecord(down, "b", "k").VersionID

	// Hinted retry.
	c.stop(down)
	tags := [][2]string{{"phase", "one"}}
	if _, err := c.nodes[0].gw.SetObjectTags(ctx, "b", "k", tags); err != nil {
		t.Fatalf("tagging with one replica down (W=2): %v", err)
	}
	if rec := c.storeRecord(down, "b", "k"); len(rec.Tags) != 0 {
		t.Fatalf("the stopped replica got the change: %+v", rec)
	}
	if len(c.hintsFor(0, c.nodes[down].id, "b", "k")) != 1 {
		t.Fatalf("no hint queued for the stopped replica: %+v", c.hintsFor(0, c.nodes[down].id, "b", "k"))
	}
	c.restart(down)
	stop := c.runHints(0, 50*time.Millisecond)
	if !waitFor(10*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, tags) }) {
		t.Fatalf("hinted retry did not bring the change: %+v", c.replicaStates(0, "b", "k"))
	}
	stop()
	if rec := c.storeRecord(down, "b", "k"); rec.VersionID != vid {
		t.Fatal("the body was copied again for a tagging change")
	}

	// Anti-entropy: the hint is lost (the queue is not run), sync finds the change.
	c.stop(down)
	later := [][2]string{{"phase", "two"}}
	if _, err := c.nodes[1].gw.SetObjectTags(ctx, "b", "k", later); err != nil {
		t.Fatal(err)
	}
	c.restart(down)
	st, err := c.nodes[down].rep.Sync(ctx)
	if err != nil || st.Errors != 0 || st.Copied != 1 {
		t.Fatalf("sync: %+v, %v; want one record brought up to date", st, err)
	}
	if !c.tagsConverged("b", "k", o.HLC, later) {
		t.Fatalf("sync did not bring the change: %+v", c.replicaStates(0, "b", "k"))
	}
	if rec := c.storeRecord(down, "b", "k"); rec.VersionID != vid {
		t.Fatal("sync copied the body again for a tagging change")
	}
	// Converged: equal digests, nothing compared.
	st, err = c.nodes[down].rep.Sync(ctx)
	if err != nil || st.Differing != 0 || st.Copied != 0 {
		t.Fatalf("second sync: %+v, %v; want digests equal everywhere", st, err)
	}
}

// TestClusterTaggingRacesOverwrite: a tagging change for version V that reaches the
// holders after V2 was written is ordered before V2: it succeeds, changes nothing, and
// V2 (its body, without tags) stays everywhere; old data never comes back.
func TestClusterTaggingRacesOverwrite(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	v1 := putTagged(t, c.nodes[0].gw, "b", "k", []byte("version one"), [][2]string{{"v", "1"}})
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", v1.HLC, [][2]string{{"v", "1"}}) }) {
		t.Fatal("v1 did not reach every replica")
	}
	// Node 1's gateway reaches every holder (itself included) slowly: its read of the
	// current version starts at once and answers V1 after d; from d/2 on, its calls hang
	// until healed, so its change for V1 waits while V2 is written through node 0 (at 3d,
	// well after the read), and reaches the holders after V2.
	const d = 400 * time.Millisecond
	for _, to := range c.nodes {
		c.faults(c.nodes[1].id, to.id).Delay(d)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.nodes[1].gw.SetObjectTags(ctx, "b", "k", [][2]string{{"late", "tag"}})
		errc <- err
	}()
	time.Sleep(d / 2)
	for _, to := range c.nodes {
		f := c.faults(c.nodes[1].id, to.id)
		f.Delay(0)
		f.Hang()
	}
	time.Sleep(3*d - d/2)
	if !c.tagsConverged("b", "k", v1.HLC, [][2]string{{"v", "1"}}) {
		t.Fatalf("the change reached a holder before V2 was written: %+v", c.replicaStates(0, "b", "k"))
	}
	v2body := []byte("version two")
	v2 := putTagged(t, c.nodes[0].gw, "b", "k", v2body, nil)
	c.healAll()
	if err := <-errc; err != nil {
		t.Fatalf("a tagging change overtaken by a newer version: %v; want success (ordered before it)", err)
	}
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", v2.HLC, nil) }) {
		t.Fatalf("replicas after the race: %+v; want V2 without tags everywhere", c.replicaStates(0, "b", "k"))
	}
	for i := range c.nodes {
		got, info, err := get(ctx, c.nodes[i].gw, "b", "k", 0, -1)
		if err != nil || !bytes.Equal(got, v2body) || info.HLC != v2.HLC || len(info.Tags) != 0 {
			t.Fatalf("read via %s: %q %+v %v; want V2", c.nodes[i].id, got, info, err)
		}
	}
	// And anti-entropy agrees: nothing to copy anywhere.
	for _, st := range c.syncAll() {
		if st.Copied != 0 {
			t.Fatalf("sync after the race copied %d records", st.Copied)
		}
	}
}

// TestClusterTaggingErasureCoded: an erasure-coded object's tags live in its record on
// the key's holders like any object's; a change keeps the stripes (version and layout),
// and re-placing the object into another class by policy apply keeps its tags.
func TestClusterTaggingErasureCoded(t *testing.T) {
	ctx := context.Background()
	c := newECCluster(t)
	body := randBody(7, 1<<20+5)
	src, fin := md5Finish(bytes.NewReader(body))
	o, err := c.nodes[0].gw.PutObject(ctx, "b", "k.root", &object.Object{StorageClass: "EC42", Tags: [][2]string{{"a", "1"}}}, src, int64(len(body)), object.PutOptions{Finish: fin})
	if err != nil {
		t.Fatal(err)
	}
	tags := [][2]string{{"class", "ec"}}
	if _, err := c.nodes[3].gw.SetObjectTags(ctx, "b", "k.root", tags); err != nil {
		t.Fatal(err)
	}
	for i := range c.nodes {
		got, info, err := get(ctx, c.nodes[i].gw, "b", "k.root", 0, -1)
		if err != nil || !bytes.Equal(got, body) || !info.Striped || info.HLC != o.HLC || !slices.Equal(info.Tags, tags) {
			t.Fatalf("read via %s: %v, %+v", c.nodes[i].id, err, info)
		}
	}
	gen := c.applyPolicy("b", "*.root => STANDARD\n")
	if left, moved := c.applyAll("b", gen); left != 0 || moved != 1 {
		t.Fatalf("apply: %d left, %d moved", left, moved)
	}
	for i := range c.nodes {
		got, info, err := get(ctx, c.nodes[i].gw, "b", "k.root", 0, -1)
		if err != nil || !bytes.Equal(got, body) || info.Striped || info.HLC != o.HLC || !slices.Equal(info.Tags, tags) {
			t.Fatalf("read via %s after re-placing: %v, %+v", c.nodes[i].id, err, info)
		}
	}
}

// TestClusterTaggingReadRepair: with R=2 a read sees the latest change of the tags even
// through a gateway whose own replica missed it, and queues that replica's repair.
func TestClusterTaggingReadRepair(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: 2, D: 2}})
	c.createBucket("b")
	o := putTagged(t, c.nodes[0].gw, "b", "k", []byte("body"), nil)
	if !waitFor(2*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, nil) }) {
		t.Fatal("the object did not reach every replica")
	}
	const stale = 2
	c.stop(stale)
	tags := [][2]string{{"k", "v"}}
	if _, err := c.nodes[0].gw.SetObjectTags(ctx, "b", "k", tags); err != nil {
		t.Fatal(err)
	}
	c.restart(stale)
	st, err := c.nodes[stale].gw.StatObject(ctx, "b", "k")
	if err != nil || !slices.Equal(st.Tags, tags) {
		t.Fatalf("stat through the stale node's gateway: %+v, %v", st, err)
	}
	if es := c.hintsFor(stale, c.nodes[stale].id, "b", "k"); len(es) != 1 || es[0].Version != o.HLC {
		t.Fatalf("read repair hints: %+v", es)
	}
	c.runHints(stale, 50*time.Millisecond)
	if !waitFor(10*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, tags) }) {
		t.Fatalf("read repair did not converge: %+v", c.replicaStates(0, "b", "k"))
	}
}

// TestClusterTaggingQuorum: a holder that missed the version answers so and is repaired
// (the change still has its W); with only one holder reachable the change fails its
// quorum with a QuorumError that says the local holder may have applied it, and one that
// reached no holder says nothing was changed.
func TestClusterTaggingQuorum(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const late = 2
	c.stop(late)
	o := putTagged(t, c.nodes[0].gw, "b", "k", []byte("body"), nil)
	c.restart(late) // without its hint delivered: it has no record of k
	// Node 0's queue has the write's hint for the late node; drop it to see the tagging
	// update's own.
	for _, e := range c.hintsFor(0, c.nodes[late].id, "b", "k") {
		c.nodes[0].hints.Done(e)
	}
	tags := [][2]string{{"t", "1"}}
	if _, err := c.nodes[1].gw.SetObjectTags(ctx, "b", "k", tags); err != nil {
		t.Fatalf("tagging with one holder lacking the version: %v", err)
	}
	if es := c.hintsFor(1, c.nodes[late].id, "b", "k"); len(es) != 1 || es[0].Version != o.HLC {
		t.Fatalf("hints for the holder that lacks the version: %+v", es)
	}
	c.runHints(1, 50*time.Millisecond)
	if !waitFor(10*time.Second, func() bool { return c.tagsConverged("b", "k", o.HLC, tags) }) {
		t.Fatalf("the holder that lacked the version did not get it with its tags: %+v", c.replicaStates(0, "b", "k"))
	}

	c.stop(1)
	c.stop(2)
	_, err := c.nodes[0].gw.SetObjectTags(ctx, "b", "k", [][2]string{{"t", "2"}})
	var qe *QuorumError
	if !errors.As(err, &qe) || !qe.Unknown || qe.What != "tagging update" {
		t.Fatalf("tagging with one of three holders: %v; want a quorum error, outcome unknown", err)
	}
	// Through a gateway that reaches no holder at all (its own is partitioned too), the
	// read fails first: nothing was changed.
	for _, nd := range c.nodes {
		c.faults(c.nodes[0].id, nd.id).Partition()
	}
	if _, err := c.nodes[0].gw.SetObjectTags(ctx, "b", "k", nil); !errors.As(err, &qe) || qe.Unknown {
		t.Fatalf("tagging with no holder: %v; want a quorum error, nothing changed", err)
	}
}
