package gateway

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/topology"
)

// shardLayout checks that every shard record sits on a node of its stripe in the class's
// current table, and returns how many there are.
func (c *testCluster) shardLayout(t *testing.T, cls clustermap.Class) int {
	t.Helper()
	m := c.maps.Current()
	n := 0
	for _, nd := range c.nodes {
		if nd.gw == nil || nd.srv == nil {
			continue
		}
		tbl, err := nd.gw.topo.ShardTable(m, cls, true)
		if err != nil {
			t.Fatal(err)
		}
		nd.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(e object.VersionEntry) error {
			n++
			ids := tbl.Nodes(placement.Partition(topology.ShardBucket, e.Key, tbl.Partitions()))
			found := false
			for _, id := range ids {
				found = found || id == nd.id
			}
			if !found {
				t.Errorf("shard %s on %s, which is not among its stripe's nodes %v", e.Key, nd.id, ids)
			}
			return nil
		})
	}
	return n
}

// syncUp runs one sync round on every up node and sums what they did.
func (c *testCluster) syncUp(t *testing.T) (total repair.SyncStats) {
	t.Helper()
	for _, nd := range c.nodes {
		if n, _ := c.maps.Current().Node(nd.id); nd.srv != nil && (n.State == clustermap.StateUp || n.State == clustermap.StateDraining) {
			st, err := nd.rep.Sync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			total.ShardsMoved += st.ShardsMoved
			total.ShardsWaiting += st.ShardsWaiting
			total.Rebuilt += st.Rebuilt
			total.Misplaced += st.Misplaced
			total.Unhealable += st.Unhealable
		}
	}
	return total
}

// Shards follow placement: when nodes join, the shards whose stripes now map elsewhere
// are copied to the stripe's new nodes and removed from the old ones (one shard of
// traffic each, no rebuild), leaving exactly one copy of each shard, each on a node of
// its stripe; a draining node hands all its shards off the same way, and only then
// does it count as emptied. Half the objects have stripes named by their version (as
// before feature level 9), half by a tag.
func TestECShardsFollowPlacement(t *testing.T) {
	ctx := context.Background()
	ec := clustermap.Class{Name: "EC42", N: 6, W: 6, R: 4, D: 4, K: 4, M: 2}
	c := newJoiningCluster(t, ec)
	bodies := map[string][]byte{}
	stripes := 0
	for i := range 10 {
		if i == 5 { // k0-k4 named by their version, k5-k9 by a tag (feature level 9)
			c.setLevel(LevelTaggedStripes)
		}
		k := fmt.Sprintf("k%d", i)
		bodies[k] = randBody(uint64(500+i), 64<<10+i*600000)
		stripes += (len(bodies[k]) + 4<<20 - 1) / (4 << 20)
		if _, err := putClass(ctx, c.nodes[i%6].gw, "b", k, "EC42", bodies[k]); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.shardLayout(t, ec); n != stripes*6 {
		t.Fatalf("%d shards for %d stripes of 6", n, stripes)
	}
	check := func(when string) {
		t.Helper()
		for k, body := range bodies {
			for _, i := range []int{0, 7} {
				if got, _, err := get(ctx, c.nodes[i].gw, "b", k, 0, -1); err != nil || !bytes.Equal(got, body) {
					t.Fatalf("%s: %s via %s: %v", when, k, c.nodes[i].id, err)
				}
			}
		}
	}
	for _, id := range []string{"n7", "n8", "n9", "n10"} {
		c.setNode(id, func(n *clustermap.Node) { n.State = clustermap.StateUp })
	}
	st := c.syncUp(t)
	t.Logf("after four nodes joined: %d shards moved, %d rebuilt, %d stripes waiting on moves", st.ShardsMoved, st.Rebuilt, st.Misplaced)
	if st.ShardsMoved == 0 || st.Rebuilt != 0 || st.Unhealable != 0 {
		t.Fatalf("after four nodes joined: %+v; want shards moved and none rebuilt", st)
	}
	if n := c.shardLayout(t, ec); n != stripes*6 {
		t.Fatalf("%d shards after the moves, want %d: copies were left behind or lost", n, stripes*6)
	}
	if st := c.syncUp(t); st.ShardsMoved != 0 || st.Rebuilt != 0 {
		t.Fatalf("a second round still moved %d and rebuilt %d", st.ShardsMoved, st.Rebuilt)
	}
	check("after the moves")

	// A draining node hands every shard off; then it holds none, and the data reads with
	// it stopped.
	c.setNode("n3", func(n *clustermap.Node) { n.State = clustermap.StateDraining })
	if objs, _, err := c.nodes[2].rep.HeldElsewhere(); err != nil || objs == 0 {
		t.Fatalf("a draining node with shards says it holds %d outside placement (%v)", objs, err)
	}
	st = c.syncUp(t)
	if st.ShardsMoved == 0 || st.Rebuilt != 0 {
		t.Fatalf("drain: %+v; want shards moved and none rebuilt", st)
	}
	// The records' hand-off waits for their new holders to confirm: a round or two more.
	for round := 1; ; round++ {
		objs, _, err := c.nodes[2].rep.HeldElsewhere()
		if err == nil && objs == 0 {
			break
		}
		if round == 4 {
			t.Fatalf("the drained node still holds %d records or shards outside placement (%v)", objs, err)
		}
		c.syncUp(t)
	}
	n := 0
	c.nodes[2].store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(object.VersionEntry) error { n++; return nil })
	if n != 0 {
		t.Fatalf("the drained node keeps %d shards", n)
	}
	c.stop(2)
	c.setNode("n3", func(n *clustermap.Node) { n.State = clustermap.StateOut })
	check("with the drained node stopped")
}

// A move whose destination does not answer removes nothing: every shard stays where it
// is, the objects read back, the round says shards wait, and once the node answers the
// next round finishes the moves.
func TestECShardMoveDestinationDown(t *testing.T) {
	ctx := context.Background()
	ec := clustermap.Class{Name: "EC42", N: 6, W: 6, R: 4, D: 4, K: 4, M: 2}
	c := newJoiningCluster(t, ec)
	bodies := map[string][]byte{}
	stripes := 0
	for i := range 8 {
		k := fmt.Sprintf("k%d", i)
		bodies[k] = randBody(uint64(900+i), 64<<10+i*300000)
		stripes += max(1, (len(bodies[k])+4<<20-1)/(4<<20))
		if _, err := putClass(ctx, c.nodes[i%6].gw, "b", k, "EC42", bodies[k]); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"n7", "n8", "n9", "n10"} {
		c.setNode(id, func(n *clustermap.Node) { n.State = clustermap.StateUp })
	}
	c.stop(6) // n7: up in the map, but it does not answer
	st := c.syncUp(t)
	if st.ShardsWaiting == 0 {
		t.Fatalf("moves to a node that does not answer: %+v; want shards waiting", st)
	}
	total := 0
	for _, nd := range c.nodes {
		nd.store.Scan(func(b, _ string) bool { return b == topology.ShardBucket }, func(object.VersionEntry) error { total++; return nil })
	}
	if total < stripes*6 {
		t.Fatalf("%d shards after failed moves, %d before: a shard was removed before its copy was confirmed", total, stripes*6)
	}
	for k, body := range bodies {
		if got, _, err := get(ctx, c.nodes[1].gw, "b", k, 0, -1); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s with moves pending: %v", k, err)
		}
	}
	c.restart(6)
	for round := 1; ; round++ {
		st := c.syncUp(t)
		t.Logf("round %d: %+v", round, st)
		if st.ShardsWaiting == 0 && st.ShardsMoved == 0 {
			break
		}
		if round == 4 {
			t.Fatal("moves still pending after the node came back")
		}
	}
	if n := c.shardLayout(t, ec); n != stripes*6 {
		t.Fatalf("%d shards once the node is back, want %d", n, stripes*6)
	}
	for k, body := range bodies {
		if got, _, err := get(ctx, c.nodes[6].gw, "b", k, 0, -1); err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%s after the moves: %v", k, err)
		}
	}
}
