package gateway

// An in-process test cluster: every node has its own store, hint queue and Gateway, and
// serves the replica protocol (replica.Handler) on a real loopback listener behind a
// middleware that checks the internode signature, as internal/server does. The cluster map
// is a plain mutable value shared by all nodes (no Raft). Each node runs its repair.Loops
// beside its Gateway: the tests of the repair loops that need a whole cluster over the
// internode protocol (sync, shard moves and collection, scrub, policy apply) are here
// too; package repair tests the loops alone through the replica seam.

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

const testSecret = "cairn-test-cluster-secret-0123456789"

// testMaps is a mutable MapSource whose bucket commands apply directly to the map.
type testMaps struct {
	mu sync.Mutex // serializes updates
	topology.Maps
}

// Update applies fn to a clone of the current map and installs it with the next epoch.
func (m *testMaps) Update(fn func(*clustermap.Map) error) (*clustermap.Map, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.Current().Clone()
	if err := fn(c); err != nil {
		return nil, err
	}
	c.Epoch++
	m.Set(c)
	return c, nil
}

// apply is the gateway's Apply: commands applied directly to the map, as the managers
// apply them.
func (m *testMaps) apply(_ context.Context, c clustermap.Command) (*clustermap.Map, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	nm, err := clustermap.ApplyCommand(m.Current(), c)
	if err != nil {
		return nil, err
	}
	m.Set(nm)
	return nm, nil
}

// testNode is one node of a testCluster.
type testNode struct {
	id      string
	clock   *hlc.Clock
	store   *store.Store
	rleases *replica.ReadLeases
	hints   *hints.Queue
	gw      *Gateway
	rep     *repair.Loops
	tr      *http.Transport
	handler http.Handler

	mu  sync.Mutex
	srv *httptest.Server // nil while stopped
}

// testCluster is an in-process cluster.
type testCluster struct {
	tb     testing.TB
	maps   *testMaps
	secret *rpc.Secret
	nodes  []*testNode

	stopMu sync.Mutex
	stops  []func() // background work (RunHints) to stop before the stores close

	faultMu sync.Mutex
	faultsM map[[2]string]*replica.Faults // by (gateway node, replica node)
}

// faults returns the faults injected into what node from's gateway asks of node to
// (none until set): a partition or a slow link between two nodes only.
func (c *testCluster) faults(from, to string) *replica.Faults {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	if c.faultsM == nil {
		c.faultsM = map[[2]string]*replica.Faults{}
	}
	f := c.faultsM[[2]string{from, to}]
	if f == nil {
		f = replica.NewFaults()
		c.faultsM[[2]string{from, to}] = f
	}
	return f
}

// healAll clears every injected fault.
func (c *testCluster) healAll() {
	c.faultMu.Lock()
	fs := make([]*replica.Faults, 0, len(c.faultsM))
	for _, f := range c.faultsM {
		fs = append(fs, f)
	}
	c.faultMu.Unlock()
	for _, f := range fs {
		f.Heal()
	}
}

// clusterConfig adjusts a test cluster.
type clusterConfig struct {
	class     clustermap.Class // STANDARD; default N=3 W=2 R=1 D=2
	straggler time.Duration    // default 200ms
	timeout   time.Duration    // gateway.Config.Timeout; default 10s
	cache     int64            // gateway.Config.ObjectCache; default 0 (off)
	// lease is gateway.Config.CacheLease (0: none); leases are asked for only once the
	// map's Level is LevelReadLeases (setLevel). The holders' tables grant up to it.
	lease time.Duration
	// leaseClock, if set, is node i's read lease clock (as a holder).
	leaseClock func(i int) replica.LeaseClock
	// wrap, if set, wraps what gateway node from asks of each replica, inside the faults.
	wrap func(from string, r replica.Replica) replica.Replica
	// store, if set, adjusts node i's store configuration before it opens.
	store func(i int, sc *store.Config)
	// tiers is gateway.Config.Tiers (tier_test.go).
	tiers func(name string) (TierStore, error)
	// noAccessTimes is gateway.Config.NoAccessTimes.
	noAccessTimes bool
	// clockNow, if set, is every node's HLC wall clock (hlc.Clock.Now).
	clockNow func() time.Time
	// untagged leaves the nodes' clocks without the map's tags (internal/server sets them).
	untagged bool
}

func testLogger() *slog.Logger {
	if os.Getenv("CAIRN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testStoreConfig is a small store configuration (like store_test.go's testConfig).
func testStoreConfig(dir string, clock *hlc.Clock) store.Config {
	return store.Config{
		Dir:             dir,
		InlineMax:       1 << 10,
		ChunkSize:       256 << 10,
		SegmentSize:     16 << 20,
		Reserve:         1,
		CompactInterval: time.Hour,
		Logger:          testLogger(),
		Clock:           clock,
	}
}

// newCluster starts n nodes named n1..nN in zones z1..z3, all with the storage and gateway
// roles, and creates no bucket.
func newCluster(tb testing.TB, n int, cfg clusterConfig) *testCluster {
	tb.Helper()
	if cfg.class.N == 0 {
		cfg.class = clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2}
	}
	if cfg.straggler == 0 {
		cfg.straggler = 200 * time.Millisecond
	}
	secret, err := rpc.NewSecret(testSecret)
	if err != nil {
		tb.Fatal(err)
	}
	c := &testCluster{tb: tb, maps: &testMaps{}, secret: secret}
	// The directories first: cleanups run last-in first-out, and the stores must be closed
	// before their directories are removed.
	dirs := make([][2]string, n)
	for i := range dirs {
		dirs[i] = [2]string{tb.TempDir(), tb.TempDir()}
	}
	tb.Cleanup(c.close)
	m := &clustermap.Map{Epoch: 1, Partitions: 64, Replicas: 3,
		Classes: map[string]clustermap.Class{clustermap.StandardClass: cfg.class},
		Buckets: map[string]clustermap.Bucket{}, Users: map[string]clustermap.User{}}
	for i := range n {
		id := "n" + strconv.Itoa(i+1)
		clock := &hlc.Clock{Now: cfg.clockNow}
		sc := testStoreConfig(dirs[i][0], clock)
		nd := &testNode{id: id, clock: clock, tr: rpc.NewTransport()}
		var lc replica.LeaseClock
		if cfg.leaseClock != nil {
			lc = cfg.leaseClock(i)
		}
		nd.rleases = replica.NewReadLeases(replica.ReadLeaseConfig{Max: cfg.lease, Clock: lc, Logger: testLogger().With("node", id),
			Revoke: func(ctx context.Context, node, bucket, key string) error { return c.revoke(ctx, nd, node, bucket, key) }})
		sc.Changing = nd.rleases.Changing
		if cfg.store != nil {
			cfg.store(i, &sc)
		}
		st, err := store.Open(sc)
		if err != nil {
			tb.Fatal(err)
		}
		nd.store = st
		c.nodes = append(c.nodes, nd)
		if nd.hints, err = hints.Open(dirs[i][1]); err != nil {
			tb.Fatal(err)
		}
		nd.gw = New(Config{
			NodeID:        id,
			Store:         st,
			Maps:          c.maps,
			RPC:           &rpc.Client{Secret: secret, Node: id, HTTP: &http.Client{Transport: nd.tr}},
			Apply:         c.maps.apply,
			Hints:         nd.hints,
			Clock:         clock,
			StragglerWait: cfg.straggler,
			Timeout:       cfg.timeout,
			ObjectCache:   cfg.cache,
			CacheLease:    cfg.lease,
			ReadLeases:    nd.rleases,
			Tiers:         cfg.tiers,
			NoAccessTimes: cfg.noAccessTimes,
			Logger:        testLogger().With("node", id),
			WrapReplica: func(r replica.Replica) replica.Replica {
				if cfg.wrap != nil {
					r = cfg.wrap(id, r)
				}
				return c.faults(id, r.ID()).Wrap(r)
			},
		})
		nd.rep = repair.New(repair.Config{NodeID: id, Store: st, Maps: c.maps, Topology: nd.gw.Topology(), Replica: nd.gw.Replica,
			Stripes: nd.gw.Stripes(), Coordinator: nd.gw, Hints: nd.hints, Clock: clock, Timeout: cfg.timeout, Logger: testLogger().With("node", id)})
		nh := replica.NewHandler(replica.HandlerConfig{Local: &replica.Local{Node: id, Store: st, EnsureBucket: nd.gw.EnsureLocalBucket}, Secret: secret, Leases: nd.gw.Leases(),
			ReadLeases: nd.rleases, Revoked: nd.gw.RevokeLease, Logger: testLogger().With("node", id)})
		nd.handler = c.internodeAuth(nh)
		nd.srv = c.serve(nd.handler)
		m.Nodes = append(m.Nodes, clustermap.Node{ID: id, Addr: nd.srv.Listener.Addr().String(),
			Zone: "z" + strconv.Itoa(i%3+1), Weight: 1, State: clustermap.StateUp,
			Roles: []string{clustermap.RoleStorage, clustermap.RoleGateway}})
	}
	slices.SortFunc(m.Nodes, func(a, b clustermap.Node) int { return strings.Compare(a.ID, b.ID) })
	if !cfg.untagged {
		for _, nd := range c.nodes {
			nd.clock.SetTag(m.ClockTag(nd.id)) // as internal/server's map watcher does
		}
	}
	c.maps.Set(m)
	return c
}

// revoke is node from's ReadLeaseConfig.Revoke: the internode revoke to gateway node,
// through the faults injected between the two nodes (a partitioned gateway cannot be
// told), or a direct call to from's own gateway.
func (c *testCluster) revoke(ctx context.Context, from *testNode, node, bucket, key string) error {
	if c.faults(from.id, node).Unreachable() {
		return errors.E(errors.Transient, fmt.Errorf("node %s: unreachable (injected partition)", node))
	}
	addr := func(id string) (string, bool) {
		n, ok := c.maps.Current().Node(id)
		return n.Addr, ok
	}
	return replica.RevokeVia(&rpc.Client{Secret: c.secret, Node: from.id, HTTP: &http.Client{Transport: from.tr}}, from.id, from.gw.RevokeLease, addr)(ctx, node, bucket, key)
}

// internodeAuth is internal/server's middleware without the wait for a newer epoch.
func (c *testCluster) internodeAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := c.secret.Authenticate(w, r)
		if !ok {
			return
		}
		w.Header().Set(rpc.HdrEpoch, strconv.FormatUint(c.maps.Current().Epoch, 10))
		next.ServeHTTP(w, r)
		rpc.EndResponse(w)
	})
}

func (c *testCluster) serve(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	return srv
}

// stop closes node i's server: its listener and every connection, as a crash would.
// Its store, hint queue and gateway stay as they are.
func (c *testCluster) stop(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	srv := nd.srv
	nd.srv = nil
	nd.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Listener.Close()
	srv.CloseClientConnections()
	srv.Close()
}

// restart serves node i again on a new address and puts the address in the map.
func (c *testCluster) restart(i int) {
	nd := c.nodes[i]
	nd.mu.Lock()
	if nd.srv != nil {
		nd.mu.Unlock()
		return
	}
	srv := c.serve(nd.handler)
	nd.srv = srv
	nd.mu.Unlock()
	c.setNode(nd.id, func(n *clustermap.Node) { n.Addr = srv.Listener.Addr().String() })
}

// setNode changes node id in the map.
func (c *testCluster) setNode(id string, fn func(*clustermap.Node)) {
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		for i := range m.Nodes {
			if m.Nodes[i].ID == id {
				fn(&m.Nodes[i])
				return nil
			}
		}
		return fmt.Errorf("no node %s", id)
	}); err != nil {
		c.tb.Fatal(err)
	}
}

// setClass replaces the STANDARD class.
func (c *testCluster) setClass(cls clustermap.Class) {
	cls.Name = clustermap.StandardClass
	if _, err := c.maps.Update(func(m *clustermap.Map) error { m.Classes[cls.Name] = cls; return nil }); err != nil {
		c.tb.Fatal(err)
	}
}

// runHints runs node i's hint delivery until the cluster closes or the returned stop is
// called.
func (c *testCluster) runHints(i int, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.nodes[i].rep.RunHints(ctx, interval)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	c.stopMu.Lock()
	c.stops = append(c.stops, stop)
	c.stopMu.Unlock()
	return stop
}

func (c *testCluster) close() {
	c.healAll() // nothing hangs on an injected fault
	c.stopMu.Lock()
	stops := c.stops
	c.stops = nil
	c.stopMu.Unlock()
	for _, s := range stops {
		s()
	}
	for _, nd := range c.nodes {
		if nd.gw != nil {
			nd.gw.Close()
		}
	}
	for i := range c.nodes {
		c.stop(i)
	}
	for _, nd := range c.nodes {
		nd.tr.CloseIdleConnections()
		if nd.hints != nil {
			nd.hints.Close()
		}
		nd.store.Close()
	}
}

// index returns the index of node id.
func (c *testCluster) index(id string) int {
	for i, nd := range c.nodes {
		if nd.id == id {
			return i
		}
	}
	c.tb.Fatalf("no node %s", id)
	return -1
}

// replicaSet returns the indexes of bucket/key's replicas (primary first) and of the
// other nodes.
func (c *testCluster) replicaSet(bucket, key string) (replicas, others []int) {
	ids, _, err := c.nodes[0].gw.topo.Placement(bucket, key)
	if err != nil {
		c.tb.Fatal(err)
	}
	in := map[int]bool{}
	for _, id := range ids {
		i := c.index(id)
		replicas = append(replicas, i)
		in[i] = true
	}
	for i := range c.nodes {
		if !in[i] {
			others = append(others, i)
		}
	}
	return replicas, others
}

// keyWhere returns the first key prefix+i whose replica indexes (primary first) satisfy ok.
func (c *testCluster) keyWhere(bucket, prefix string, ok func(replicas []int) bool) string {
	for i := range 10000 {
		k := prefix + strconv.Itoa(i)
		if r, _ := c.replicaSet(bucket, k); ok(r) {
			return k
		}
	}
	c.tb.Fatal("no key with the wanted placement")
	return ""
}

func (c *testCluster) createBucket(name string) {
	c.tb.Helper()
	if err := c.nodes[0].gw.CreateBucket(context.Background(), name, ""); err != nil {
		c.tb.Fatal(err)
	}
}

// hintsFor returns the queued entries of node i's hint queue that target node dst.
func (c *testCluster) hintsFor(i int, dst, bucket, key string) []hints.Entry {
	es, err := c.nodes[i].hints.Entries(1<<20, func(string) bool { return false })
	if err != nil {
		c.tb.Fatal(err)
	}
	var out []hints.Entry
	for _, e := range es {
		if e.Node == dst && e.Bucket == bucket && e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// md5Finish returns a reader over src and a Finish that sets the ETag to the hex MD5 of
// what was read, as the S3 layer does.
func md5Finish(src io.Reader) (io.Reader, func(*object.Object) error) {
	h := md5.New()
	return io.TeeReader(src, h), func(o *object.Object) error {
		o.ETag = hex.EncodeToString(h.Sum(nil))
		return nil
	}
}

func md5Hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// put stores body as bucket/key through g with an MD5 ETag. size -1 sends it with an
// unknown length.
func put(ctx context.Context, g *Gateway, bucket, key string, body []byte, size int64) (*object.Object, error) {
	src, fin := md5Finish(bytes.NewReader(body))
	return g.PutObject(ctx, bucket, key, &object.Object{ContentType: "application/octet-stream"}, src, size, object.PutOptions{Finish: fin})
}

func mustPut(tb testing.TB, g *Gateway, bucket, key string, body []byte) *object.Object {
	tb.Helper()
	o, err := put(context.Background(), g, bucket, key, body, int64(len(body)))
	if err != nil {
		tb.Fatalf("put %s: %v", key, err)
	}
	return o
}

// get reads n bytes at off of bucket/key through g (n < 0: to the end).
func get(ctx context.Context, g *Gateway, bucket, key string, off, n int64) ([]byte, *object.Object, error) {
	rd, err := g.OpenObject(ctx, bucket, key)
	if err != nil {
		return nil, nil, err
	}
	defer rd.Close()
	info := *rd.Info()
	if n < 0 {
		n = info.Size - off
	}
	var buf bytes.Buffer
	got, err := rd.WriteRange(ctx, &buf, off, n)
	if err != nil {
		return nil, nil, err
	}
	if got != n || int64(buf.Len()) != n {
		return nil, nil, fmt.Errorf("read %d bytes (buffer %d), want %d", got, buf.Len(), n)
	}
	return buf.Bytes(), &info, nil
}

func randBody(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// converged reports whether every replica holds version hlc (a live object with etag and
// size, or a tombstone when deleted).
func converged(rs []ReplicaState, hlc uint64, deleted bool) bool {
	for _, r := range rs {
		if r.Missing || r.Error != "" || r.HLC != hlc || r.Deleted != deleted {
			return false
		}
	}
	return len(rs) > 0
}

// waitFor polls cond (proc.Until) until it holds or d passes, and reports whether it
// held.
func waitFor(d time.Duration, cond func() bool) bool {
	return proc.Until(context.Background(), d, func() error {
		if !cond() {
			return errCondFalse
		}
		return nil
	}) == nil
}

var errCondFalse = errors.New("condition not met")

// replicaStates returns bucket/key's replicas as seen from node i.
func (c *testCluster) replicaStates(i int, bucket, key string) []ReplicaState {
	c.tb.Helper()
	rs, err := c.nodes[i].gw.Replicas(context.Background(), bucket, key)
	if err != nil {
		c.tb.Fatal(err)
	}
	return rs
}

func stateOf(rs []ReplicaState, id string) ReplicaState {
	for _, r := range rs {
		if r.Node == id {
			return r
		}
	}
	return ReplicaState{Node: id, Error: "not a replica"}
}

var _ MapSource = (*testMaps)(nil)

// TestClusterRefusesUnsignedWrites checks the helper's internode middleware and the
// gateway's handling of refusals: a node with the wrong cluster secret reaches no other
// replica, its write fails its quorum, and refusals are not queued for retry.
func TestClusterRefusesUnsignedWrites(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	bad, err := rpc.NewSecret("another-cluster-secret-entirely")
	if err != nil {
		t.Fatal(err)
	}
	nd := c.nodes[0]
	g := New(Config{NodeID: nd.id, Store: nd.store, Maps: c.maps, Apply: c.maps.apply, Hints: nd.hints, StragglerWait: 50 * time.Millisecond,
		RPC: &rpc.Client{Secret: bad, Node: nd.id, HTTP: &http.Client{Transport: nd.tr}}, Logger: testLogger()})
	defer g.Close()
	_, err = put(context.Background(), g, "b", "k", []byte("data"), 4)
	if !errors.Is(errors.Transient, err) || !strings.Contains(err.Error(), "quorum") || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("write with a wrong secret: %v; want a quorum error naming the bad signature", err)
	}
	g.Close()
	if n := nd.hints.Len(); n != 0 {
		t.Errorf("%d hints queued for refused writes", n)
	}
	for _, other := range c.nodes[1:] {
		if _, err := other.store.StatVersion("b", "k"); !errors.Is(errors.NotExist, err) {
			t.Errorf("%s stored a write with a bad signature: %v", other.id, err)
		}
	}
}

// TestClusterBucketConfig: a configuration set through one gateway is read through every
// other (it lives in the map), replaced, deleted, and refused for a missing bucket.
func TestClusterBucketConfig(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	ctx := context.Background()
	if err := c.nodes[0].gw.SetBucketConfig(ctx, "b", "cors", []byte("<CORSConfiguration/>")); err != nil {
		t.Fatal(err)
	}
	if err := c.nodes[1].gw.SetBucketConfig(ctx, "b", "tagging", []byte("<Tagging/>")); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		b, err := nd.gw.HeadBucket(ctx, "b")
		if err != nil || len(b.Config) != 2 || b.Config["cors"] != "<CORSConfiguration/>" || b.Config["tagging"] != "<Tagging/>" {
			t.Fatalf("%s: %+v %v", nd.id, b, err)
		}
	}
	if err := c.nodes[2].gw.SetBucketConfig(ctx, "b", "cors", nil); err != nil {
		t.Fatal(err)
	}
	if b, _ := c.nodes[0].gw.HeadBucket(ctx, "b"); len(b.Config) != 1 || b.Config["cors"] != "" {
		t.Fatalf("after delete: %+v", b.Config)
	}
	if err := c.nodes[0].gw.SetBucketConfig(ctx, "nope", "cors", []byte("x")); !errors.Is(errors.NotExist, err) {
		t.Fatalf("missing bucket: %v", err)
	}
}

// TestClusterUnknownSize: a body whose length is not known in advance (an S3 PUT sent
// chunked without a length) is streamed to every replica, replicated and erasure-coded.
func TestClusterUnknownSize(t *testing.T) {
	c := newECCluster(t)
	ctx := context.Background()
	for _, n := range []int{0, 100, smallBody + 1, 3<<20 + 7} {
		for _, cls := range []string{"", "EC42"} {
			data := bytes.Repeat([]byte{byte(n)}, n)
			src, fin := md5Finish(bytes.NewReader(data))
			key := fmt.Sprintf("k%d-%s", n, cls)
			if _, err := c.nodes[0].gw.PutObject(ctx, "b", key, &object.Object{StorageClass: cls}, src, -1, object.PutOptions{Finish: fin}); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			got, o, err := get(ctx, c.nodes[1].gw, "b", key, 0, -1)
			if err != nil || !bytes.Equal(got, data) || o.Size != int64(n) {
				t.Fatalf("%s: read %d bytes (%v), size %d", key, len(got), err, o.Size)
			}
		}
	}
}
