package volume

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

var (
	ecCutSeed = flag.Uint64("eccut.seed", 0, "run TestECPowerCut with this seed only")
	ecCutRuns = flag.Int("eccut.runs", 0, "TestECPowerCut seeds (0: 10, 5 with -race, 3 with -short)")
)

// pcNode is one node of a power-cut cluster: its store on a crashable memory file
// system. A power cut keeps what the file system had synced (and, in some cuts, a random
// share of what it had not: vfs.CrashClone), and the node answers nothing until it is
// started again from that.
type pcNode struct {
	id  string
	mu  sync.Mutex
	cur *pcLife
}

// pcLife is one run of a node, from its start to its power cut.
type pcLife struct {
	fs    *vfs.MemFS
	st    *store.Store
	local *replica.Local
	off   bool           // its power was cut: calls fail as unreachable
	clone *vfs.MemFS     // what survived the cut
	calls sync.WaitGroup // calls in flight on st
}

func pcStoreConfig(fs vfs.FS) store.Config {
	return store.Config{Dir: "/data", FS: fs, InlineMax: 16 << 10, ChunkSize: 256 << 10, SegmentSize: 4 << 20, Reserve: 1,
		CompactInterval: time.Hour, Logger: slog.New(slog.DiscardHandler), Clock: new(hlc.Clock)}
}

// start opens the node's store on fs.
func (n *pcNode) start(fs *vfs.MemFS, fence func(object.RangeWrite) error) error {
	st, err := store.Open(pcStoreConfig(fs))
	if err != nil {
		return fmt.Errorf("node %s does not start after the power cut: %w", n.id, err)
	}
	n.mu.Lock()
	n.cur = &pcLife{fs: fs, st: st, local: &replica.Local{Node: n.id, Store: st, Fence: fence}}
	n.mu.Unlock()
	return nil
}

// cut cuts the node's power now.
func (n *pcNode) cut(cfg vfs.CrashCloneCfg) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur.off {
		return
	}
	n.cur.off = true
	n.cur.clone = n.cur.fs.CrashClone(cfg)
}

// restart starts a node whose power was cut from what survived.
func (n *pcNode) restart(fence func(object.RangeWrite) error) error {
	n.mu.Lock()
	life := n.cur
	n.mu.Unlock()
	if !life.off {
		return nil
	}
	life.calls.Wait()
	life.st.Close()
	return n.start(life.clone, fence)
}

func (n *pcNode) isOff() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur.off
}

// enter returns the node's current life for a call, or an error if it is off.
func (n *pcNode) enter() (*pcLife, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur.off {
		return nil, errors.E(errors.Transient, fmt.Errorf("node %s: unreachable (power cut)", n.id))
	}
	n.cur.calls.Add(1)
	return n.cur, nil
}

// leave ends a call on life: its answer is lost if the power was cut meanwhile.
func (n *pcNode) leave(life *pcLife, err error) error {
	life.calls.Done()
	n.mu.Lock()
	defer n.mu.Unlock()
	if life.off {
		return errors.E(errors.Transient, fmt.Errorf("node %s: no answer (power cut during the call)", n.id))
	}
	return err
}

// pcWriter is one lease holder's view of the cluster: once its own node's power is cut
// (dead), nothing it sends arrives any more.
type pcWriter struct {
	node string
	dead atomic.Bool
	// limit, if positive, is how many shard writes (intents and shards) the writer
	// sends before it stops (stopped; the test cuts its power once the operation
	// returned): it dies between two of them, in the order it sends them, and those it
	// sent arrive.
	limit, sent atomic.Int64
	stopped     atomic.Bool
	// only, if set (before the operation), says which shard writes it sends; it dies
	// before the others.
	only func(phase, shard int) bool
}

// pcReplica is how a writer reaches node n: Stat, Open and WriteRange are what the
// erasure-coded path uses (the embedded Replica, the node's store when the view was
// made, serves the rest).
type pcReplica struct {
	replica.Replica
	n  *pcNode
	w  *pcWriter
	pc *pcCluster
}

// gone says whether the writer died or stopped.
func (w *pcWriter) gone() bool { return w.dead.Load() || w.stopped.Load() }

func (r *pcReplica) errDead() error {
	return errors.E(errors.Permission, fmt.Errorf("node %s lost power: its calls do not arrive", r.w.node))
}

func (r *pcReplica) Stat(ctx context.Context, bucket, key string) (*object.Object, error) {
	if r.w.dead.Load() {
		return nil, r.errDead()
	}
	life, err := r.n.enter()
	if err != nil {
		return nil, err
	}
	o, err := life.local.Stat(ctx, bucket, key)
	if err = r.n.leave(life, err); err != nil {
		return nil, err
	}
	return o, nil
}

func (r *pcReplica) Open(ctx context.Context, bucket, key string, o replica.OpenOptions) (replica.Reader, error) {
	if r.w.dead.Load() {
		return nil, r.errDead()
	}
	life, err := r.n.enter()
	if err != nil {
		return nil, err
	}
	// The body is read from the store of this life: a cut during the read loses the
	// answer (leave, when the reader is closed, is not checked: the bytes read were
	// read before the cut).
	rd, err := life.local.Open(ctx, bucket, key, o)
	if err != nil {
		return nil, r.n.leave(life, err)
	}
	return &pcReader{Reader: rd, n: r.n, life: life}, nil
}

type pcReader struct {
	replica.Reader
	n    *pcNode
	life *pcLife
	once sync.Once
}

func (rd *pcReader) Close() error {
	err := rd.Reader.Close()
	rd.once.Do(func() { rd.life.calls.Done() })
	return err
}

func (r *pcReplica) WriteRange(ctx context.Context, w object.RangeWrite) (*object.Object, error) {
	if r.w.dead.Load() {
		return nil, r.errDead()
	}
	k, kind, side := r.pc.armedCall(w.Key)
	call := fmt.Sprintf("write call %d (%s, on %s)", k, kind, r.n.id)
	if side == "before" {
		r.pc.cutNow("before " + call)
		if r.w.dead.Load() {
			return nil, r.errDead()
		}
	}
	life, err := r.n.enter()
	if err != nil {
		return nil, err
	}
	var during sync.WaitGroup
	if side == "during" {
		spins := r.pc.spins()
		during.Add(1)
		go func() {
			defer during.Done()
			for range spins {
				runtime.Gosched()
			}
			r.pc.cutNow("during " + call)
		}()
	}
	o, err := life.local.WriteRange(ctx, w)
	during.Wait()
	if side == "after" {
		r.pc.cutNow("after " + call)
	}
	if err = r.n.leave(life, err); err != nil {
		return nil, err
	}
	if r.w.dead.Load() {
		return nil, r.errDead() // the answer does not reach a writer without power
	}
	return o, nil
}

func keyKind(key string) string {
	if strings.HasSuffix(key, "i") {
		return "intent"
	}
	return "shard"
}

// kindAt names write call k (1-based) of the operation by the calls before it: the
// n-th intent, or shard write, of a phase ("intent 1".."intent 6", "shard 1".."shard 6").
func kindAt(kinds []string) string {
	k := kinds[len(kinds)-1]
	n := 0
	for x := len(kinds) - 1; x >= 0 && kinds[x] == k; x-- {
		n++
	}
	return fmt.Sprint(k, " ", n)
}

// pcCluster is six nodes (4+2, W=5), each store on its own crashable file system.
type pcCluster struct {
	t     *testing.T
	maps  *topology.Maps
	nodes map[string]*pcNode
	ids   []string
	fence func(object.RangeWrite) error

	mu       sync.Mutex
	armed    bool
	calls    int      // write calls since armed
	at       int      // the call the cut comes at (1-based)
	side     string   // before, during or after it
	victims  []string // the nodes whose power is cut
	stayDown int      // how many of them stay off (and are marked down) for the next lease
	cutCfg   []vfs.CrashCloneCfg
	spinN    int
	writer   *pcWriter
	cutHow   string // where the cut came, "" if it has not yet
	kinds    []string
	restarts sync.WaitGroup
}

func newPCCluster(t *testing.T) *pcCluster {
	m := &clustermap.Map{Epoch: 1, Partitions: 16, Replicas: 3,
		Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2},
			"EC42": {Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2}},
		Buckets: map[string]clustermap.Bucket{clustermap.VolumeBucket: {Name: clustermap.VolumeBucket}},
		Volumes: map[string]clustermap.Volume{"ev": {Name: "ev", ID: "00000000000000ec", Size: ecSize, BlockSize: blockSize, Class: "EC42", Holder: "n1", Epoch: 1,
			Nodes: []string{"n1", "n2", "n3", "n4", "n5", "n6"}}}}
	pc := &pcCluster{t: t, maps: &topology.Maps{}, nodes: map[string]*pcNode{}}
	pc.fence = Fence(pc.maps, nil)
	for i := range 6 {
		id := "n" + strconv.Itoa(i+1)
		m.Nodes = append(m.Nodes, clustermap.Node{ID: id, Addr: "127.0.0.1:" + strconv.Itoa(7301+i), Zone: "z" + strconv.Itoa(i),
			Weight: 1, State: clustermap.StateUp, Roles: []string{clustermap.RoleStorage, clustermap.RoleGateway}})
		n := &pcNode{id: id}
		fs := vfs.NewCrashableMem()
		if err := n.start(fs, pc.fence); err != nil {
			t.Fatal(err)
		}
		if err := n.cur.st.CreateBucket(ECBucket); err != nil {
			t.Fatal(err)
		}
		pc.nodes[id] = n
		pc.ids = append(pc.ids, id)
	}
	pc.maps.Set(m)
	t.Cleanup(func() {
		pc.restarts.Wait()
		for _, n := range pc.nodes {
			n.cur.calls.Wait()
			n.cur.st.Close()
		}
	})
	return pc
}

func (pc *pcCluster) setMap(fn func(m *clustermap.Map)) {
	m := pc.maps.Current().Clone()
	fn(m)
	m.Epoch++
	pc.maps.Set(m)
}

func (pc *pcCluster) setDown(id string, down bool) {
	pc.setMap(func(m *clustermap.Map) {
		for i := range m.Nodes {
			if m.Nodes[i].ID == id {
				m.Nodes[i].State = clustermap.StateUp
				if down {
					m.Nodes[i].State = clustermap.StateDown
				}
			}
		}
	})
}

// lease moves the lease of volume ev to node self at a new epoch and returns its device.
func (pc *pcCluster) lease(t *testing.T, self string) (*conn, *pcWriter) {
	t.Helper()
	pc.setMap(func(m *clustermap.Map) {
		v := m.Volumes["ev"]
		v.Epoch++
		v.Holder = self
		m.Volumes["ev"] = v
	})
	w := &pcWriter{node: self}
	topo := topology.NewTopology(pc.maps, self, true, slog.New(slog.DiscardHandler))
	s := New(Config{Self: self, Maps: pc.maps, Topology: topo, WriteTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Replica: func(t topology.Target) replica.Replica {
			n := pc.nodes[t.ID]
			n.mu.Lock()
			local := n.cur.local
			n.mu.Unlock()
			return &pcReplica{Replica: local, n: n, w: w, pc: pc}
		},
		// The writer dies with its node: it sends nothing more (calls already sent
		// arrive or not with their holders).
		crash: func(phase, shard int) bool {
			if w.only != nil {
				w.stopped.Store(true) // (once the operation returned)
				return !w.only(phase, shard)
			}
			if l := w.limit.Load(); l > 0 && w.sent.Add(1) > l && !w.stopped.Swap(true) {
				pc.cutNow(fmt.Sprintf("when the writer had sent %d shard writes", l))
			}
			return w.dead.Load() || w.stopped.Load()
		},
		retry: time.Millisecond})
	d, _, err := s.Open(context.Background(), "ev")
	if err != nil {
		t.Fatal(err)
	}
	return d.(*conn), w
}

// arm makes the power cut of victims come at write call at (side before, during or
// after it) of the operations that follow, by writer w.
func (pc *pcCluster) arm(w *pcWriter, at int, side string, victims []string, stayDown int, cfgs []vfs.CrashCloneCfg, spins int) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.armed, pc.calls, pc.at, pc.side = true, 0, at, side
	pc.victims, pc.stayDown, pc.cutCfg, pc.spinN, pc.writer, pc.cutHow = victims, stayDown, cfgs, spins, w, ""
}

// armedCall counts a write call and says whether the cut comes with it.
func (pc *pcCluster) armedCall(key string) (int, string, string) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if !pc.armed {
		return 0, "", ""
	}
	pc.calls++
	pc.kinds = append(pc.kinds, keyKind(key))
	if pc.calls == pc.at {
		return pc.calls, kindAt(pc.kinds), pc.side
	}
	return pc.calls, "", ""
}

func (pc *pcCluster) spins() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.spinN
}

// cutNow cuts the power of the armed victims at once, each keeping what its file system
// synced (and maybe some of what it did not); the writer dies if its node is one. The
// victims that do not stay down start again from what survived (in the background: a
// writer that lives on retries them until they answer); those that stay down are marked
// down.
func (pc *pcCluster) cutNow(how string) {
	pc.mu.Lock()
	if !pc.armed {
		pc.mu.Unlock()
		return
	}
	pc.armed = false
	pc.cutHow = how
	victims, stay, cfgs, w := pc.victims, pc.stayDown, pc.cutCfg, pc.writer
	pc.mu.Unlock()
	for x, id := range victims {
		pc.nodes[id].cut(cfgs[x])
		if id == w.node && w.limit.Load() == 0 {
			w.dead.Store(true) // (with a limit, it stopped sending: what it sent arrives)
		}
	}
	for x, id := range victims {
		if x < stay {
			pc.setDown(id, true)
			continue
		}
		pc.restarts.Add(1)
		go func() {
			defer pc.restarts.Done()
			if err := pc.nodes[id].restart(pc.fence); err != nil {
				pc.t.Error(err)
			}
		}()
	}
}

// disarm ends an operation under test: the cut comes now if it has not yet (after the
// operation returned), and every victim that does not stay down is started again.
func (pc *pcCluster) disarm(how string) string {
	pc.mu.Lock()
	w := pc.writer
	pc.mu.Unlock()
	w.limit.Store(0)
	pc.cutNow(how)
	pc.restarts.Wait()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	pc.kinds = nil
	return pc.cutHow
}

// up starts again every node that stayed off and marks it up.
func (pc *pcCluster) up(t *testing.T) {
	for _, id := range pc.ids {
		n := pc.nodes[id]
		if n.isOff() {
			if err := n.restart(pc.fence); err != nil {
				t.Fatal(err)
			}
			pc.setDown(id, false)
		}
	}
}

func (pc *pcCluster) onNodes() []string {
	var on []string
	for _, id := range pc.ids {
		if !pc.nodes[id].isOff() {
			on = append(on, id)
		}
	}
	return on
}

// TestECPowerCut cuts the power of shard holders of an erasure-coded volume (4+2, W=5,
// six in-process stores, each on its own crashable file system) while a write or a
// repair is in flight, under random writes (aligned and unaligned, zeroes, trims) checked
// against a byte model. Each cut takes one to three nodes, sometimes all six, often the
// writer's own node; it comes before, during (concurrently with the store's write) or
// after a random one of the operation's write calls to the holders: among the intents,
// between the intents and the shards, among the shard writes, during a repair's own
// writes, or after the operation returned. A cut keeps what each victim's file system had
// synced, and in half of them a random share of what it had not. The victims start again
// from what survived (a writer that lives on retries them meanwhile), except up to two
// that stay off, marked down, for the next lease. A new lease's device, on another node
// or the same, then checks:
//
//   - every acknowledged write reads back (the whole volume is the model);
//   - the write in flight at the cut reads, over its whole range, as exactly its old or
//     its new content (new if it was acknowledged), and the same ever after: once the
//     nodes that stayed off return, under later leases, after later cuts;
//   - writes go on after.
//
// A failure prints the seed; rerun it with -eccut.seed=N.
func TestECPowerCut(t *testing.T) {
	runs, rounds := *ecCutRuns, 14
	if runs == 0 {
		runs = 10
		switch {
		case testing.Short():
			runs, rounds = 3, 10
		case raceBuild: // make test runs the full test without the race detector too (test-long)
			runs, rounds = 2, 10
		}
	}
	seeds := make([]uint64, runs)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	if *ecCutSeed != 0 {
		seeds = []uint64{*ecCutSeed}
	}
	// First the cases the random runs found (and those like them): a torn repair of a
	// half-written write, its intents sent to the first 1-3 holders, or to some.
	for intents := 1; intents < 4; intents++ {
		t.Run(fmt.Sprintf("torn repair after %d intents", intents), func(t *testing.T) { ecTornRepair(t, intents, nil) })
	}
	for _, to := range [][]int{{3}, {4, 5}, {3, 4, 5}, {0, 3}, {0, 1, 3, 4}} {
		t.Run(fmt.Sprintf("torn repair with intents to %v", to), func(t *testing.T) { ecTornRepair(t, 0, to) })
	}
	where := map[string]int{}
	outcomes := map[string]int{}
	for _, seed := range seeds {
		ok := t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			ecPowerCutRun(t, seed, rounds, where, outcomes)
		})
		if !ok {
			t.Logf("TestECPowerCut failed with seed %d: rerun with go test -run TestECPowerCut ./internal/volume/ -eccut.seed=%d -v", seed, seed)
			return
		}
	}
	var ks []string
	for k := range where {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		fmt.Fprintf(&b, " %s:%d", k, where[k])
	}
	t.Logf("%d seeds; cuts by where they came:%s; outcomes %v", len(seeds), b.String(), outcomes)
}

func ecPowerCutRun(t *testing.T, seed uint64, rounds int, where, outcomes map[string]int) {
	pc := newPCCluster(t)
	rng := rand.New(rand.NewPCG(seed, 0xec))
	model := make([]byte, ecSize)
	d, w := pc.lease(t, "n1")
	check := func(d *conn, what string) {
		t.Helper()
		got := make([]byte, ecSize)
		if _, err := d.ReadAt(got, 0); err != nil {
			t.Fatalf("%s: read of the volume: %v", what, err)
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("%s: the volume differs from the model at byte %d", what, firstDiff(got, model))
		}
	}
	// random picks a write: data, zeroes or a trim, aligned or not, across objects or
	// (inOne) inside one data object.
	random := func(inOne bool) (off int64, p []byte, kind string) {
		n := 1 + rng.IntN(40<<10)
		if rng.IntN(3) == 0 {
			n = (1 + rng.IntN(10)) * ECStripe
		}
		off = rng.Int64N(ecSize - int64(n))
		if inOne {
			i := rng.Int64N(ecSize / blockSize)
			off = i*blockSize + rng.Int64N(blockSize-int64(n))
		}
		if rng.IntN(2) == 0 {
			off &^= ECStripe - 1
		}
		p = make([]byte, n)
		switch rng.IntN(6) {
		case 0:
			kind = "trim"
		case 1:
			kind = "zeroes"
		default:
			kind = "data"
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
		}
		return off, p, kind
	}
	do := func(d *conn, off int64, p []byte, kind string) error {
		switch kind {
		case "trim":
			return d.Trim(off, int64(len(p)))
		case "zeroes":
			return d.WriteZeroes(off, int64(len(p)))
		}
		_, err := d.WriteAt(p, off)
		return err
	}
	// armCut picks the victims of the next cut and where it comes.
	armCut := func(w *pcWriter, maxCalls int) string {
		var victims []string
		on := pc.onNodes()
		switch r := rng.IntN(8); {
		case r == 0: // every node that has power
			victims = on
		default:
			perm := rng.Perm(len(on))
			for _, x := range perm[:min(len(on), 1+rng.IntN(3))] {
				victims = append(victims, on[x])
			}
			if rng.IntN(2) == 0 && !slices.Contains(victims, w.node) { // the writer's own node
				victims[0] = w.node
			}
		}
		stay := 0
		switch r := rng.IntN(8); {
		case r < 2 && len(victims) < len(on):
			stay = 1
		case r == 2 && len(victims) >= 2 && len(victims) < len(on):
			stay = 2
		}
		// At most M nodes off at once for the next lease: with more, nothing reads.
		stay = min(stay, 2-(len(pc.ids)-len(pc.onNodes())))
		cfgs := make([]vfs.CrashCloneCfg, len(victims))
		for x := range cfgs {
			if rng.IntN(2) == 0 {
				cfgs[x] = vfs.CrashCloneCfg{UnsyncedDataPercent: 10 + rng.IntN(80), RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
			}
		}
		at := 1 + rng.IntN(maxCalls+1) // maxCalls+1: after the operation
		side := []string{"before", "during", "after"}[rng.IntN(3)]
		if rng.IntN(6) == 0 { // between the phases of a write (of the first, in a repair)
			at, side = 7, "before"
		}
		if slices.Contains(victims, w.node) && rng.IntN(2) == 0 {
			// The writer's node dies after exactly at-1 sends, in the order it sends
			// them; those sent arrive (or not, with their holders' power).
			w.sent.Store(0)
			w.limit.Store(int64(at - 1))
			pc.arm(w, 1<<30, "", victims, stay, cfgs, 0)
			return fmt.Sprintf("victims %v (writer %s, %d stay down), when the writer had sent %d", victims, w.node, stay, at-1)
		}
		pc.arm(w, at, side, victims, stay, cfgs, rng.IntN(40))
		return fmt.Sprintf("victims %v (writer %s, %d stay down), at call %d %s", victims, w.node, stay, at, side)
	}
	// newLease moves the lease to a node that has power.
	newLease := func() (*conn, *pcWriter) {
		on := pc.onNodes()
		return pc.lease(t, on[rng.IntN(len(on))])
	}
	for round := range rounds {
		// Acknowledged writes.
		for range 2 + rng.IntN(5) {
			off, p, kind := random(false)
			if err := do(d, off, p, kind); err != nil {
				t.Fatalf("round %d: %s at %d: %v", round, kind, off, err)
			}
			copy(model[off:], p)
		}
		// The write under test, inside one data object, with a cut somewhere.
		off, p, kind := random(true)
		old := slices.Clone(model[off : off+int64(len(p))])
		plan := armCut(w, 12)
		err := do(d, off, p, kind)
		how := pc.disarm("after the write returned")
		where["write: "+cutPhase(how)]++
		acked := err == nil
		if !acked && strings.Contains(how, "returned") {
			t.Fatalf("round %d: the write failed before any cut: %v", round, err)
		}
		what := fmt.Sprintf("round %d, %s of %d at %d (%s; cut %s; the write returned %v)", round, kind, len(p), off, plan, how, err)
		// The next lease reads the write's range; in some rounds that first read, which
		// repairs a torn object, is cut too.
		var got []byte
		for try := 0; got == nil; try++ {
			d, w = newLease()
			repairCut := try == 0 && rng.IntN(3) == 0
			rplan := ""
			if repairCut {
				rplan = armCut(w, 14)
			}
			buf := make([]byte, len(p))
			_, rerr := d.ReadAt(buf, off)
			rhow := ""
			if repairCut {
				rhow = pc.disarm("after the read returned")
				where["repair: "+cutPhase(rhow)]++
			}
			switch {
			case rerr == nil:
				got = buf
			case try > 3:
				t.Fatalf("%s: the next leases cannot read it: %v", what, rerr)
			case repairCut && !strings.Contains(rhow, "returned"):
				t.Logf("%s: the first read under the next lease was cut (%s; %s): %v", what, rplan, rhow, rerr)
			default:
				// Too many holders off: the torn object waits for them.
				t.Logf("%s: the next lease cannot read it yet: %v", what, rerr)
				pc.up(t)
			}
		}
		switch {
		case bytes.Equal(got, p):
			outcomes["new"]++
		case acked:
			t.Fatalf("%s: an acknowledged write does not read back (first difference at %d)", what, firstDiff(got, p))
		case bytes.Equal(got, old):
			outcomes["old"]++
		default:
			t.Fatalf("%s: the write in flight reads as neither its old nor its new content", what)
		}
		copy(model[off:], got)
		if w.gone() { // the reader's own node was cut after its read
			d, w = newLease()
		}
		check(d, what+", the next lease")
		// The nodes that stayed off return: nothing changes, and the next use of what
		// they missed catches them up (a rebuild of their shards by this lease, or a
		// whole rewrite by the next), which is cut in some rounds.
		pc.up(t)
		check(d, what+", the nodes back")
		if rng.IntN(3) == 0 {
			cplan := armCut(w, 12)
			got := make([]byte, ecSize)
			_, err := d.ReadAt(got, 0)
			chow := pc.disarm("after the read returned")
			where["catch-up: "+cutPhase(chow)]++
			if err == nil && !bytes.Equal(got, model) {
				t.Fatalf("%s, the catch-up of the nodes back (cut %s; %s): the volume differs from the model at byte %d", what, cplan, chow, firstDiff(got, model))
			}
			pc.up(t)
		}
		d, w = newLease()
		check(d, what+", the nodes back, a new lease")
	}
}

// cutPhase names where a cut came from its description.
func cutPhase(how string) string {
	side := strings.Fields(how)[0]
	var sent int
	if _, err := fmt.Sscanf(how, "when the writer had sent %d", &sent); err == nil {
		switch {
		case sent < 6:
			return "writer's node after an intent"
		case sent == 6:
			return "writer's node between intents and shards"
		default:
			return "writer's node after a shard write"
		}
	}
	switch {
	case strings.Contains(how, "returned"):
		return "after it returned"
	case strings.Contains(how, "(shard 1,") && side == "before":
		return "between intents and shards"
	case strings.Contains(how, "intent"):
		return side + " an intent"
	default:
		return side + " a shard write"
	}
}

// ecTornRepair: the writer's node loses power after a write's six intents and three of
// its six shards (neither version has K shards at its order; every holder has the
// intent), and the next lease's node after its repair of the object (a whole write of
// the new content at a new order) sent intents intents (fewer than K), or, if to is
// set, its intents to those shards only. The lease after
// must read the object, as its old or its new content: the new content is still
// reachable by K shards (those at the write's order, those whose intent still leads to
// it, and those whose repair intent holds it), even though no order has K shards at it.
func ecTornRepair(t *testing.T, intents int, to []int) {
	pc := newPCCluster(t)
	d, w := pc.lease(t, "n1")
	model := bytes.Repeat([]byte{1}, 64<<10)
	if _, err := d.WriteAt(model, 0); err != nil {
		t.Fatal(err)
	}
	p := bytes.Repeat([]byte{2}, 8<<10)
	w.limit.Store(9) // six intents, three shards
	pc.arm(w, 1<<30, "", []string{"n1"}, 0, make([]vfs.CrashCloneCfg, 1), 0)
	if _, err := d.WriteAt(p, 0); err == nil {
		t.Fatal("the torn write was answered")
	}
	pc.disarm("after the write returned")
	d, w = pc.lease(t, "n2")
	if to != nil {
		w.only = func(phase, j int) bool { return phase == 1 && slices.Contains(to, j) }
	} else {
		w.limit.Store(int64(intents))
	}
	pc.arm(w, 1<<30, "", []string{"n2"}, 0, make([]vfs.CrashCloneCfg, 1), 0)
	if _, err := d.ReadAt(make([]byte, len(p)), 0); err == nil {
		t.Fatal("the read that repairs was answered")
	}
	pc.disarm("after the repair returned")
	d, _ = pc.lease(t, "n3")
	got := make([]byte, len(model))
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatalf("the lease after a torn repair cannot read the object: %v", err)
	}
	switch {
	case bytes.Equal(got[:len(p)], p):
		copy(model, p)
	case !bytes.Equal(got[:len(p)], model[:len(p)]):
		t.Fatal("the torn write reads as neither its old nor its new content")
	}
	if !bytes.Equal(got, model) {
		t.Fatalf("the object differs from the model at byte %d", firstDiff(got, model))
	}
	// Writes go on, and the next lease reads them.
	if _, err := d.WriteAt(bytes.Repeat([]byte{3}, 5000), 3000); err != nil {
		t.Fatal(err)
	}
	copy(model[3000:8000], bytes.Repeat([]byte{3}, 5000))
	d, _ = pc.lease(t, "n4")
	if got := readAt(t, d, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatalf("after the repair: the object differs from the model at byte %d", firstDiff(got, model))
	}
}
