package placement

import (
	"errors"
	"fmt"
	"math"
)

// Version numbers a placement algorithm. Every node of a cluster must compute a
// cluster's tables with the same version, so the version is part of the cluster map,
// and a version's tables never change: a different algorithm (or a different
// constant, such as V2Epsilon) is a new version.
type Version int

// The placement versions.
const (
	// V1 is weighted rendezvous hashing with zone and host spreading (New). Version 0
	// (a map from before versions) means V1.
	V1 Version = 1
	// V2 is V1 with bounded load (NewBounded with V2Epsilon): a node that holds
	// (1+V2Epsilon) times its share is skipped, so that no node holds more than that
	// while the rules allow it.
	V2 Version = 2
)

// V2Epsilon is the load bound of V2: no node holds more than (1+V2Epsilon) times its
// share of the copies (docs/placement-at-scale.md, where it was chosen by measurement).
const V2Epsilon = 0.1

// ErrVersion reports a placement version this build does not know.
var ErrVersion = errors.New("placement: unknown placement version")

// NewVersion computes the table of version v (0 and V1: New; V2: NewBounded with
// V2Epsilon). It returns ErrVersion for a version it does not know.
func NewVersion(v Version, nodes []Node, p, r int) (*Table, error) {
	switch v {
	case 0, V1:
		return New(nodes, p, r)
	case V2:
		return NewBounded(nodes, p, r, V2Epsilon)
	}
	return nil, fmt.Errorf("%w %d (this build knows %d and %d)", ErrVersion, v, V1, V2)
}

// NewBounded computes a table like New, with bounded load: partitions are chosen in
// order 0..p-1, and a node whose count has reached its limit, floor((1+eps) × its
// share), is skipped, so the copy goes to the next node of the partition's ranking.
// A node's share is its capped weight share of the p·r copies, computed per zone when
// there are at least r zones (each zone's share is water-filled over the zones' total
// weights with at most p copies a zone, then each node's over its zone's nodes), and
// over all nodes otherwise (as ExpectedCounts).
//
// The spreading rules are those of New and come first: each of New's three passes
// (distinct zones, distinct hosts, any node) first takes the nodes of the ranking
// below their limit, then, if the pass still has room, the others. So every list
// spreads over exactly as many zones and hosts as New's, and only balance gives way
// when the rules and the limits conflict (few copies per node, zones of unequal
// weight with fewer than r zones).
//
// Membership changes move more than with New: a join or a loss changes every share a
// little, and each node at its limit then gains or loses a copy to a node other than
// the new or the lost one (docs/placement-at-scale.md measures how much). eps must be
// positive; the same nodes, p, r and eps always give the same table, in any node order.
func NewBounded(nodes []Node, p, r int, eps float64) (*Table, error) {
	if !(eps > 0) || math.IsInf(eps, 1) {
		return nil, fmt.Errorf("placement: load bound %v must be positive and finite", eps)
	}
	if p <= 0 {
		return nil, fmt.Errorf("%w (got %d)", ErrPartitions, p)
	}
	if r < 1 {
		return nil, fmt.Errorf("%w (got %d)", ErrReplicas, r)
	}
	for _, n := range nodes {
		if math.IsInf(n.Weight, 1) {
			return nil, fmt.Errorf("%w: node %q", ErrWeight, n.ID)
		}
	}
	cands, nZones, nHosts := eligible(nodes)
	for i := 1; i < len(cands); i++ {
		if cands[i].id == cands[i-1].id {
			return nil, fmt.Errorf("%w %q", ErrDuplicateID, cands[i].id)
		}
	}
	k := min(r, len(cands))
	limit := make([]int, len(cands))
	for j, s := range shares(cands, nZones, p, k) {
		limit[j] = int(math.Floor((1 + eps) * s))
	}
	t := &Table{p: p, r: r, lists: make([][]string, p)}
	backing := make([]string, p*k)
	s := selector{
		cands:    cands,
		heap:     make([]scored, 0, len(cands)),
		ranked:   make([]scored, 0, len(cands)),
		taken:    make([]bool, len(cands)),
		zoneUsed: make([]int, nZones),
		hostUsed: make([]int, nHosts),
		nZones:   nZones,
		nHosts:   nHosts,
	}
	b := bounded{s: &s, count: make([]int, len(cands)), limit: limit}
	for i := range p {
		t.lists[i] = b.pick(uint64(i), backing[i*k:i*k:(i+1)*k])
	}
	return t, nil
}

// bounded is the state of NewBounded: the selector of New, and every node's count of
// copies so far and limit.
type bounded struct {
	s            *selector
	count, limit []int // by candidate index
}

// pick appends partition i's replicas to list (whose capacity is the number of
// replicas to choose) and returns it: New's passes, each first over the nodes below
// their limit, then over all.
func (b *bounded) pick(i uint64, list []string) []string {
	s := b.s
	s.heap = s.heap[:0]
	s.rankTop(i)
	clear(s.taken)
	s.gen++
	k := cap(list)
	zones, hosts := 0, 0
	take := func(pos int) {
		idx := s.ranked[pos].idx
		c := &s.cands[idx]
		s.taken[pos] = true
		b.count[idx]++
		if s.zoneUsed[c.zone] != s.gen {
			s.zoneUsed[c.zone] = s.gen
			zones++
		}
		if s.hostUsed[c.host] != s.gen {
			s.hostUsed[c.host] = s.gen
			hosts++
		}
		list = append(list, c.id)
	}
	// pass takes, in rank order, the nodes not taken that ok accepts (and that are
	// below their limit if bound), while the list has room and more() holds.
	pass := func(bound bool, more func() bool, ok func(c *candidate) bool) {
		for pos := 0; len(list) < k && more(); pos++ {
			sc, found := s.at(pos)
			if !found {
				return
			}
			if s.taken[pos] || (bound && b.count[sc.idx] >= b.limit[sc.idx]) {
				continue
			}
			if ok(&s.cands[sc.idx]) {
				take(pos)
			}
		}
	}
	moreZones := func() bool { return zones < s.nZones }
	newZone := func(c *candidate) bool { return s.zoneUsed[c.zone] != s.gen }
	moreHosts := func() bool { return hosts < s.nHosts }
	newHost := func(c *candidate) bool { return s.hostUsed[c.host] != s.gen }
	always := func() bool { return true }
	anyNode := func(*candidate) bool { return true }
	for _, bound := range []bool{true, false} {
		pass(bound, moreZones, newZone)
	}
	for _, bound := range []bool{true, false} {
		pass(bound, moreHosts, newHost)
	}
	for _, bound := range []bool{true, false} {
		pass(bound, always, anyNode)
	}
	return list
}

// shares returns each candidate's share of the p·r copies of a table (r at most the
// number of candidates): per zone when there are at least r zones, else over all nodes.
func shares(cands []candidate, nZones, p, r int) []float64 {
	out := make([]float64, len(cands))
	if len(cands) == 0 {
		return out
	}
	w := make([]float64, len(cands))
	for j, c := range cands {
		w[j] = c.weight
	}
	if nZones < r || nZones == 1 {
		copy(out, waterFill(w, float64(p*r), float64(p)))
		return out
	}
	zw := make([]float64, nZones)
	members := make([][]int, nZones)
	for j, c := range cands {
		zw[c.zone] += c.weight
		members[c.zone] = append(members[c.zone], j)
	}
	zs := waterFill(zw, float64(p*r), float64(p))
	for z, js := range members {
		mw := make([]float64, len(js))
		for x, j := range js {
			mw[x] = w[j]
		}
		for x, s := range waterFill(mw, zs[z], float64(p)) {
			out[js[x]] = s
		}
	}
	return out
}

// waterFill splits total over the weights in proportion, no part above limit: parts
// that would exceed it get limit and the rest is split again over the others.
func waterFill(weights []float64, total, limit float64) []float64 {
	out := make([]float64, len(weights))
	capped := make([]bool, len(weights))
	remaining := total
	for {
		var sum float64
		for j, w := range weights {
			if !capped[j] {
				sum += w
			}
		}
		if sum <= 0 || remaining <= 0 {
			break
		}
		changed := false
		for j, w := range weights {
			if !capped[j] && remaining*w/sum > limit {
				capped[j], out[j] = true, limit
				remaining -= limit
				changed = true
			}
		}
		if !changed {
			for j, w := range weights {
				if !capped[j] {
					out[j] = remaining * w / sum
				}
			}
			break
		}
	}
	return out
}
