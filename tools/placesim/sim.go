package main

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/topology"
)

// Weight modes: how a node's capacity becomes its placement weight in the map.
const (
	// WeightsOne is what cairn does today: every node joins with weight 1
	// (internal/server/lifecycle.go), whatever its capacity.
	WeightsOne = "one"
	// WeightsCapacity sets each node's weight to its capacity in TB (the map's
	// update_node command accepts any weight; no CLI sets it yet).
	WeightsCapacity = "capacity"
	// WeightsCalibrated sets each node's weight to placement.Calibrate of its capacity,
	// computed once for the whole map (the join and loss maps are recalibrated).
	WeightsCalibrated = "calibrated"
)

// Spec describes one simulated cluster.
type Spec struct {
	Nodes, Zones int
	Replicas     int
	Partitions   int
	Weights      string    // one of the Weight modes
	Capacities   []float64 // capacities in TB, drawn per node at random (seeded)
	Seed         uint64
	LostTB       float64 // bytes on the lost node, in TB (1e12 bytes)
	JoinTB       float64 // capacity of the joining node, in TB
	Joins        int     // how many different nodes join (each alone); at least one
	Rate         float64 // per-node recovery rate, bytes per second
	BalanceOnly  bool    // skip the join and the loss
	// Placement is the map's placement version (0 or 1: weighted rendezvous, 2: bounded
	// load). Epsilon, if not 0, is an exploration: tables are computed by
	// placement.NewBounded with that load bound on the map's placement nodes (as
	// topology.Layout gives them), not by topology.Layout.
	Placement int
	Epsilon   float64
}

// Result holds the figures of one simulated cluster.
type Result struct {
	Spec       Spec
	CopiesMean float64 // partition copies per node
	Build      time.Duration

	// Balance: for each node, its copies over its capacity share of all copies.
	MaxMean, MinMean float64

	ZoneViolations int // partitions with two copies in one zone while zones >= replicas
	HostViolations int // partitions with two copies on one host
	Short          int // partitions with fewer than Replicas distinct nodes

	// Joins of one node of JoinTB each (Joins of them, each alone).
	Joins         int
	JoinBuild     time.Duration // the slowest
	JoinElsewhere int           // most copies a join created on nodes other than the new one
	JoinFrac      float64       // mean of the copies a join created / (P·N)
	JoinWorst     float64       // largest ratio of a join's fraction moved to JoinBound
	JoinBound     float64       // the new node's capacity share: 1/(n+1) for equal nodes
	JoinNPlus1    float64       // 1/(n+1)

	// Loss of one node holding LostTB (marked out).
	LostID      string
	LostCopies  int
	LossMoved   int // copies created by the loss
	LossBuild   time.Duration
	Recovery    Recovery
	LossUnequal bool // a lost partition got more than one new holder
}

// Recovery is the re-protection model after the loss (see the package doc).
type Recovery struct {
	Bytes     float64 // LostTB in bytes
	PerCopy   float64 // bytes per lost partition copy
	Receivers int     // distinct new holders
	MaxRecv   int     // most lost copies one new holder receives
	CoHolders int     // distinct survivors that shared a partition with the lost node
	MaxShare  float64 // most copies one co-holder sends, each copy split evenly over its surviving holders
	LowestID  int     // distinct senders when each copy comes from its lowest-ID holder (cairn's sync)
	MaxLowest int     // most copies one sender sends under that rule
	// By node ID: the lost copies each receiver gets, the share each co-holder sends
	// (even split), and the copies each lowest-ID sender sends.
	Recv, Share map[string]float64
	Lowest      map[string]int
	// Times at Rate bytes/s per node.
	Single   time.Duration // one node copies everything (a lower bound on nothing: the naive figure)
	Senders  time.Duration // co-holders each send their even share at Rate
	Pull     time.Duration // cairn: each receiver pulls at Rate; senders unthrottled
	PullLoID time.Duration // cairn, and the lowest-ID senders also limited to Rate
}

// node returns the map record of node i of a cluster with the given zones.
func node(i, zones int, tb float64) clustermap.Node {
	return clustermap.Node{
		ID:       fmt.Sprintf("n%05d", i),
		Addr:     fmt.Sprintf("10.%d.%d.%d:9002", i>>16&255, i>>8&255, i&255),
		Zone:     fmt.Sprintf("z%02d", i%zones),
		Capacity: int64(tb * 1e12),
		Weight:   1,
		State:    clustermap.StateUp,
		Roles:    []string{clustermap.RoleStorage},
	}
}

// reweight returns m with every node's weight set by mode from its capacity.
func reweight(m *clustermap.Map, mode string, replicas int) (*clustermap.Map, error) {
	nm := m.Clone()
	switch mode {
	case WeightsOne:
		for i := range nm.Nodes {
			nm.Nodes[i].Weight = 1
		}
	case WeightsCapacity:
		for i := range nm.Nodes {
			nm.Nodes[i].Weight = float64(nm.Nodes[i].Capacity) / 1e12
		}
	case WeightsCalibrated:
		var ns []placement.Node
		for _, n := range nm.PlacementNodes() {
			ns = append(ns, placement.Node{ID: n.ID, Zone: n.Zone, Weight: float64(n.Capacity) / 1e12})
		}
		cal := placement.Calibrate(ns, replicas)
		w := make(map[string]float64, len(cal))
		for _, n := range cal {
			w[n.ID] = n.Weight
		}
		for i := range nm.Nodes {
			if x, ok := w[nm.Nodes[i].ID]; ok {
				nm.Nodes[i].Weight = x
			}
		}
	default:
		return nil, fmt.Errorf("unknown weight mode %q (want %s, %s or %s)", mode, WeightsOne, WeightsCapacity, WeightsCalibrated)
	}
	return nm, nil
}

// layout computes m's placement the way a gateway does (topology.Layout, which calls
// placement.New on the map's placement nodes), and how long that took: the CPU time
// where the platform tells it (run with GOMAXPROCS=1, it is the time on one core), else
// the wall time.
func layout(m *clustermap.Map, eps float64) (*topology.Layout, time.Duration, error) {
	tp := topology.NewTopology(&topology.Maps{}, "", false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	start, cpu := time.Now(), cpuTime()
	var l *topology.Layout
	var err error
	if eps != 0 {
		l, err = boundedLayout(m, eps)
	} else {
		l, err = tp.Layout(m)
	}
	if c := cpuTime() - cpu; c > 0 {
		return l, c, err
	}
	return l, time.Since(start), err
}

// boundedLayout is the exploration of Spec.Epsilon: m's table by placement.NewBounded,
// with the nodes topology.Layout would give (weight 1 for a weight of 0, the host from
// the address).
func boundedLayout(m *clustermap.Map, eps float64) (*topology.Layout, error) {
	var ns []placement.Node
	for _, n := range m.PlacementNodes() {
		w := n.Weight
		if w <= 0 {
			w = 1
		}
		host, _, _ := strings.Cut(n.Addr, ":")
		ns = append(ns, placement.Node{ID: n.ID, Zone: n.Zone, Host: host, Weight: w})
	}
	n := m.Replicas
	if c, ok := m.Class(clustermap.StandardClass); ok {
		n = c.N
	}
	t, err := placement.NewBounded(ns, m.Partitions, n, eps)
	if err != nil {
		return nil, err
	}
	return &topology.Layout{Map: m, Table: t, Class: clustermap.Class{N: n}}, nil
}

// apply applies one command as every manager does.
func apply(m *clustermap.Map, c clustermap.Command) (*clustermap.Map, error) {
	nm, err := clustermap.ApplyCommand(m, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Op, err)
	}
	return nm, nil
}

// Build returns the initial map of s (weights set by s.Weights).
func Build(s Spec) (*clustermap.Map, error) {
	rng := rand.New(rand.NewPCG(s.Seed, 0x9ace))
	init := &clustermap.Map{Partitions: s.Partitions, Replicas: s.Replicas, PlacementVersion: s.Placement}
	if s.Placement >= 2 {
		init.Level = clustermap.PlacementV2Level
	}
	for i := range s.Nodes {
		init.Nodes = append(init.Nodes, node(i, s.Zones, s.Capacities[rng.IntN(len(s.Capacities))]))
	}
	m, err := apply(&clustermap.Map{}, clustermap.Command{Op: clustermap.OpInit, Init: init})
	if err != nil {
		return nil, err
	}
	return reweight(m, s.Weights, s.Replicas)
}

// Run simulates s: the initial placement, one node joining, one node lost.
func Run(s Spec) (*Result, error) {
	r := &Result{Spec: s}
	m, err := Build(s)
	if err != nil {
		return nil, err
	}
	base, d, err := layout(m, s.Epsilon)
	if err != nil {
		return nil, err
	}
	r.Build = d
	t := base.Table
	n := base.Class.N
	caps := map[string]float64{}
	zone := map[string]string{}
	var capSum float64
	for _, nd := range m.PlacementNodes() {
		caps[nd.ID] = float64(nd.Capacity)
		zone[nd.ID] = nd.Zone
		capSum += float64(nd.Capacity)
	}
	counts := t.Counts()
	total := 0
	for _, c := range counts {
		total += c
	}
	r.CopiesMean = float64(total) / float64(len(caps))
	r.MaxMean, r.MinMean = 0, math.Inf(1)
	for id, c := range caps {
		share := float64(counts[id]) / (float64(total) * c / capSum)
		r.MaxMean = max(r.MaxMean, share)
		r.MinMean = min(r.MinMean, share)
	}
	r.ZoneViolations, r.HostViolations, r.Short = check(t, n, zone, s.Zones)
	if s.BalanceOnly {
		return r, nil
	}

	// A node joins: add_node (weight 1, as cairn does), then the weights of the mode.
	// Each of the Joins joins alone, with its own ID and the next zone.
	joinTB := s.JoinTB
	if s.Weights == WeightsOne {
		r.JoinBound = 1 / float64(s.Nodes+1)
	} else {
		r.JoinBound = joinTB * 1e12 / (capSum + joinTB*1e12)
	}
	r.Joins = max(s.Joins, 1)
	for j := range r.Joins {
		nj := node(s.Nodes+j, s.Zones, joinTB)
		mj, err := apply(m, clustermap.Command{Op: clustermap.OpAddNode, Node: &nj})
		if err != nil {
			return nil, err
		}
		if mj, err = reweight(mj, s.Weights, s.Replicas); err != nil {
			return nil, err
		}
		joined, d, err := layout(mj, s.Epsilon)
		if err != nil {
			return nil, err
		}
		r.JoinBuild = max(r.JoinBuild, d)
		moved, per := placement.Moves(t, joined.Table)
		frac := float64(moved) / float64(s.Partitions*n)
		r.JoinFrac += frac / float64(r.Joins)
		r.JoinWorst = max(r.JoinWorst, frac/r.JoinBound)
		r.JoinElsewhere = max(r.JoinElsewhere, moved-per[nj.ID])
	}
	r.JoinNPlus1 = 1 / float64(s.Nodes+1)

	// A node holding LostTB is lost: set out (what the monitor does after --out-after).
	// The lost node is the first (by ID) whose capacity is closest to LostTB.
	lost, best := "", math.Inf(1)
	for _, nd := range m.Nodes {
		if d := math.Abs(float64(nd.Capacity)/1e12 - s.LostTB); d < best {
			lost, best = nd.ID, d
		}
	}
	r.LostID = lost
	mo, err := apply(m, clustermap.Command{Op: clustermap.OpSetState, NodeID: lost, State: clustermap.StateOut})
	if err != nil {
		return nil, err
	}
	if mo, err = reweight(mo, s.Weights, s.Replicas); err != nil {
		return nil, err
	}
	after, d, err := layout(mo, s.Epsilon)
	if err != nil {
		return nil, err
	}
	r.LossBuild = d
	r.LostCopies = counts[lost]
	r.LossMoved, _ = placement.Moves(t, after.Table)
	r.Recovery, r.LossUnequal = recovery(t, after.Table, lost, s)
	return r, nil
}

// check counts the partitions of t that break the spreading rules: two copies in one
// zone although there are at least n zones, two copies on one host (every simulated node
// is its own host), and fewer than n distinct nodes.
func check(t *placement.Table, n int, zone map[string]string, zones int) (zoneV, hostV, short int) {
	seenZ := map[string]bool{}
	seenN := map[string]bool{}
	for p := range t.Partitions() {
		ids := t.Nodes(p)
		clear(seenZ)
		clear(seenN)
		z, h := false, false
		for _, id := range ids {
			z = z || seenZ[zone[id]]
			h = h || seenN[id]
			seenZ[zone[id]] = true
			seenN[id] = true
		}
		if z && zones >= n {
			zoneV++
		}
		if h {
			hostV++
		}
		if len(seenN) < n {
			short++
		}
	}
	return zoneV, hostV, short
}

// recovery models re-protection after node lost is marked out, going from table before
// to table after (see the package doc). unequal reports a partition that got more than
// one new holder (which the minimal-movement property excludes).
func recovery(before, after *placement.Table, lost string, s Spec) (rc Recovery, unequal bool) {
	recv := map[string]int{}
	share := map[string]float64{}
	lowest := map[string]int{}
	copies := 0
	for p := range before.Partitions() {
		old := before.Nodes(p)
		if !slices.Contains(old, lost) {
			continue
		}
		copies++
		var survivors []string
		for _, id := range old {
			if id != lost {
				survivors = append(survivors, id)
			}
		}
		gained := 0
		for _, id := range after.Nodes(p) {
			if !slices.Contains(old, id) {
				recv[id]++
				gained++
			}
		}
		unequal = unequal || gained > 1
		for _, id := range survivors {
			share[id] += 1 / float64(len(survivors))
		}
		if len(survivors) > 0 {
			lowest[slices.Min(survivors)]++
		}
	}
	rc.Bytes = s.LostTB * 1e12
	if copies == 0 {
		return rc, unequal
	}
	rc.PerCopy = rc.Bytes / float64(copies)
	rc.Receivers, rc.CoHolders, rc.LowestID = len(recv), len(share), len(lowest)
	rc.Share, rc.Lowest = share, lowest
	rc.Recv = map[string]float64{}
	for id, c := range recv {
		rc.Recv[id] = float64(c)
	}
	for _, c := range recv {
		rc.MaxRecv = max(rc.MaxRecv, c)
	}
	for _, c := range share {
		rc.MaxShare = max(rc.MaxShare, c)
	}
	for _, c := range lowest {
		rc.MaxLowest = max(rc.MaxLowest, c)
	}
	sec := func(b float64) time.Duration { return time.Duration(b / s.Rate * float64(time.Second)) }
	rc.Single = sec(rc.Bytes)
	rc.Senders = sec(rc.MaxShare * rc.PerCopy)
	rc.Pull = sec(float64(rc.MaxRecv) * rc.PerCopy)
	rc.PullLoID = sec(float64(max(rc.MaxRecv, rc.MaxLowest)) * rc.PerCopy)
	return rc, unequal
}
