package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/server"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// ecWaitHealed waits until every node of live has finished a sync round that started
// after since, and those rounds together checked exactly stripes stripes (each
// erasure-coded object is checked by the first up holder of its record, so a record not
// yet copied to that holder leaves its stripes uncounted), rebuilt no shard, found none
// unhealable, copied no record and had no error. A round counts a stripe without a
// rebuild when all K+M of its shards are on its current nodes, and also when a missing
// shard has no node of the stripe to go to (healStriped only logs that); the second case
// cannot arise when every node of the stripe is up and answers, as in the test below,
// whose reads on exactly K nodes are the proof either way. It returns the last status.
func (tc *testCluster) ecWaitHealed(via int, live []string, since time.Time, stripes int, timeout time.Duration) *server.Status {
	tc.t.Helper()
	var st *server.Status
	proctest.WaitFor(tc.t, timeout, func() error {
		st = tc.status(via)
		checked := 0
		for _, id := range live {
			i := slices.IndexFunc(st.Nodes, func(n server.NodeStatus) bool { return n.ID == id })
			switch {
			case i < 0:
				return fmt.Errorf("stripes not whole: %s is not in the map", id)
			case st.Nodes[i].Stats == nil:
				return fmt.Errorf("stripes not whole: %s did not answer: %s", id, st.Nodes[i].Error)
			case st.Nodes[i].Stats.LastSync == nil || !st.Nodes[i].Stats.LastSync.Start.After(since):
				return fmt.Errorf("stripes not whole: %s has not finished a sync round since %s", id, since.Format("15:04:05.000"))
			}
			s := st.Nodes[i].Stats.LastSync
			if s.Rebuilt > 0 || s.Unhealable > 0 || s.Copied > 0 || s.Deleted > 0 || s.Errors > 0 || s.Err != "" {
				return fmt.Errorf("stripes not whole: %s's last round still had work or errors: %+v", id, *s)
			}
			checked += s.Stripes
		}
		if checked != stripes {
			return fmt.Errorf("stripes not whole: the last rounds checked %d stripes, want %d", checked, stripes)
		}
		return nil
	})
	return st
}

// nodeID is the id startCluster and add give the node of tc.procs[i].
func nodeID(i int) string { return fmt.Sprintf("node%d", i+1) }

// ecLiveBytes returns the object bytes (index aside) each node that answered holds.
func ecLiveBytes(st *server.Status) map[string]int64 {
	out := map[string]int64{}
	for _, n := range st.Nodes {
		if n.Stats != nil {
			out[n.ID] = n.Stats.UsedBytes - n.Stats.IndexBytes
		}
	}
	return out
}

// A 6-node cluster with objects in EC42 loses two nodes: every object still reads back
// byte for byte. Two replacement nodes join and the dead ones are marked out; the sync
// rebuilds the missing shards onto the replacements. The proof that it did: two more of
// the original nodes are killed, leaving the two remaining originals and the two
// replacements, exactly K = 4 nodes, and every object still reads back byte for byte
// through each of them, which needs a shard of every stripe on each replacement.
func TestClusterECReplacementNodes(t *testing.T) {
	skipShort(t)
	t.Parallel() // one of the longest: see heavyParallel
	start := time.Now()
	// Sync rounds every 2 s (default 10 min): the heal runs on placement changes anyway,
	// the short interval makes the rounds the wait below looks at come soon.
	flags := []string{"--sync-interval", "2s"}
	tc := startCluster(t, 6, flags...)
	tc.waitVoters(3)
	ctx := context.Background()
	if out, err := tc.admin(0, "class", "create", "EC42", "--ec", "4+2"); err != nil {
		t.Fatalf("class create: %v\n%s", err, out)
	}
	tc.createBucket(0, "ecb")
	// Maps reach every node through Raft: wait until each knows the class.
	for i := range tc.procs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			if !slices.ContainsFunc(tc.status(i).Classes, func(c clustermap.Class) bool { return c.Name == "EC42" }) {
				return fmt.Errorf("node%d does not know class EC42", i+1)
			}
			return nil
		})
	}

	const K = 4
	sizes := []int{0, 1, 7000, 300<<10 + 3, 1<<20 - 1, 1 << 20, 1<<20 + 1, 4<<20 - 1, 4 << 20, 4<<20 + 1, 8 << 20, 9<<20 + 77}
	src := rand.NewChaCha8([32]byte{'e', 'c', 'r', 'e', 'p'})
	want := map[string]string{} // key -> MD5 of the body
	stripes := 0
	var shardBytes int64 // of one shard of every stripe: what each node holds when all are whole
	for i, size := range sizes {
		data := make([]byte, size)
		src.Read(data)
		key := fmt.Sprintf("obj%02d-%d", i, size)
		if _, err := tc.procs[i%6].client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("ecb"), Key: aws.String(key),
			Body: bytes.NewReader(data), StorageClass: "EC42"}); err != nil {
			t.Fatalf("put %s via node%d: %v", key, i%6+1, err)
		}
		want[key] = md5hex(data)
		for off := 0; off == 0 || off < size; off += K << 20 {
			stripes++
			shardBytes += int64((min(size-off, K<<20) + K - 1) / K)
		}
	}
	keys := sortedKeys(want)
	readAll := func(when string, gws ...int) {
		t.Helper()
		for _, gw := range gws {
			c := tc.procs[gw].client()
			for _, k := range keys {
				got, err := getBody(ctx, c, "ecb", k)
				if err != nil || md5hex(got) != want[k] {
					t.Fatalf("%s: read %s via node%d: %v (%d bytes, md5 %s, want %s)", when, k, gw+1, err, len(got), md5hex(got), want[k])
				}
			}
		}
	}
	// Every stripe starts whole: the write is acknowledged at W = K+1 shards, and a kill
	// right after it could otherwise catch a stripe with its last shard still in flight.
	tc.ecWaitHealed(0, []string{"node1", "node2", "node3", "node4", "node5", "node6"}, time.Now(), stripes, 30*time.Second)
	t.Logf("%d objects (%d stripes, %.1f MiB) written in EC42 and whole after %.1fs", len(keys), stripes, float64(4*shardBytes)/(1<<20), time.Since(start).Seconds())

	// Kill two nodes that are not Raft voters: the map must still change (joins and
	// mark out need a leader), and that takes a majority of the three voters.
	st := tc.status(0)
	voter := map[string]bool{}
	for _, m := range st.Managers {
		voter[m.ID] = m.Voter
	}
	var dead []int
	for i := 5; i > 0 && len(dead) < 2; i-- {
		if !voter[nodeID(i)] {
			dead = append(dead, i)
		}
	}
	if len(dead) < 2 {
		t.Fatalf("fewer than two of node2..node6 are not voters: %+v", st.Managers)
	}
	var alive []int
	for i := range 6 {
		if !slices.Contains(dead, i) {
			alive = append(alive, i)
		}
	}
	for _, i := range dead {
		tc.procs[i].Kill()
	}
	t.Logf("killed %s and %s", nodeID(dead[0]), nodeID(dead[1]))
	readAll("two of six nodes killed", alive...)

	// Two replacements join (node7, node8: new ids, new data directories), then the dead
	// nodes are marked out, so the shard placement is the four survivors and the two
	// replacements.
	tc.add(flags...)
	tc.add(flags...)
	for _, i := range dead {
		tc.healAdminRetry(0, 20*time.Second, "mark", nodeID(i), "out")
	}
	for _, id := range []string{"node7", "node8"} {
		tc.healWaitState(0, id, clustermap.StateUp, 20*time.Second)
	}
	for _, i := range dead {
		tc.healWaitState(0, nodeID(i), clustermap.StateOut, 20*time.Second)
	}
	live := []int{alive[0], alive[1], alive[2], alive[3], 6, 7}
	var liveIDs []string
	for _, i := range live {
		liveIDs = append(liveIDs, nodeID(i))
	}
	// Rounds count only once their node runs on the new map: wait until each live node
	// reports it (its epoch), then for a round on every one of them that started later.
	epoch := tc.status(0).Epoch
	proctest.WaitFor(t, 20*time.Second, func() error {
		for _, n := range tc.status(0).Nodes {
			if slices.Contains(liveIDs, n.ID) && (n.Stats == nil || n.Stats.Epoch < epoch) {
				return fmt.Errorf("%s does not have map epoch %d", n.ID, epoch)
			}
		}
		return nil
	})
	replaced := time.Now()
	st = tc.ecWaitHealed(0, liveIDs, replaced, stripes, 60*time.Second)
	held := ecLiveBytes(st)
	t.Logf("stripes whole on the survivors and the replacements %.1fs after the replacement; bytes held: %v (one shard of every stripe: %d)",
		time.Since(replaced).Seconds(), held, shardBytes)
	// Each replacement holds a shard of every stripe. Shards of up to 128 KiB may be
	// kept in the index rather than in segments, so allow for the small ones.
	for _, id := range []string{"node7", "node8"} {
		if held[id] < shardBytes*9/10 {
			t.Errorf("%s holds %d bytes of objects, want at least %d (nine tenths of one shard of every stripe)", id, held[id], shardBytes*9/10)
		}
	}

	// Two more of the original nodes die: non-voters first, and at most one voter that
	// is not the leader, so that two of the three voters remain.
	for _, m := range st.Managers {
		voter[m.ID] = m.Voter
	}
	var cands []int // non-voters first
	for _, v := range []bool{false, true} {
		for _, i := range alive {
			if voter[nodeID(i)] == v {
				cands = append(cands, i)
			}
		}
	}
	var victims []int
	votersKilled := 0
	for _, i := range cands {
		if len(victims) == 2 || nodeID(i) == st.Leader || (voter[nodeID(i)] && votersKilled == 1) {
			continue
		}
		victims = append(victims, i)
		if voter[nodeID(i)] {
			votersKilled++
		}
	}
	if len(victims) < 2 {
		t.Fatalf("no two of the originals %v can be killed without losing the Raft majority (leader %s): %+v", alive, st.Leader, st.Managers)
	}
	for _, i := range victims {
		tc.procs[i].Kill()
	}
	var left []int
	var leftIDs []string
	for _, i := range live {
		if !slices.Contains(victims, i) {
			left = append(left, i)
			leftIDs = append(leftIDs, nodeID(i))
		}
	}
	t.Logf("killed %s and %s; up: %s", nodeID(victims[0]), nodeID(victims[1]), strings.Join(leftIDs, ", "))
	// Exactly K nodes are up: each stripe decodes only from its shards on all four, the
	// two on the replacements included.
	readAll("two originals and two replacements left", left...)
	t.Logf("total %.1fs", time.Since(start).Seconds())
}
