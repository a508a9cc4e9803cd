package gateway

// This file is the gateway's topology: where objects and shards live and how far each
// holder is to be trusted right now. It turns the cluster map into placement tables
// (cached per map, recomputed only when what placement depends on changes, with the
// tables of recent placements kept so that reads find objects not yet moved), the
// targets of an object or a stripe, and the nodes to read last: those that were slow
// recently (suspects) and those that came back recently (their copies may be stale).
// It does no I/O: the coordinator and the repair loops ask it where to go, and reach
// the holders through the replica seam.

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/placement"
)

// topology is the placement state of one gateway (see the top of this file).
type topology struct {
	maps    MapSource
	self    string // this node's id
	storage bool   // this node has a store: it is a target of its own partitions
	log     *slog.Logger

	tab   atomic.Pointer[tableCache]
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

func newTopology(maps MapSource, self string, storage bool, log *slog.Logger) *topology {
	return &topology{maps: maps, self: self, storage: storage, log: log}
}

// isLocal reports whether node id is this node with its store.
func (tp *topology) isLocal(id string) bool { return id == tp.self && tp.storage }

// tableCache is the placement of one map: recomputed when the map changes, and only if
// what placement depends on changed (bucket and user changes do not move data).
type tableCache struct {
	m      *clustermap.Map
	digest string
	t      *placement.Table
	cls    clustermap.Class // STANDARD in force
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

// target is one replica of an object.
type target struct {
	id, addr string
	local    bool
	down     bool // marked down in the map: not tried, hinted
}

func (t target) String() string { return t.id }

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

// table returns the placement of m: its table and the STANDARD class in force.
func (tp *topology) table(m *clustermap.Map) (*tableCache, error) {
	if c := tp.tab.Load(); c != nil && c.m == m {
		return c, nil
	}
	tp.tabMu.Lock()
	defer tp.tabMu.Unlock()
	c := tp.tab.Load()
	if c != nil && c.m == m {
		return c, nil
	}
	ns := placementNodes(m)
	cls := m.EffectiveClass(standard(m))
	p := m.Partitions
	if p <= 0 {
		p = 1
	}
	d := fmt.Sprint(p, cls.N, ns)
	if c != nil && c.digest == d {
		tp.noteReturns(c, m)
		nc := *c
		nc.m, nc.cls = m, cls
		tp.tab.Store(&nc)
		return &nc, nil
	}
	if len(ns) == 0 {
		return nil, errors.E(errors.Transient, "no storage nodes in the cluster map")
	}
	t, err := placement.New(ns, p, cls.N)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	nc := &tableCache{m: m, digest: d, t: t, cls: cls}
	tp.noteReturns(c, m)
	if c != nil {
		now := time.Now()
		nc.former = append(nc.former, formerTable{t: c.t, until: now.Add(formerKeep)})
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

// replicas returns the class in force and the targets of bucket/key, local one first
// where it holds a copy (reads prefer it; writes go to all in parallel anyway).
func (tp *topology) replicas(bucket, key string) (clustermap.Class, []target, error) {
	m := tp.maps.Current()
	tc, err := tp.table(m)
	if err != nil {
		return clustermap.Class{}, nil, err
	}
	cls := tc.cls
	ids := tc.t.Lookup(bucket, key)
	ts := make([]target, 0, len(ids))
	for _, id := range ids {
		n, ok := m.Node(id)
		if !ok {
			continue
		}
		tg := target{id: id, addr: n.Addr, local: tp.isLocal(id), down: n.State == clustermap.StateDown}
		if tg.local {
			ts = append([]target{tg}, ts...)
		} else {
			ts = append(ts, tg)
		}
	}
	// Reads go in this order: replicas that were slow recently, or came back recently
	// (their copies may be stale until they caught up), go last.
	if tp.suspects.Load() > 0 || tp.returning.Load() > 0 {
		late := func(id string) bool { return tp.isSuspect(id) || tp.isReturning(id) }
		sort.SliceStable(ts, func(i, j int) bool { return !late(ts[i].id) && late(ts[j].id) })
	}
	return cls, ts, nil
}

// formerReplicas returns the nodes that may still hold bucket/key although they are not
// among ts (its current holders): the draining nodes, and the holders under the
// placements this gateway saw replaced in the last formerKeep; none down or out.
func (tp *topology) formerReplicas(bucket, key string, ts []target) []target {
	m := tp.maps.Current()
	tc, err := tp.table(m)
	if err != nil {
		return nil
	}
	var out []target
	seen := map[string]bool{}
	for _, t := range ts {
		seen[t.id] = true
	}
	add := func(n clustermap.Node) {
		if seen[n.ID] || n.State == clustermap.StateDown || n.State == clustermap.StateOut {
			return
		}
		seen[n.ID] = true
		out = append(out, target{id: n.ID, addr: n.Addr, local: tp.isLocal(n.ID)})
	}
	now := time.Now()
	for _, f := range tc.former {
		if now.After(f.until) || f.t.Partitions() != tc.t.Partitions() {
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
func (tp *topology) noteReturns(c *tableCache, m *clustermap.Map) {
	if c == nil || c.m == nil {
		return
	}
	for _, n := range m.Nodes {
		if n.State != clustermap.StateUp || n.ID == tp.self {
			continue
		}
		if old, ok := c.m.Node(n.ID); ok && (old.State == clustermap.StateDown || old.State == clustermap.StateOut) {
			if _, loaded := tp.returned.Swap(n.ID, time.Now().Add(returnWindow)); !loaded {
				tp.returning.Add(1)
			}
			tp.log.Info("a node came back: reads ask it last for a while", "node", n.ID, "for", returnWindow)
		}
	}
}

// isReturning reports whether node id came back less than returnWindow ago.
func (tp *topology) isReturning(id string) bool {
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
func (tp *topology) Table() (*placement.Table, error) {
	tc, err := tp.table(tp.maps.Current())
	if err != nil {
		return nil, err
	}
	return tc.t, nil
}

// Placement returns the ordered node ids that hold bucket/key (primary first).
func (tp *topology) Placement(bucket, key string) ([]string, int, error) {
	tc, err := tp.table(tp.maps.Current())
	if err != nil {
		return nil, 0, err
	}
	return tc.t.Lookup(bucket, key), placement.Partition(bucket, key, tc.t.Partitions()), nil
}

func (tp *topology) markSuspect(id string) {
	if _, loaded := tp.suspect.Swap(id, time.Now()); !loaded {
		tp.suspects.Add(1)
	}
}

func (tp *topology) clearSuspect(id string) {
	if tp.suspects.Load() == 0 {
		return // the common case: nothing to clear, no map access
	}
	if _, ok := tp.suspect.LoadAndDelete(id); ok {
		tp.suspects.Add(-1)
	}
}

func (tp *topology) isSuspect(id string) bool {
	if tp.suspects.Load() == 0 {
		return false
	}
	v, ok := tp.suspect.Load(id)
	return ok && time.Since(v.(time.Time)) < suspectFor
}

// listTargets are the nodes whose stores together hold every object: all storage nodes
// that are not down or out.
func (tp *topology) listTargets() []target {
	m := tp.maps.Current()
	var ts []target
	for _, n := range m.Nodes {
		if !n.HasRole(clustermap.RoleStorage) || n.State == clustermap.StateOut || n.State == clustermap.StateDown {
			continue
		}
		ts = append(ts, target{id: n.ID, addr: n.Addr, local: tp.isLocal(n.ID)})
	}
	return ts
}

// shardTable returns the placement of cls's shards in m: K+M distinct nodes per partition,
// among the placement nodes of its device class. With fewer nodes than that, writes are
// refused and reads get a narrower table (they search every node for what is missing).
func (tp *topology) shardTable(m *clustermap.Map, cls clustermap.Class, forWrite bool) (*placement.Table, error) {
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
	d := fmt.Sprint(m.Partitions, width, ns)
	tp.shardMu.Lock()
	defer tp.shardMu.Unlock()
	if t, ok := tp.shardTables[cls.Name+"|"+cls.DeviceClass]; ok && t.digest == d {
		return t.t, nil
	}
	t, err := placement.New(ns, max(m.Partitions, 1), width)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	if tp.shardTables == nil {
		tp.shardTables = map[string]ecTable{}
	}
	tp.shardTables[cls.Name+"|"+cls.DeviceClass] = ecTable{digest: d, t: t}
	return t, nil
}

// shardTargets returns the K+M nodes of a stripe, shard j on the j-th.
func (tp *topology) shardTargets(m *clustermap.Map, t *placement.Table, stripe string) []target {
	ids := t.Nodes(placement.Partition(ShardBucket, stripe, t.Partitions()))
	ts := make([]target, len(ids))
	for j, id := range ids {
		n, _ := m.Node(id)
		ts[j] = target{id: id, addr: n.Addr, local: tp.isLocal(id), down: n.State == clustermap.StateDown}
	}
	return ts
}

type ecTable struct {
	digest string
	t      *placement.Table
}
