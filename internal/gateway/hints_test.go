package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
)

// TestRunHintsNotStarvedByDownNode: a node marked down has many queued hints (it missed a
// lot of writes); a stale replica on another node that is up must still be repaired.
func TestRunHintsNotStarvedByDownNode(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	const via, stale, down = 1, 2, 0
	// n3 misses a write.
	c.stop(stale)
	o := mustPut(t, c.nodes[via].gw, "b", "k", []byte("hello"))
	c.restart(stale)
	if len(c.hintsFor(via, c.nodes[stale].id, "b", "k")) != 1 {
		t.Fatal("no hint for the stale replica")
	}
	// n1 goes down and has 600 hints queued (more than one delivery round takes).
	c.setNode(c.nodes[down].id, func(n *clustermap.Node) { n.State = clustermap.StateDown })
	for i := range 600 {
		if err := c.nodes[via].hints.Add(c.nodes[down].id, "b", fmt.Sprintf("missed/%04d", i), o.HLC); err != nil {
			t.Fatal(err)
		}
	}
	c.runHints(via, 20*time.Millisecond)
	if !waitFor(3*time.Second, func() bool { return converged(c.replicaStates(via, "b", "k"), o.HLC, false) }) {
		t.Fatalf("the stale replica %s was not repaired while %d hints for down node %s were queued ahead of it: %+v",
			c.nodes[stale].id, c.nodes[via].hints.Len(), c.nodes[down].id, c.replicaStates(via, "b", "k"))
	}
}
