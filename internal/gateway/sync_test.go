package gateway

import (
	"context"
	"fmt"
	"testing"
)

// Sync copies to a node what it missed while it was away (newer versions and tombstones),
// without the hint queue, and a second round finds nothing to do.
func TestSyncRecoversMissedWrites(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	g := c.nodes[0].gw
	for i := 0; i < 6; i++ {
		mustPut(t, g, "b", fmt.Sprintf("gone%d", i), []byte("to be deleted"))
	}
	c.stop(2)
	want := map[string]uint64{}
	for i := 0; i < 10; i++ {
		size := 100 + i
		if i == 3 {
			size = 3 << 20 // streamed, chunked
		}
		k := fmt.Sprintf("k%d", i)
		want[k] = mustPut(t, g, "b", k, randBody(uint64(i), size)).HLC
	}
	for i := 0; i < 6; i++ {
		if err := g.DeleteObject(ctx, "b", fmt.Sprintf("gone%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.restart(2)
	st, err := c.nodes[2].gw.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Copied != 10 || st.Deleted != 6 || st.Errors != 0 || st.Peers != 2 {
		t.Fatalf("sync: %+v; want 10 copied, 6 deleted from 2 peers", st)
	}
	for k, v := range want {
		if rs := c.replicaStates(0, "b", k); !converged(rs, v, false) {
			t.Fatalf("%s after sync: %+v", k, rs)
		}
	}
	for i := 0; i < 6; i++ {
		if o, err := c.nodes[2].store.StatVersion("b", fmt.Sprintf("gone%d", i)); err != nil || !o.Deleted {
			t.Fatalf("gone%d on the returning node: %+v %v; want its tombstone", i, o, err)
		}
	}
	st, err = c.nodes[2].gw.Sync(ctx)
	if err != nil || st.Copied+st.Deleted != 0 {
		t.Fatalf("second sync: %+v %v; want nothing to do", st, err)
	}
}
