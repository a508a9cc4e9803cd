package clustermap

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// Short timeouts so that elections and failover take well under a second or
// two on loopback, even under -race.
const (
	testHeartbeat = 300 * time.Millisecond
	testReconcile = 200 * time.Millisecond
	testWait      = 15 * time.Second
)

// testLogger returns a logger that writes to t.Log until the test ends (raft
// goroutines may outlive the test by a moment). CLUSTERMAP_DEBUG=1 includes
// raft's own logs.
func testLogger(t *testing.T) *slog.Logger {
	w := &testLogWriter{t: t}
	t.Cleanup(func() { // registered first, so it runs last
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	level := slog.LevelInfo
	if os.Getenv("CLUSTERMAP_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type testLogWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

type tnode struct {
	id, zone string
	roles    []string
	addr     string
	dir      string
	m        *Manager // nil when stopped
}

func (n *tnode) node() Node {
	return Node{ID: n.id, Addr: n.addr, S3Addr: "s3-" + n.id, Zone: n.zone, Capacity: 1 << 30, Weight: 1, Roles: n.roles}
}

type tcluster struct {
	t     *testing.T
	log   *slog.Logger
	nodes []*tnode
	knobs func(*Config)
}

// newCluster makes nodes n1..nK in the given zones, all with every role.
func newCluster(t *testing.T, zones ...string) *tcluster {
	c := &tcluster{t: t, log: testLogger(t)}
	for i, z := range zones {
		c.nodes = append(c.nodes, &tnode{
			id: fmt.Sprintf("n%d", i+1), zone: z, dir: t.TempDir(),
			roles: []string{RoleManager, RoleGateway, RoleStorage},
		})
	}
	return c
}

func (c *tcluster) node(id string) *tnode {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	c.t.Fatalf("no node %s", id)
	return nil
}

func (c *tcluster) running() []*tnode {
	var out []*tnode
	for _, n := range c.nodes {
		if n.m != nil {
			out = append(out, n)
		}
	}
	return out
}

func (c *tcluster) listen(n *tnode) net.Listener {
	c.t.Helper()
	if n.addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.t.Fatal(err)
		}
		n.addr = ln.Addr().String()
		return ln
	}
	var ln net.Listener
	proctest.WaitFor(c.t, 5*time.Second, func() error {
		var err error
		ln, err = net.Listen("tcp", n.addr) // restart on the same address
		return err
	})
	return ln
}

func (c *tcluster) config(n *tnode, ln net.Listener) Config {
	cfg := Config{
		Dir:      n.dir,
		ID:       n.id,
		Addr:     n.addr,
		Listener: ln,
		Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		},
		Logger:             c.log,
		Voters:             3,
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testHeartbeat,
		LeaderLeaseTimeout: testHeartbeat / 2,
		ReconcileInterval:  testReconcile,
	}
	if c.knobs != nil {
		c.knobs(&cfg)
	}
	return cfg
}

func bootstrapMap(n *tnode) *Map {
	return &Map{
		Partitions: 64,
		Replicas:   3,
		Nodes:      []Node{n.node()},
		Classes:    map[string]Class{StandardClass: {Name: StandardClass, N: 3, W: 2, R: 2, D: 2}},
	}
}

func (c *tcluster) start(n *tnode, bootstrap bool) {
	c.t.Helper()
	ln := c.listen(n)
	cfg := c.config(n, ln)
	if bootstrap {
		cfg.Bootstrap = bootstrapMap(n)
	}
	m, err := Open(cfg)
	if err != nil {
		ln.Close()
		c.t.Fatalf("open %s: %v", n.id, err)
	}
	n.m = m
	c.t.Cleanup(func() { m.Close() })
}

func (c *tcluster) stop(n *tnode) {
	c.t.Helper()
	if err := n.m.Close(); err != nil {
		c.t.Errorf("close %s: %v", n.id, err)
	}
	n.m = nil
}

// waitFor polls cond until it returns "" or the wait times out.
func (c *tcluster) waitFor(what string, cond func() string) {
	c.t.Helper()
	proctest.WaitFor(c.t, testWait, func() error {
		if msg := cond(); msg != "" {
			return fmt.Errorf("waiting for %s: %s", what, msg)
		}
		return nil
	})
}

// leader waits for a running node to be the leader.
func (c *tcluster) leader() *tnode {
	c.t.Helper()
	var l *tnode
	c.waitFor("a leader", func() string {
		for _, n := range c.running() {
			if n.m.IsLeader() {
				l = n
				return ""
			}
		}
		return "no leader"
	})
	return l
}

// apply applies cmd on the leader, retrying transient errors.
func (c *tcluster) apply(cmd Command) *Map {
	c.t.Helper()
	var m *Map
	c.waitFor("apply "+cmd.Op, func() string {
		l := c.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		m, err = l.m.Apply(ctx, cmd)
		if err == nil {
			return ""
		}
		if !errors.Is(errors.Transient, err) {
			c.t.Fatalf("apply %+v: %v", cmd, err)
		}
		return err.Error()
	})
	return m
}

// join starts n and runs the join flow: the leader adds the node to the map
// and to the Raft group.
func (c *tcluster) join(n *tnode) {
	c.t.Helper()
	c.start(n, false)
	node := n.node()
	c.apply(Command{Op: OpAddNode, Node: &node})
	c.waitFor("add member "+n.id, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.leader().m.AddMember(ctx, n.id, n.addr, false); err != nil {
			return err.Error()
		}
		return ""
	})
}

// converge waits until every running node has the leader's map.
func (c *tcluster) converge() *Map {
	c.t.Helper()
	var want *Map
	c.waitFor("convergence", func() string {
		want = c.leader().m.Current()
		for _, n := range c.running() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			got, err := n.m.WaitEpoch(ctx, want.Epoch)
			cancel()
			if err != nil {
				return fmt.Sprintf("%s at epoch %d, want %d: %v", n.id, n.m.Current().Epoch, want.Epoch, err)
			}
			if got.Digest() != want.Digest() {
				return fmt.Sprintf("%s digest differs at epoch %d/%d", n.id, got.Epoch, want.Epoch)
			}
		}
		return ""
	})
	return want
}

func voters(ms []Member) []string {
	var out []string
	for _, m := range ms {
		if m.Voter {
			out = append(out, m.ID)
		}
	}
	return out
}

// waitVoters waits until the leader's configuration has nmembers members and
// nvoters voters on distinct zones, none of them in exclude.
func (c *tcluster) waitVoters(nmembers, nvoters int, exclude ...string) []string {
	c.t.Helper()
	var vs []string
	c.waitFor(fmt.Sprintf("%d members, %d voters", nmembers, nvoters), func() string {
		ms, err := c.leader().m.Members()
		if err != nil {
			return err.Error()
		}
		vs = voters(ms)
		zones := map[string]bool{}
		for _, v := range vs {
			zones[c.node(v).zone] = true
			for _, x := range exclude {
				if v == x {
					return fmt.Sprintf("%s is still a voter: %+v", x, ms)
				}
			}
		}
		if len(ms) != nmembers || len(vs) != nvoters || len(zones) != nvoters {
			return fmt.Sprintf("members %+v", ms)
		}
		return ""
	})
	return vs
}

func TestManagerSingleNode(t *testing.T) {
	c := newCluster(t, "a")
	n1 := c.nodes[0]
	c.start(n1, true)
	m := n1.m
	cur := m.Current()
	if cur.Epoch != 1 || len(cur.Nodes) != 1 || cur.Nodes[0].State != StateUp || cur.Partitions != 64 {
		t.Fatalf("after bootstrap: %+v", cur)
	}
	if !m.IsLeader() {
		t.Fatal("bootstrap node is not the leader")
	}
	if id, addr := m.Leader(); id != "n1" || addr != n1.addr {
		t.Fatalf("Leader() = %s %s", id, addr)
	}
	ms, err := m.Members()
	if err != nil || len(ms) != 1 || ms[0] != (Member{ID: "n1", Addr: n1.addr, Voter: true}) {
		t.Fatalf("Members() = %+v, %v", ms, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	w := m.Watch(ctx)
	if got := <-w; got.Epoch != 1 {
		t.Fatalf("first watched epoch %d", got.Epoch)
	}
	nm, err := m.Apply(context.Background(), Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "b1", Created: 1}})
	if err != nil || nm.Epoch != 2 || m.Current() != nm {
		t.Fatalf("create bucket: %+v, %v", nm, err)
	}
	if got := <-w; got.Epoch != 2 {
		t.Fatalf("watched epoch %d, want 2", got.Epoch)
	}
	_, err = m.Apply(context.Background(), Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "b1", Created: 2}})
	if !errors.Is(errors.Exist, err) {
		t.Fatalf("duplicate bucket: %v, want Exist", err)
	}
	_, err = m.Apply(context.Background(), Command{Op: OpPutClass, Class: &Class{Name: "BAD", N: 1, W: 2, R: 1, D: 1}})
	if !errors.Is(errors.Invalid, err) {
		t.Fatalf("bad class: %v, want Invalid", err)
	}
	if m.Current().Epoch != 2 {
		t.Fatalf("rejected commands bumped the epoch to %d", m.Current().Epoch)
	}
	// Many quick changes: a slow watcher gets the newest, in order.
	for i := range 20 {
		c.apply(Command{Op: OpPutUser, User: &User{AccessKey: fmt.Sprint("k", i), SecretKey: "s"}})
	}
	last := uint64(0)
	for got := range w {
		if got.Epoch <= last {
			t.Fatalf("watch went from epoch %d to %d", last, got.Epoch)
		}
		last = got.Epoch
		if last == 22 {
			break
		}
	}
	cancel()
	for range w { // closed when ctx ends
	}
	digest := m.Current().Digest()

	c.stop(n1)
	if err := m.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := m.Apply(context.Background(), Command{Op: OpPutUser, User: &User{AccessKey: "x"}}); !errors.Is(errors.Transient, err) || !errors.IsErr(err, ErrClosed) {
		t.Fatalf("apply after close: %v", err)
	}
	if _, ok := <-m.Watch(context.Background()); ok {
		t.Fatal("watch after close delivered a map")
	}

	// Restart with Bootstrap set again: existing state wins.
	c.start(n1, true)
	ctx2, cancel2 := context.WithTimeout(context.Background(), testWait)
	defer cancel2()
	got, err := n1.m.WaitEpoch(ctx2, 22)
	if err != nil || got.Digest() != digest {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	c.leader()
	c.apply(Command{Op: OpDeleteBucket, Name: "b1"})
	if n1.m.Current().Epoch != 23 {
		t.Fatalf("epoch %d after restart and delete", n1.m.Current().Epoch)
	}
}

func TestOpenInvalid(t *testing.T) {
	c := newCluster(t, "a", "b")
	ln := c.listen(c.nodes[0])
	defer ln.Close()
	cfg := c.config(c.nodes[0], ln)
	cfg.Bootstrap = bootstrapMap(c.nodes[1]) // does not contain n1
	if _, err := Open(cfg); !errors.Is(errors.Invalid, err) {
		t.Fatalf("bootstrap without self: %v", err)
	}
	cfg.Bootstrap = bootstrapMap(c.nodes[0])
	cfg.Bootstrap.Nodes[0].Roles = []string{RoleStorage}
	if _, err := Open(cfg); !errors.Is(errors.Invalid, err) {
		t.Fatalf("bootstrap without manager role: %v", err)
	}
	cfg.Dial = nil
	if _, err := Open(cfg); !errors.Is(errors.Invalid, err) {
		t.Fatalf("no dial: %v", err)
	}
}

// TestManagerThreeMembers: join, snapshot install, 3 voters, follower
// rejection, and removal of an out node from the group.
func TestManagerThreeMembers(t *testing.T) {
	c := newCluster(t, "a", "b", "c")
	c.knobs = func(cfg *Config) { // so that n3 needs a snapshot
		cfg.trailingLogs = 1
		cfg.walSegmentSize = 1024
	}
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	start := time.Now()
	c.start(n1, true)
	c.join(n2)
	for i := range 30 {
		c.apply(Command{Op: OpCreateBucket, Bucket: &Bucket{Name: fmt.Sprint("bucket", i), Created: int64(i)}})
	}
	c.converge()
	if err := c.leader().m.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.join(n3)
	m := c.converge()
	if len(m.Nodes) != 3 || len(m.Buckets) != 30 {
		t.Fatalf("converged map %+v", m)
	}
	if snaps, _ := os.ReadDir(filepath.Join(n3.dir, "snapshots")); len(snaps) == 0 {
		t.Error("n3 did not receive a snapshot")
	}
	vs := c.waitVoters(3, 3)
	t.Logf("3 members, voters %v after %v", vs, time.Since(start))

	// A follower rejects Apply and points at the leader.
	l := c.leader()
	for _, n := range c.running() {
		if n == l {
			continue
		}
		_, err := n.m.Apply(context.Background(), Command{Op: OpPutUser, User: &User{AccessKey: "x"}})
		if !errors.IsErr(err, ErrNotLeader) || !errors.Is(errors.Transient, err) {
			t.Fatalf("apply on follower %s: %v", n.id, err)
		}
		if id, addr := n.m.Leader(); id != l.id || addr != l.addr {
			t.Fatalf("follower %s: Leader() = %s %s, want %s %s", n.id, id, addr, l.id, l.addr)
		}
		if err := n.m.AddMember(context.Background(), "x", "x:1", false); !errors.IsErr(err, ErrNotLeader) {
			t.Fatalf("AddMember on follower: %v", err)
		}
	}

	// AddMember is idempotent.
	if err := l.m.AddMember(context.Background(), n2.id, n2.addr, false); err != nil {
		t.Fatal(err)
	}
	// An out node leaves the Raft group.
	out := n3
	if l == n3 {
		out = n2
	}
	c.apply(Command{Op: OpSetState, NodeID: out.id, State: StateOut})
	c.waitFor(out.id+" removed from group", func() string {
		ms, err := c.leader().m.Members()
		if err != nil {
			return err.Error()
		}
		for _, mb := range ms {
			if mb.ID == out.id {
				return fmt.Sprintf("members %+v", ms)
			}
		}
		return ""
	})
	c.stop(out)
	c.apply(Command{Op: OpPutUser, User: &User{AccessKey: "after", SecretKey: "s"}})
	c.converge()
	t.Logf("done after %v", time.Since(start))
}

// TestManagerFiveMembersFailover: 5 manager-capable nodes over 3 zones, voter
// placement, leader failover, replacement of a down voter, and restart of a
// member from its directory.
func TestManagerFiveMembersFailover(t *testing.T) {
	c := newCluster(t, "a", "a", "b", "b", "c", "c")
	c.nodes[5].roles = []string{RoleStorage} // n6 joins later, storage only
	start := time.Now()
	c.start(c.nodes[0], true)
	for _, n := range c.nodes[1:5] {
		c.join(n)
	}
	n4 := c.node("n4")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := n4.m.Watch(ctx)
	c.converge()
	vs := c.waitVoters(5, 3)
	t.Logf("5 members, voters %v (distinct zones) after %v", vs, time.Since(start))

	old := c.leader()
	c.apply(Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "before", Created: 1}})
	c.converge()

	// Failover.
	t0 := time.Now()
	c.stop(old)
	l := c.leader()
	failover := time.Since(t0)
	t.Logf("leader %s stopped; %s elected after %v", old.id, l.id, failover)
	if l == old || failover > 5*time.Second {
		t.Fatalf("failover to %s took %v", l.id, failover)
	}
	n6 := c.nodes[5]
	c.join(n6)
	m := c.converge()
	if _, ok := m.Node(n6.id); !ok {
		t.Fatal("n6 not in converged map")
	}

	// Mark the old leader down: a nonvoter replaces it.
	c.apply(Command{Op: OpSetState, NodeID: old.id, State: StateDown})
	vs = c.waitVoters(6, 3, old.id)
	t.Logf("voters after %s down: %v", old.id, vs)
	for _, v := range vs {
		if v == n6.id {
			t.Fatal("storage-only node became a voter")
		}
	}

	// Restart the old leader from its directory: it catches up.
	c.start(old, false)
	c.apply(Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "after", Created: 2}})
	m = c.converge()
	if _, ok := old.m.Current().Buckets["after"]; !ok || old.m.Current().Digest() != m.Digest() {
		t.Fatal("restarted node did not catch up")
	}
	// A node removed from the map leaves the group (after a grace period).
	c.apply(Command{Op: OpRemoveNode, NodeID: n6.id})
	c.waitFor(n6.id+" removed from group", func() string {
		ms, err := c.leader().m.Members()
		if err != nil {
			return err.Error()
		}
		for _, mb := range ms {
			if mb.ID == n6.id {
				return fmt.Sprintf("members %+v", ms)
			}
		}
		return ""
	})
	c.stop(n6)
	// Back up: no churn, the voter set is full and spread over all zones.
	c.apply(Command{Op: OpSetState, NodeID: old.id, State: StateUp})
	// Three reconcile periods without a change of voters.
	proctest.Holds(t, 3*testReconcile, func() error {
		ms, err := c.leader().m.Members()
		if err != nil {
			return err
		}
		if got := voters(ms); !equalStrings(got, vs) {
			return fmt.Errorf("voters changed from %v to %v", vs, got)
		}
		return nil
	})
	if got := c.waitVoters(5, 3); !equalStrings(got, vs) {
		t.Fatalf("voters changed from %v to %v", vs, got)
	}
	m = c.converge()
	// n4's watcher saw the maps in order and ends with the final one.
	last := uint64(0)
	for got := range watch {
		if got.Epoch <= last {
			t.Fatalf("watch went from epoch %d to %d", last, got.Epoch)
		}
		last = got.Epoch
		if got.Epoch == m.Epoch {
			if got.Digest() != m.Digest() {
				t.Fatal("watched map differs from the leader's")
			}
			break
		}
	}
	t.Logf("done after %v", time.Since(start))
}
