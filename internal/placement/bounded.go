package placement

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
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
	// V2 is V1 with bounded load (NewBounded with V2Epsilon): V1's table, with the
	// copies of the nodes above (1+V2Epsilon) times their share moved to others, so
	// that no node holds more than that while the rules allow it.
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

// NewBounded computes a table like New, with bounded load: no node holds more than
// its limit, floor((1+eps) × its share) copies, where the rules and the other nodes'
// limits allow it. A node's share is its capped weight share of the p·r copies,
// computed per zone when there are at least r zones (each zone's share is water-filled
// over the zones' total weights, at most p copies a zone, then each node's over its
// zone's nodes), and over all nodes otherwise (as ExpectedCounts).
//
// The table starts as New's. Then the copies of the nodes above their limit are taken,
// lowest score first over all such nodes (ties: lower node, then lower partition), and
// while its node is still above its limit each copy moves to the first node of its
// partition's ranking that is below its own limit, not in the list, and keeps the
// list's distinct zones and hosts (it takes the moved node's position in the list). A
// copy with no such node stays. So every list spreads over exactly as many zones and
// hosts as New's, a node sheds the partitions it ranks lowest in, and a table differs
// from New's only in the copies shed.
//
// Membership changes move more than with New: a join or a loss changes every share a
// little, and a node at its limit then sheds one copy more or one fewer, to or from a
// node other than the new or the lost one (docs/placement-at-scale.md measures how
// much). eps must be positive and finite; the same nodes, p, r and eps always give the
// same table, in any node order.
func NewBounded(nodes []Node, p, r int, eps float64) (*Table, error) {
	if !(eps > 0) || math.IsInf(eps, 1) {
		return nil, fmt.Errorf("placement: load bound %v must be positive and finite", eps)
	}
	return newShed(nodes, p, r, eps)
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

// newShed is NewBounded's work once eps is checked.
func newShed(nodes []Node, p, r int, eps float64) (*Table, error) {
	t, err := New(nodes, p, r)
	if err != nil {
		return nil, err
	}
	cands, nZones, nHosts := eligible(nodes)
	k := min(r, len(cands))
	if k == 0 {
		return t, nil
	}
	index := make(map[string]int, len(cands))
	for j, c := range cands {
		index[c.id] = j
	}
	limit := limits(cands, nZones, p, k, eps)
	count := make([]int, len(cands))
	for _, list := range t.lists {
		for _, id := range list {
			count[index[id]]++
		}
	}
	type copyOf struct {
		score float64
		node  int
		part  int
	}
	var over []copyOf
	for i, list := range t.lists {
		for _, id := range list {
			if j := index[id]; count[j] > limit[j] {
				over = append(over, copyOf{score(uint64(i), &cands[j]), j, i})
			}
		}
	}
	slices.SortFunc(over, func(a, b copyOf) int {
		if a.score != b.score {
			return cmp.Compare(a.score, b.score)
		}
		if a.node != b.node {
			return cmp.Compare(a.node, b.node)
		}
		return cmp.Compare(a.part, b.part)
	})
	s := newSelector(cands, nZones, nHosts)
	room := 0 // nodes below their limit: none left, and no copy can move
	for j := range cands {
		if count[j] < limit[j] {
			room++
		}
	}
	members := make([]int, 0, k)
	for _, o := range over {
		if room == 0 {
			break
		}
		if count[o.node] <= limit[o.node] {
			continue
		}
		list := t.lists[o.part]
		members = members[:0]
		at := -1
		for x, id := range list {
			members = append(members, index[id])
			if id == cands[o.node].id {
				at = x
			}
		}
		zonesBefore, hostsBefore := s.spread(members, -1, -1)
		s.heap = s.heap[:0]
		s.rankTop(uint64(o.part))
		for pos := 0; ; pos++ {
			sc, ok := s.at(pos)
			if !ok {
				break
			}
			y := sc.idx
			if count[y] >= limit[y] || slices.Contains(members, y) {
				continue
			}
			if z, h := s.spread(members, at, y); z < zonesBefore || h < hostsBefore {
				continue
			}
			list[at] = cands[y].id
			count[o.node]-- // still at its limit or above: no room made
			count[y]++
			if count[y] == limit[y] {
				room--
			}
			break
		}
	}
	return t, nil
}

// limits returns each candidate's limit, floor((1+eps) × share).
func limits(cands []candidate, nZones, p, r int, eps float64) []int {
	out := make([]int, len(cands))
	for j, s := range shares(cands, nZones, p, r) {
		out[j] = int(math.Floor((1 + eps) * s))
	}
	return out
}

// spread returns the distinct zones and hosts of the candidates members, with
// members[at] replaced by candidate y if at >= 0.
func (s *selector) spread(members []int, at, y int) (zones, hosts int) {
	s.gen++
	for x, j := range members {
		if x == at {
			j = y
		}
		c := &s.cands[j]
		if s.zoneUsed[c.zone] != s.gen {
			s.zoneUsed[c.zone] = s.gen
			zones++
		}
		if s.hostUsed[c.host] != s.gen {
			s.hostUsed[c.host] = s.gen
			hosts++
		}
	}
	return zones, hosts
}
