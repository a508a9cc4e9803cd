package repair

// The repair loops alone, through the replica seam: every node is a store behind a
// replica.Local, reached in process (no HTTP), with faults injected per (gateway, holder)
// pair. The coordinator is a real gateway.Gateway over the same seam. The loops' work
// across real processes and the internode protocol is tested in package gateway's
// cluster tests and cmd/cairn's.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/topology"
)

type node struct {
	id    string
	st    *store.Store
	hints *hints.Queue
	gw    *gateway.Gateway
	loops *Loops
}

type cluster struct {
	maps    *topology.Maps
	nodes   []*node
	locals  map[string]*replica.Local
	faultMu sync.Mutex
	faultsM map[[2]string]*replica.Faults
}

// faults returns what node from's gateway and loops meet when they ask node to.
func (c *cluster) faults(from, to string) *replica.Faults {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	k := [2]string{from, to}
	if c.faultsM[k] == nil {
		c.faultsM[k] = replica.NewFaults()
	}
	return c.faultsM[k]
}

// isolate partitions node to from every other node's gateway and loops; heal undoes it.
func (c *cluster) isolate(to string) (heal func()) {
	var fs []*replica.Faults
	for _, n := range c.nodes {
		if n.id != to {
			f := c.faults(n.id, to)
			f.Partition()
			fs = append(fs, f)
		}
	}
	return func() {
		for _, f := range fs {
			f.Heal()
		}
	}
}

func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	m := &clustermap.Map{Epoch: 1, Partitions: 16, Replicas: 3,
		Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2}}}
	c := &cluster{maps: &topology.Maps{}, locals: map[string]*replica.Local{}, faultsM: map[[2]string]*replica.Faults{}}
	for i := range n {
		id := "n" + strconv.Itoa(i+1)
		m.Nodes = append(m.Nodes, clustermap.Node{ID: id, Addr: "127.0.0.1:" + strconv.Itoa(7101+i), Zone: "z" + strconv.Itoa(i%3),
			Weight: 1, State: clustermap.StateUp, Roles: []string{clustermap.RoleStorage, clustermap.RoleGateway}})
	}
	c.maps.Set(m)
	for _, mn := range m.Nodes {
		clock := new(hlc.Clock)
		st, err := store.Open(store.Config{Dir: t.TempDir(), InlineMax: 1 << 10, ChunkSize: 256 << 10, SegmentSize: 16 << 20, Reserve: 1,
			CompactInterval: time.Hour, Logger: log, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.CreateBucket("b"); err != nil {
			t.Fatal(err)
		}
		q, err := hints.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		nd := &node{id: mn.ID, st: st, hints: q}
		// The gateway believes it talks to a remote node; the seam hands it that node's
		// store instead, behind the faults of this pair.
		nd.gw = gateway.New(gateway.Config{NodeID: mn.ID, Store: st, Maps: c.maps, RPC: &rpc.Client{}, Hints: q, Clock: clock,
			StragglerWait: 50 * time.Millisecond, Timeout: 5 * time.Second, Logger: log,
			WrapReplica: func(r replica.Replica) replica.Replica { return c.faults(mn.ID, r.ID()).Wrap(c.locals[r.ID()]) }})
		t.Cleanup(nd.gw.Close)
		c.locals[mn.ID] = &replica.Local{Node: mn.ID, Store: st, EnsureBucket: nd.gw.EnsureLocalBucket}
		nd.loops = New(Config{NodeID: mn.ID, Store: st, Maps: c.maps, Topology: nd.gw.Topology(), Replica: nd.gw.Replica,
			Stripes: nd.gw.Stripes(), Coordinator: nd.gw, Hints: q, Clock: clock, Timeout: 5 * time.Second, Logger: log})
		c.nodes = append(c.nodes, nd)
	}
	return c
}

// version returns the version node n's store holds of key (0: none), and whether it is
// a tombstone.
func (n *node) version(key string) (uint64, bool) {
	o, err := n.st.StatVersion("b", key)
	if err != nil {
		return 0, false
	}
	return o.HLC, o.Deleted
}

func put(t *testing.T, g *gateway.Gateway, key string, body []byte) *object.Object {
	t.Helper()
	o, err := g.PutObject(context.Background(), "b", key, &object.Object{}, bytes.NewReader(body), int64(len(body)), object.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestSyncCopiesMissedWrites: a node cut off from the others misses writes and a
// delete; one sync round on it brings every copy up to date, and a second finds nothing
// left to do.
func TestSyncCopiesMissedWrites(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3)
	n1, n3 := c.nodes[0], c.nodes[2]
	gone := put(t, n1.gw, "gone", []byte("to be deleted"))
	heal := c.isolate(n3.id)
	want := map[string]uint64{}
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		want[k] = put(t, n1.gw, k, bytes.Repeat([]byte{byte(i)}, 1000+i*700)).HLC
	}
	if err := n1.gw.DeleteObject(ctx, "b", "gone"); err != nil {
		t.Fatal(err)
	}
	heal()
	for k := range want {
		if v, _ := n3.version(k); v != 0 {
			t.Fatalf("the isolated node holds %s already", k)
		}
	}
	st, err := n3.loops.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Copied != 20 || st.Deleted != 1 || st.Errors != 0 {
		t.Fatalf("sync: copied %d, deleted %d, errors %d; want 20, 1, 0 (%+v)", st.Copied, st.Deleted, st.Errors, st)
	}
	for k, v := range want {
		if got, _ := n3.version(k); got != v {
			t.Fatalf("%s: the node holds version %d after the sync, want %d", k, got, v)
		}
	}
	if v, deleted := n3.version("gone"); !deleted || v <= gone.HLC {
		t.Fatalf("the deleted object: version %d deleted %v, want a tombstone newer than %d", v, deleted, gone.HLC)
	}
	if st, err := n3.loops.Sync(ctx); err != nil || st.Copied+st.Deleted != 0 || st.Differing != 0 {
		t.Fatalf("second sync: %+v, %v; want nothing to do", st, err)
	}
}

// TestSyncWithPeerUnreachable: a peer that cannot be asked is counted as an error and
// skipped; what the others hold is still copied.
func TestSyncWithPeerUnreachable(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3)
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	heal := c.isolate(n3.id)
	o := put(t, n1.gw, "k", []byte("hello"))
	heal()
	c.faults(n3.id, n2.id).Partition()
	st, err := n3.loops.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Errors == 0 || st.Copied != 1 {
		t.Fatalf("sync with n2 unreachable: %+v; want one copy and an error", st)
	}
	if v, _ := n3.version("k"); v != o.HLC {
		t.Fatalf("version %d, want %d", v, o.HLC)
	}
}

// TestHintsDelivered: a write that missed a holder is queued on the gateway that made
// it and delivered once the holder answers again, not while it is marked down; the
// queue is then empty.
func TestHintsDelivered(t *testing.T) {
	c := newCluster(t, 3)
	n1, n2 := c.nodes[0], c.nodes[1]
	c.faults(n1.id, n2.id).Partition()
	o := put(t, n1.gw, "k", bytes.Repeat([]byte("h"), 100<<10))
	if n1.hints.Len() != 1 {
		t.Fatalf("%d hints queued, want 1", n1.hints.Len())
	}
	// Marked down: the loop leaves the hint queued.
	m := c.maps.Current().Clone()
	for i := range m.Nodes {
		if m.Nodes[i].ID == n2.id {
			m.Nodes[i].State = clustermap.StateDown
		}
	}
	m.Epoch++
	c.maps.Set(m)
	c.faults(n1.id, n2.id).Heal()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n1.loops.RunHints(ctx, 10*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
	proctest.Holds(t, 300*time.Millisecond, func() error {
		if v, _ := n2.version("k"); v != 0 || n1.hints.Len() != 1 {
			return fmt.Errorf("a hint was delivered to a node marked down: it holds version %d, %d hints queued", v, n1.hints.Len())
		}
		return nil
	})
	// Up again: delivered.
	m = m.Clone()
	for i := range m.Nodes {
		m.Nodes[i].State = clustermap.StateUp
	}
	m.Epoch++
	c.maps.Set(m)
	proctest.WaitFor(t, 10*time.Second, func() error {
		if v, _ := n2.version("k"); v != o.HLC || n1.hints.Len() != 0 {
			return fmt.Errorf("hint not delivered: n2 holds version %d (want %d), %d hints queued", v, o.HLC, n1.hints.Len())
		}
		return nil
	})
}

// TestHintForDeletedBucket: a hint whose bucket is gone is dropped, not retried forever.
func TestHintForDeletedBucket(t *testing.T) {
	c := newCluster(t, 3)
	n1 := c.nodes[0]
	if err := n1.hints.Add("n2", "nobucket", "k", 7); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n1.loops.RunHints(ctx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	proctest.WaitFor(t, 10*time.Second, func() error {
		if n1.hints.Len() != 0 {
			return fmt.Errorf("%d hints still queued for a bucket that does not exist", n1.hints.Len())
		}
		return nil
	})
	if _, err := c.nodes[1].st.HeadBucket("nobucket"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the bucket was created on the holder: %v", err)
	}
}
