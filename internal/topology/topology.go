// Package topology is where things live in the cluster, as one gateway sees it: it turns
// the cluster map into placement tables (cached per map, recomputed only when what
// placement depends on changes, with the tables of recent placements kept so that reads
// find objects not yet moved), the targets of an object or of an erasure-coded stripe,
// and the nodes to read last: those that were slow recently (suspects) and those that
// came back recently (their copies may be stale). It does no I/O: the coordinator
// (package gateway), the erasure-coded path (package stripe) and the repair loops
// (package repair) ask it where to go, and reach the holders through the replica seam.
package topology

import (
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/placement"
)

// MapSource gives the newest cluster map this node knows.
type MapSource interface {
	Current() *clustermap.Map
}

// Maps is a MapSource that holds one map, replaced with Set: the cluster map of a node
// without Raft (a single store) and of tests.
type Maps struct {
	p atomic.Pointer[clustermap.Map]
}

// Current returns the map last set.
func (m *Maps) Current() *clustermap.Map { return m.p.Load() }

// Set replaces the map.
func (m *Maps) Set(nm *clustermap.Map) { m.p.Store(nm) }

// ShardBucket is the internal bucket that holds erasure-code shards on the storage nodes:
// no S3 bucket can have this name (S3 bucket names start with a letter or digit).
const ShardBucket = ".shards" // internal: store.InternalPrefix (TestShardBucketInternal)

// SuspectFor is how long a replica that did not answer in time is read last and not
// waited for beyond the quorum (a paused or overloaded node does not slow every write
// down).
const SuspectFor = 30 * time.Second

// Topology is the placement state of one gateway (see the package comment).
type Topology struct {
	maps    MapSource
	self    string // this node's id
	storage bool   // this node has a store: it is a target of its own partitions
	log     *slog.Logger

	tab   atomic.Pointer[Layout]
	tabMu sync.Mutex
	// shardTables caches erasure-code shard placements by class and device class.
	shardMu     sync.Mutex
	shardTables map[string]ecTable
	// suspect holds, by node id, when a replica last failed to answer within
	// StragglerWait; reads try such nodes last and writes do not wait for them.
	suspect  sync.Map
	suspects atomic.Int64 // entries in suspect
	// returned holds, by node id, until when a node that came back is read last.
	returned  sync.Map
	returning atomic.Int64 // entries in returned
}

func NewTopology(maps MapSource, self string, storage bool, log *slog.Logger) *Topology {
	return &Topology{maps: maps, self: self, storage: storage, log: log}
}

// IsLocal reports whether node id is this node with its store.
func (tp *Topology) IsLocal(id string) bool { return id == tp.self && tp.storage }

// Layout is the placement of one map: recomputed when the map changes, and only if
// what placement depends on changed (bucket and user changes do not move data).
type Layout struct {
	Map    *clustermap.Map
	Digest string // what placement depends on: layouts with equal digests place alike
	Table  *placement.Table
	Class  clustermap.Class // STANDARD in force
	// former are the tables of recent placements (newest first): until every new holder
	// has copied its share, an object may be only on a former holder.
	former []formerTable
}

// formerTable is a placement replaced at some time.
type formerTable struct {
	t     *placement.Table
	until time.Time // when reads stop asking its holders
}

// formerKeep is how long reads that find nothing on an object's holders also ask the
// holders of the placements replaced in that time, and formerMax how many are kept.
const (
	formerKeep = 30 * time.Minute
	formerMax  = 4
)

// Target is one replica of an object.
type Target struct {
	ID, Addr string
	Local    bool
	Down     bool // marked down in the map: not tried, hinted
}

func (t Target) String() string { return t.ID }

// placementNodes are the nodes that hold data: storage role, neither out nor draining
// (a draining node's partitions move to the others; it serves what it holds until
// they confirm their copies).
func placementNodes(m *clustermap.Map) []placement.Node {
	var ns []placement.Node
	for _, n := range m.PlacementNodes() {
		w := n.Weight
		if w <= 0 {
			w = 1
		}
		ns = append(ns, placement.Node{ID: n.ID, Zone: n.Zone, Host: hostOf(n.Addr), Weight: w})
	}
	return ns
}

func hostOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i]
		}
	}
	return addr
}

// Layout returns the placement of m: its Layout and the STANDARD class in force. The
// table is computed with m's placement version (placement.NewVersion); a version this
// build does not know is an Invalid error.
func (tp *Topology) Layout(m *clustermap.Map) (*Layout, error) {
	if c := tp.tab.Load(); c != nil && c.Map == m {
		return c, nil
	}
	tp.tabMu.Lock()
	defer tp.tabMu.Unlock()
	c := tp.tab.Load()
	if c != nil && c.Map == m {
		return c, nil
	}
	ns := placementNodes(m)
	cls := m.EffectiveClass(standard(m))
	p := m.Partitions
	if p <= 0 {
		p = 1
	}
	v := placement.Version(max(m.PlacementVersion, 1)) // 0: a map from before versions
	d := fmt.Sprint(v, p, cls.N, ns)
	if c != nil && c.Digest == d {
		tp.noteReturns(c, m)
		nc := *c
		nc.Map, nc.Class = m, cls
		tp.tab.Store(&nc)
		return &nc, nil
	}
	if len(ns) == 0 {
		return nil, errors.E(errors.Transient, "no storage nodes in the cluster map")
	}
	t, err := placement.NewVersion(v, ns, p, cls.N)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	nc := &Layout{Map: m, Digest: d, Table: t, Class: cls}
	tp.noteReturns(c, m)
	if c != nil {
		now := time.Now()
		nc.former = append(nc.former, formerTable{t: c.Table, until: now.Add(formerKeep)})
		for _, f := range c.former {
			if len(nc.former) < formerMax && f.until.After(now) {
				nc.former = append(nc.former, f)
			}
		}
	}
	tp.tab.Store(nc)
	return nc, nil
}

func standard(m *clustermap.Map) clustermap.Class {
	if c, ok := m.Class(clustermap.StandardClass); ok {
		return c
	}
	n := m.Replicas
	if n <= 0 {
		n = 1
	}
	return clustermap.Class{Name: clustermap.StandardClass, N: n, W: n/2 + 1, R: 1, D: n/2 + 1}
}

// Replicas returns the class in force and the targets of bucket/key, nearest first: the
// local one where it holds a copy, then those in this node's zone, then the others in
// placement order (reads with R=1 go to the first that answers, so a gateway reads
// within its zone when its zone has a copy; writes go to all in parallel anyway).
func (tp *Topology) Replicas(bucket, key string) (clustermap.Class, []Target, error) {
	m := tp.maps.Current()
	tc, err := tp.Layout(m)
	if err != nil {
		return clustermap.Class{}, nil, err
	}
	cls := tc.Class
	ids := tc.Table.Lookup(bucket, key)
	zone := ""
	if me, ok := m.Node(tp.self); ok {
		zone = me.Zone
	}
	ts := make([]Target, 0, len(ids))
	near := 0 // ts[:near] are the local target and those in this zone
	for _, id := range ids {
		n, ok := m.Node(id)
		if !ok {
			continue
		}
		tg := Target{ID: id, Addr: n.Addr, Local: tp.IsLocal(id), Down: n.State == clustermap.StateDown}
		switch {
		case tg.Local:
			ts = slices.Insert(ts, 0, tg)
			near++
		case zone != "" && n.Zone == zone:
			ts = slices.Insert(ts, near, tg)
			near++
		default:
			ts = append(ts, tg)
		}
	}
	// Reads go in this order: replicas that were slow recently, or came back recently
	// (their copies may be stale until they caught up), go last.
	if tp.suspects.Load() > 0 || tp.returning.Load() > 0 {
		late := func(id string) bool { return tp.IsSuspect(id) || tp.isReturning(id) }
		sort.SliceStable(ts, func(i, j int) bool { return !late(ts[i].ID) && late(ts[j].ID) })
	}
	return cls, ts, nil
}

// FormerReplicas returns the nodes that may still hold bucket/key although they are not
// among ts (its current holders): the draining nodes, and the holders under the
// placements this gateway saw replaced in the last formerKeep; none down or out.
func (tp *Topology) FormerReplicas(bucket, key string, ts []Target) []Target {
	m := tp.maps.Current()
	tc, err := tp.Layout(m)
	if err != nil {
		return nil
	}
	var out []Target
	seen := map[string]bool{}
	for _, t := range ts {
		seen[t.ID] = true
	}
	add := func(n clustermap.Node) {
		if seen[n.ID] || n.State == clustermap.StateDown || n.State == clustermap.StateOut {
			return
		}
		seen[n.ID] = true
		out = append(out, Target{ID: n.ID, Addr: n.Addr, Local: tp.IsLocal(n.ID)})
	}
	now := time.Now()
	for _, f := range tc.former {
		if now.After(f.until) || f.t.Partitions() != tc.Table.Partitions() {
			continue
		}
		for _, id := range f.t.Lookup(bucket, key) {
			if n, ok := m.Node(id); ok {
				add(n)
			}
		}
	}
	for _, n := range m.Nodes {
		if n.State == clustermap.StateDraining && n.HasRole(clustermap.RoleStorage) {
			add(n)
		}
	}
	return out
}

// returnWindow is how long reads ask a node that came back (down or out, then up) last:
// until its sync round and the queued writes reached it, its copies may be stale.
const returnWindow = time.Minute

// noteReturns records the nodes that are up in m but were down or out in the map of c.
func (tp *Topology) noteReturns(c *Layout, m *clustermap.Map) {
	if c == nil || c.Map == nil {
		return
	}
	for _, n := range m.Nodes {
		if n.State != clustermap.StateUp || n.ID == tp.self {
			continue
		}
		if old, ok := c.Map.Node(n.ID); ok && (old.State == clustermap.StateDown || old.State == clustermap.StateOut) {
			if _, loaded := tp.returned.Swap(n.ID, time.Now().Add(returnWindow)); !loaded {
				tp.returning.Add(1)
			}
			tp.log.Info("a node came back: reads ask it last for a while", "node", n.ID, "for", returnWindow)
		}
	}
}

// isReturning reports whether node id came back less than returnWindow ago.
func (tp *Topology) isReturning(id string) bool {
	v, ok := tp.returned.Load(id)
	if !ok {
		return false
	}
	if time.Now().After(v.(time.Time)) {
		if tp.returned.CompareAndDelete(id, v) {
			tp.returning.Add(-1)
		}
		return false
	}
	return true
}

// Table returns the placement table of the current map.
func (tp *Topology) Table() (*placement.Table, error) {
	tc, err := tp.Layout(tp.maps.Current())
	if err != nil {
		return nil, err
	}
	return tc.Table, nil
}

// Placement returns the ordered node ids that hold bucket/key (primary first).
func (tp *Topology) Placement(bucket, key string) ([]string, int, error) {
	tc, err := tp.Layout(tp.maps.Current())
	if err != nil {
		return nil, 0, err
	}
	return tc.Table.Lookup(bucket, key), placement.Partition(bucket, key, tc.Table.Partitions()), nil
}

func (tp *Topology) MarkSuspect(id string) {
	if _, loaded := tp.suspect.Swap(id, time.Now()); !loaded {
		tp.suspects.Add(1)
	}
}

func (tp *Topology) ClearSuspect(id string) {
	if tp.suspects.Load() == 0 {
		return // the common case: nothing to clear, no map access
	}
	if _, ok := tp.suspect.LoadAndDelete(id); ok {
		tp.suspects.Add(-1)
	}
}

func (tp *Topology) IsSuspect(id string) bool {
	if tp.suspects.Load() == 0 {
		return false
	}
	v, ok := tp.suspect.Load(id)
	return ok && time.Since(v.(time.Time)) < SuspectFor
}

// ListTargets are the nodes whose stores together hold every object: all storage nodes
// that are not down or out.
func (tp *Topology) ListTargets() []Target {
	m := tp.maps.Current()
	var ts []Target
	for _, n := range m.Nodes {
		if !n.HasRole(clustermap.RoleStorage) || n.State == clustermap.StateOut || n.State == clustermap.StateDown {
			continue
		}
		ts = append(ts, Target{ID: n.ID, Addr: n.Addr, Local: tp.IsLocal(n.ID)})
	}
	return ts
}

// ShardTable returns the placement of cls's shards in m: K+M distinct nodes per partition,
// among the placement nodes of its device class. With fewer nodes than that, writes are
// refused and reads get a narrower table (they search every node for what is missing).
func (tp *Topology) ShardTable(m *clustermap.Map, cls clustermap.Class, forWrite bool) (*placement.Table, error) {
	k, p := cls.Shards()
	var ns []placement.Node
	for _, n := range placementNodes(m) {
		if nd, _ := m.Node(n.ID); cls.DeviceClass == "" || nd.DeviceClass == cls.DeviceClass {
			ns = append(ns, n)
		}
	}
	if len(ns) < k+p && forWrite {
		what := "storage nodes"
		if cls.DeviceClass != "" {
			what += " of device class " + cls.DeviceClass
		}
		return nil, errors.Errorf("", errors.Transient, "class %s needs %d %s for its shards, %d are in placement", cls.Name, k+p, what, len(ns))
	}
	if len(ns) == 0 {
		return nil, errors.E(errors.Transient, "no storage nodes in placement")
	}
	width := min(k+p, len(ns)) // reads look further when nodes are missing
	v := placement.Version(max(m.PlacementVersion, 1))
	d := fmt.Sprint(v, m.Partitions, width, ns)
	tp.shardMu.Lock()
	defer tp.shardMu.Unlock()
	if t, ok := tp.shardTables[cls.Name+"|"+cls.DeviceClass]; ok && t.digest == d {
		return t.t, nil
	}
	t, err := placement.NewVersion(v, ns, max(m.Partitions, 1), width)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	if tp.shardTables == nil {
		tp.shardTables = map[string]ecTable{}
	}
	tp.shardTables[cls.Name+"|"+cls.DeviceClass] = ecTable{digest: d, t: t}
	return t, nil
}

// ShardTargets returns the K+M nodes of a stripe, shard j on the j-th.
func (tp *Topology) ShardTargets(m *clustermap.Map, t *placement.Table, stripe string) []Target {
	ids := t.Nodes(placement.Partition(ShardBucket, stripe, t.Partitions()))
	ts := make([]Target, len(ids))
	for j, id := range ids {
		n, _ := m.Node(id)
		ts[j] = Target{ID: id, Addr: n.Addr, Local: tp.IsLocal(id), Down: n.State == clustermap.StateDown}
	}
	return ts
}

type ecTable struct {
	digest string
	t      *placement.Table
}

// Gather runs fn for every target in parallel and returns the results in target order.
func Gather[T any](ts []Target, fn func(Target) (T, error)) ([]T, []error) {
	out := make([]T, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = fn(t)
		}()
	}
	wg.Wait()
	return out, errs
}
