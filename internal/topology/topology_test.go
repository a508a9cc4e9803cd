package topology

import (
	"log/slog"
	"slices"
	"strconv"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/store"
)

// TestShardBucketInternal: shards live in a bucket the store keeps out of S3's reach.
func TestShardBucketInternal(t *testing.T) {
	if !store.Internal(ShardBucket) {
		t.Fatalf("%q is not an internal bucket of the store", ShardBucket)
	}
}

func topoMap(epoch uint64, n int, state func(id string) clustermap.NodeState) *clustermap.Map {
	m := &clustermap.Map{Epoch: epoch, Partitions: 64, Replicas: 3,
		Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2}}}
	for i := range n {
		id := "n" + strconv.Itoa(i+1)
		m.Nodes = append(m.Nodes, clustermap.Node{ID: id, Addr: "10.0.0." + strconv.Itoa(i+1) + ":7000", Zone: "z" + strconv.Itoa(i%3),
			Weight: 1, State: state(id), Roles: []string{clustermap.RoleStorage}})
	}
	return m
}

// TestTopology checks the topology alone, on plain maps: targets, the local node first,
// suspects and returning nodes last, former holders after a placement change.
func TestTopology(t *testing.T) {
	up := func(string) clustermap.NodeState { return clustermap.StateUp }
	maps := &Maps{}
	maps.Set(topoMap(1, 4, up))
	tp := NewTopology(maps, "n2", true, slog.New(slog.DiscardHandler))
	key := ""
	for i := range 1000 { // a key n2 holds, not as primary
		k := "k" + strconv.Itoa(i)
		_, ts, err := tp.Replicas("b", k)
		if err != nil {
			t.Fatal(err)
		}
		ids, _, _ := tp.Placement("b", k)
		if len(ts) == 3 && ids[0] != "n2" && (ids[1] == "n2" || ids[2] == "n2") {
			key = k
			break
		}
	}
	if key == "" {
		t.Fatal("no key held by n2 as a secondary")
	}
	cls, ts, _ := tp.Replicas("b", key)
	if cls.N != 3 || !ts[0].Local || ts[0].ID != "n2" {
		t.Fatalf("local holder not first: %v", ts)
	}
	// A suspect goes last.
	other := ts[1].ID
	tp.MarkSuspect(other)
	_, ts, _ = tp.Replicas("b", key)
	if ts[2].ID != other {
		t.Fatalf("suspect %s not last: %v", other, ts)
	}
	tp.ClearSuspect(other)
	if tp.IsSuspect(other) {
		t.Fatal("suspect not cleared")
	}
	// A node that was down and is up again is read last for a while.
	down := func(id string) clustermap.NodeState {
		if id == other {
			return clustermap.StateDown
		}
		return clustermap.StateUp
	}
	maps.Set(topoMap(2, 4, down))
	_, ts, _ = tp.Replicas("b", key)
	for _, x := range ts {
		if x.ID == other && !x.Down {
			t.Fatalf("a down node's target is not marked down: %v", ts)
		}
	}
	maps.Set(topoMap(3, 4, up))
	_, ts, _ = tp.Replicas("b", key)
	if ts[2].ID != other || !tp.isReturning(other) {
		t.Fatalf("returning node %s not last: %v", other, ts)
	}
	// A fifth node changes placement: the former holders stay reachable for reads.
	before, _, _ := tp.Placement("b", key)
	maps.Set(topoMap(4, 5, up))
	after, _, _ := tp.Placement("b", key)
	_, ts, _ = tp.Replicas("b", key)
	former := tp.FormerReplicas("b", key, ts)
	for _, id := range before {
		inNew := false
		for _, a := range after {
			inNew = inNew || a == id
		}
		found := inNew
		for _, f := range former {
			found = found || f.ID == id
		}
		if !found {
			t.Fatalf("former holder %s neither a holder nor a former holder (before %v, after %v, former %v)", id, before, after, former)
		}
	}
	// Shard targets: K+M distinct nodes.
	m := maps.Current()
	cls = clustermap.Class{Name: "EC21", K: 2, M: 1}
	tab, err := tp.ShardTable(m, cls, true)
	if err != nil {
		t.Fatal(err)
	}
	sts := tp.ShardTargets(m, tab, "stripe-1")
	seen := map[string]bool{}
	for _, s := range sts {
		seen[s.ID] = true
	}
	if len(sts) != 3 || len(seen) != 3 {
		t.Fatalf("shard targets %v", sts)
	}
	if _, err := tp.ShardTable(m, clustermap.Class{Name: "EC55", K: 5, M: 5}, true); err == nil {
		t.Fatal("a class needing more nodes than there are is placed for writes")
	}
}

// TestReplicasZoneFirst: a gateway reads first from a holder in its own zone, ahead of
// the placement's order, when it holds no copy itself.
func TestReplicasZoneFirst(t *testing.T) {
	up := func(string) clustermap.NodeState { return clustermap.StateUp }
	maps := &Maps{}
	maps.Set(topoMap(1, 6, up)) // zones: n1, n4 in z0; n2, n5 in z1; n3, n6 in z2
	tp := NewTopology(maps, "n1", true, slog.New(slog.DiscardHandler))
	found := 0
	for i := range 2000 {
		k := "k" + strconv.Itoa(i)
		ids, _, _ := tp.Placement("b", k)
		if len(ids) != 3 || slices.Contains(ids, "n1") || !slices.Contains(ids, "n4") || ids[0] == "n4" {
			continue
		}
		found++
		_, ts, err := tp.Replicas("b", k)
		if err != nil {
			t.Fatal(err)
		}
		if ts[0].ID != "n4" || ts[0].Local {
			t.Fatalf("%s placed on %v: targets %v, want n4 (n1's zone) first", k, ids, ts)
		}
		var rest, want []string
		for _, x := range ts[1:] {
			rest = append(rest, x.ID)
		}
		for _, id := range ids {
			if id != "n4" {
				want = append(want, id)
			}
		}
		if !slices.Equal(rest, want) {
			t.Fatalf("%s placed on %v: the other zones' targets %v, want placement order %v", k, ids, rest, want)
		}
	}
	if found == 0 {
		t.Fatal("no key placed on n4 behind a holder of another zone, and not on n1")
	}
}

// TestLayoutPlacementVersion: the table follows the map's placement version (0 and 1
// alike, 2 bounded load), a change of version alone is a new placement (the old table
// becomes a former one), and a version this build does not know is an error.
func TestLayoutPlacementVersion(t *testing.T) {
	up := func(string) clustermap.NodeState { return clustermap.StateUp }
	base := topoMap(1, 12, up)
	for i := range base.Nodes {
		base.Nodes[i].Weight = float64(1 + i%4) // unequal: v2 differs from v1
	}
	base.Partitions = 256 // few copies per node: v1 puts some above 1.1 times their share
	tables := map[int]*placement.Table{}
	for _, v := range []int{0, 1, 2} {
		m := base.Clone()
		m.PlacementVersion = v
		l, err := NewTopology(&Maps{}, "", false, slog.New(slog.DiscardHandler)).Layout(m)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		want, err := placement.NewVersion(placement.Version(v), placementNodes(m), m.Partitions, 3)
		if err != nil {
			t.Fatal(err)
		}
		for p := range want.Partitions() {
			if !slices.Equal(l.Table.Nodes(p), want.Nodes(p)) {
				t.Fatalf("version %d, partition %d: %v, want %v", v, p, l.Table.Nodes(p), want.Nodes(p))
			}
		}
		tables[v] = l.Table
	}
	if n, _ := placement.Moves(tables[0], tables[1]); n != 0 {
		t.Fatalf("versions 0 and 1 differ by %d copies", n)
	}
	if n, _ := placement.Moves(tables[1], tables[2]); n == 0 {
		t.Fatal("version 2 places unequal nodes as version 1 does")
	}
	maps := &Maps{}
	maps.Set(base)
	tp := NewTopology(maps, "", false, slog.New(slog.DiscardHandler))
	if _, err := tp.Layout(base); err != nil {
		t.Fatal(err)
	}
	v2 := base.Clone()
	v2.Epoch, v2.PlacementVersion = 2, 2
	l, err := tp.Layout(v2)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.former) != 1 {
		t.Fatalf("after the version change: %d former tables", len(l.former))
	}
	bad := base.Clone()
	bad.Epoch, bad.PlacementVersion = 3, 3
	if _, err := tp.Layout(bad); err == nil {
		t.Fatal("an unknown placement version gave a table")
	}
}
