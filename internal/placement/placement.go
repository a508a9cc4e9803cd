// Package placement maps objects to partitions and partitions to ordered
// node lists, deterministically from a cluster membership snapshot.
//
// It is not the cluster map (that lives elsewhere): callers convert their
// map to a []Node and call New. Everything here is pure computation — no
// I/O, no goroutines, no global state — so two processes that agree on the
// membership snapshot, the partition count and the replica count compute
// byte-for-byte identical tables.
//
// # Algorithm
//
// An object belongs to partition xxhash64(bucket + "\x00" + key) mod P
// (see Partition). Each partition is assigned to nodes by weighted
// rendezvous hashing (highest random weight): for partition i and node n a
// uniform u in the open interval (0, 1) is derived from xxhash64 of
// (i, n.ID), and the node's score is -n.Weight / ln(u). Nodes are ranked by
// score, highest first, ties broken by ID. For a single pick this selects
// each node with probability exactly proportional to its weight.
//
// Replicas are then taken from that ranking with failure-domain spreading,
// in three passes over the ranking:
//
//  1. take nodes whose Zone is not yet used by the list;
//  2. if fewer than R were taken, take nodes whose Host is not yet used;
//  3. if still fewer than R, take any node not yet in the list.
//
// The list keeps the order in which nodes were taken, so the primary is
// always the highest-scoring node.
//
// Building a table hashes every node for every partition (P × n hashes), but
// computes the exact score only of nodes that can reach a partition's first
// ranks; on one core that is about 1.5 s for 1,000 nodes and 100,000
// partitions, 26 s for 5,000 nodes and 500,000 (docs/placement-at-scale.md).
//
// Because a node's score for a partition depends only on the partition and
// that node, membership changes cause minimal movement. As long as every
// host lies within a single zone (a machine sits in one rack), adding a
// node only ever creates copies on the new node, and removing a node only
// changes the partitions that held it, each gaining exactly one
// replacement (when enough nodes remain). The package tests check both
// properties on random clusters. A host spread over several zones (a
// misconfiguration) weakens host spreading and can cause extra movement.
//
// # Balance caveats
//
// Several effects make per-node partition counts deviate from a node's
// weight share P·R·w/Σw:
//
//   - A node can hold at most one copy of each partition, so a node whose
//     weight exceeds 1/R of the total holds exactly P copies and the rest is
//     shared among the others (see ExpectedCounts for the capped
//     "water-filling" shares).
//   - Zone spreading overrides weights: when zones have unequal total
//     weight, a small zone still has to hold a copy of every partition
//     whenever there are at most R zones (with exactly R zones, each zone
//     holds exactly P copies regardless of its weight). Per-node shares then
//     follow the zone layout, not the weights. That is expected; it is the
//     price of surviving the loss of a zone.
//   - For R > 1, taking the top R scores is weighted sampling without
//     replacement, which over-represents light nodes when weights differ:
//     with weights 1,4,4,4 and R = 3 the weight-1 node holds 49% more than
//     its share. Equal weights are unaffected, and R = 1 is exact. Calibrate
//     corrects this by adjusting the weights, at the cost of some extra
//     movement on membership changes.
//
// Apart from these, counts are binomially distributed around their
// expectation: with P = 1024 and R = 3, equal nodes are within a few
// percent of their share.
//
// # Versions
//
// What is described above is version 1 (New). Version 2 (NewBounded with
// V2Epsilon, see NewVersion) starts from version 1's table and moves copies
// off the nodes above 1.1 times their share, keeping the spreading rules, so
// that no node is above that bound where the rules allow it; it trades a
// little of the minimal movement for it. A cluster map names the version its
// tables are computed with.
package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Node is one storage node as placement sees it.
type Node struct {
	// ID uniquely identifies the node.
	ID string
	// Zone is the node's failure domain (data center or rack). The empty
	// string is an ordinary zone: all nodes with Zone "" share one zone.
	Zone string
	// Host is the machine the node runs on. The empty string means the node
	// is its own host (its ID is used as the host name). A host is expected
	// to lie within one zone; the minimal-movement guarantees assume it.
	Host string
	// Weight is the node's relative capacity. Nodes with Weight <= 0 (or a
	// NaN weight) are not eligible and are assigned nothing. An infinite
	// weight is invalid: New rejects it, ExpectedCounts and Calibrate
	// ignore the node.
	Weight float64
}

// Partition returns the partition of bucket/key among p partitions:
// xxhash64 of bucket + "\x00" + key, mod p. It panics if p <= 0.
func Partition(bucket, key string, p int) int {
	if p <= 0 {
		panic(fmt.Sprintf("placement: partition count %d <= 0", p))
	}
	d := xxhash.New()
	_, _ = d.WriteString(bucket)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(key)
	return int(d.Sum64() % uint64(p))
}

// Table maps each of P partitions to an ordered list of up to R node IDs,
// primary first. A Table is immutable after New and safe for concurrent use.
type Table struct {
	p, r  int
	lists [][]string
}

// Errors returned by New.
var (
	// ErrPartitions reports a partition count that is not positive.
	ErrPartitions = errors.New("placement: partition count must be > 0")
	// ErrReplicas reports a replica count below one.
	ErrReplicas = errors.New("placement: replica count must be >= 1")
	// ErrDuplicateID reports two eligible nodes with the same ID.
	ErrDuplicateID = errors.New("placement: duplicate node ID")
	// ErrWeight reports a node with an infinite weight.
	ErrWeight = errors.New("placement: infinite node weight")
)

// candidate is an eligible node prepared for scoring.
type candidate struct {
	id     string
	weight float64
	zone   int // index into the distinct zones of the eligible nodes
	host   int // index into the distinct hosts of the eligible nodes
	// key is 8 bytes reserved for the partition number followed by the
	// ID; unitHash overwrites the prefix and hashes the whole key.
	key []byte
}

// New computes the table for p partitions and r replicas per partition.
//
// The order of nodes is irrelevant: they are sorted internally, so any
// permutation of the same nodes yields an identical table. Nodes with
// Weight <= 0 are ignored. If fewer than r eligible nodes exist, each list
// holds all eligible nodes; with no eligible nodes every list is empty.
// New returns an error if p <= 0, r < 1, a weight is infinite, or two
// eligible nodes share an ID.
func New(nodes []Node, p, r int) (*Table, error) {
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
	t := &Table{p: p, r: r, lists: make([][]string, p)}
	// All lists share one backing array: one allocation instead of p.
	backing := make([]string, p*k)
	s := newSelector(cands, nZones, nHosts)
	for i := range p {
		t.lists[i] = s.pick(uint64(i), backing[i*k:i*k:(i+1)*k])
	}
	return t, nil
}

// scored is a candidate index with its score for one partition.
type scored struct {
	idx   int
	score float64
}

// before reports whether a ranks ahead of b: higher score first, then lower
// index (candidates are sorted by ID, so index order is ID order).
func (a scored) before(b scored) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.idx < b.idx
}

// topRanks is how many of a partition's highest-ranked nodes pick finds in
// its first pass over the nodes. The passes rarely look further (with R
// replicas they need R nodes in distinct zones); when they do, the rest of
// the ranking comes from a heap of every node.
const topRanks = 16

// selector holds the scratch state for choosing one partition's replicas.
// The ranking is produced lazily: one pass over the nodes finds the first
// topRanks of it, computing the exact score only of nodes that can still be
// among them, and a heap of all nodes gives the rest on demand, since
// usually only the first few nodes of the ranking are ever looked at.
type selector struct {
	cands  []candidate
	heap   []scored // max-heap (by before) of nodes not yet ranked
	ranked []scored // nodes in rank order, produced on demand
	more   bool     // nodes beyond ranked exist and the heap is not built yet
	part   uint64   // the partition being chosen
	taken  []bool   // by rank position
	// zoneUsed[z] == gen means zone z is used by the current list; gen
	// increases per partition, so nothing needs clearing.
	zoneUsed, hostUsed []int
	gen                int
	nZones, nHosts     int
}

// at returns the node at rank position pos, extending the ranking as
// needed, and false if fewer than pos+1 nodes exist.
func (s *selector) at(pos int) (scored, bool) {
	if pos < len(s.ranked) {
		return s.ranked[pos], true
	}
	if s.more {
		// Beyond the first topRanks: rank every node with a heap, and drop
		// the ones already ranked (the heap yields them first, in the same
		// order: the ranking is a total order).
		s.more = false
		for j := range s.cands {
			s.heap = append(s.heap, scored{idx: j, score: score(s.part, &s.cands[j])})
		}
		for j := len(s.heap)/2 - 1; j >= 0; j-- {
			s.down(j)
		}
		for range s.ranked {
			s.pop()
		}
	}
	for len(s.ranked) <= pos {
		if len(s.heap) == 0 {
			return scored{}, false
		}
		s.ranked = append(s.ranked, s.pop())
	}
	return s.ranked[pos], true
}

// pop removes and returns the heap's first node.
func (s *selector) pop() scored {
	top := s.heap[0]
	last := len(s.heap) - 1
	s.heap[0] = s.heap[last]
	s.heap = s.heap[:last]
	s.down(0)
	return top
}

// rankTop sets s.ranked to the first min(topRanks, nodes) nodes of partition
// i's ranking, in order, in one pass over the nodes, and s.more to whether
// other nodes exist. A node's exact score -w/ln(u) is computed only if it
// can rank among the first topRanks found so far: since -ln(u) >= 1-u, its
// score is at most w/(1-u), so a node with w/(1-u) clearly below the score
// of the last of them (by a margin far above rounding error) is skipped
// without its logarithm. The result is exactly what ranking every node by
// score would give.
func (s *selector) rankTop(i uint64) {
	s.part = i
	top := s.ranked[:0]
	if len(s.cands) <= 2*topRanks {
		// Few nodes: the heap of all of them (built by at) is cheaper.
		s.ranked, s.more = top, len(s.cands) > 0
		return
	}
	for j := range s.cands {
		c := &s.cands[j]
		u := unitHash(i, c.key)
		if len(top) == topRanks && c.weight < top[topRanks-1].score*(1-u)*(1-1e-9) {
			continue
		}
		sc := scored{idx: j, score: scoreOf(u, c.weight)}
		if len(top) == topRanks {
			if !sc.before(top[topRanks-1]) {
				continue
			}
			top = top[:topRanks-1]
		}
		// Insert in rank order; nodes come in index order, so a tie goes after.
		k := len(top)
		top = append(top, sc)
		for k > 0 && sc.before(top[k-1]) {
			top[k] = top[k-1]
			k--
		}
		top[k] = sc
	}
	s.ranked = top
	s.more = len(top) < len(s.cands)
}

// down restores the heap property below position i.
func (s *selector) down(i int) {
	h := s.heap
	for {
		best := i
		if l := 2*i + 1; l < len(h) && h[l].before(h[best]) {
			best = l
		}
		if r := 2*i + 2; r < len(h) && h[r].before(h[best]) {
			best = r
		}
		if best == i {
			return
		}
		h[i], h[best] = h[best], h[i]
		i = best
	}
}

// pick appends partition i's replicas to list (whose capacity is the number
// of replicas to choose) and returns it.
func (s *selector) pick(i uint64, list []string) []string {
	s.heap = s.heap[:0]
	s.rankTop(i)
	clear(s.taken)
	s.gen++
	k := cap(list)
	zones, hosts := 0, 0
	take := func(pos int) {
		c := &s.cands[s.ranked[pos].idx]
		s.taken[pos] = true
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
	// Pass 1: nodes in zones not used yet, until every zone is used.
	for pos := 0; len(list) < k && zones < s.nZones; pos++ {
		sc, ok := s.at(pos)
		if !ok {
			break
		}
		if s.zoneUsed[s.cands[sc.idx].zone] != s.gen {
			take(pos)
		}
	}
	// Pass 2: nodes on hosts not used yet, until every host is used.
	for pos := 0; len(list) < k && hosts < s.nHosts; pos++ {
		sc, ok := s.at(pos)
		if !ok {
			break
		}
		if !s.taken[pos] && s.hostUsed[s.cands[sc.idx].host] != s.gen {
			take(pos)
		}
	}
	// Pass 3: any node not taken yet.
	for pos := 0; len(list) < k; pos++ {
		if _, ok := s.at(pos); !ok {
			break
		}
		if !s.taken[pos] {
			take(pos)
		}
	}
	return list
}

// eligible returns the nodes with positive finite weight, sorted by ID, and the
// number of distinct zones and hosts among them. An empty Host is replaced
// by the node's ID.
func eligible(nodes []Node) (cands []candidate, nZones, nHosts int) {
	var el []Node
	for _, n := range nodes {
		if eligibleWeight(n.Weight) {
			el = append(el, n)
		}
	}
	slices.SortFunc(el, func(a, b Node) int { return strings.Compare(a.ID, b.ID) })
	// Zones and hosts are interned to small integers in ID order; they are
	// only ever compared for equality.
	zones := make(map[string]int)
	hosts := make(map[string]int)
	cands = make([]candidate, len(el))
	for j, n := range el {
		host := n.Host
		if host == "" {
			host = n.ID
		}
		z, ok := zones[n.Zone]
		if !ok {
			z = len(zones)
			zones[n.Zone] = z
		}
		h, ok := hosts[host]
		if !ok {
			h = len(hosts)
			hosts[host] = h
		}
		key := make([]byte, 8+len(n.ID))
		copy(key[8:], n.ID)
		cands[j] = candidate{id: n.ID, weight: n.Weight, zone: z, host: h, key: key}
	}
	return cands, len(zones), len(hosts)
}

// eligibleWeight reports whether a node of weight w takes part in
// placement: w must be positive and finite (NaN is not).
func eligibleWeight(w float64) bool {
	return w > 0 && !math.IsInf(w, 1)
}

// score is the weighted rendezvous score of candidate c for partition i:
// -weight / ln(u) with u uniform in (0, 1). Higher is better. For a single
// pick, node n wins with probability weight(n) / Σ weight.
func score(i uint64, c *candidate) float64 {
	return scoreOf(unitHash(i, c.key), c.weight)
}

// scoreOf is the score of a node of weight w whose hash for the partition is u.
func scoreOf(u, w float64) float64 {
	// ln(u) < 0 strictly since 0 < u < 1, so the score is finite and > 0.
	return -w / math.Log(u)
}

// unitHash maps xxhash64 of the partition number i (8 bytes, little
// endian) followed by the node ID to the open interval (0, 1). key holds
// 8 scratch bytes followed by the ID. The top 52 bits of the hash, h, give
// (h + 0.5) / 2^52, which is exact in a float64 (53 significant bits
// suffice), so the result is never 0 and never 1.
func unitHash(i uint64, key []byte) float64 {
	binary.LittleEndian.PutUint64(key, i)
	h := xxhash.Sum64(key) >> 12
	return (float64(h) + 0.5) / (1 << 52)
}

// Partitions returns the partition count P.
func (t *Table) Partitions() int { return t.p }

// Replicas returns the requested replica count R. Lists are shorter than R
// when fewer than R eligible nodes exist.
func (t *Table) Replicas() int { return t.r }

// Nodes returns partition i's ordered node IDs, primary first. The returned
// slice is shared with the table and must not be modified. Nodes panics if
// i is out of range.
func (t *Table) Nodes(partition int) []string { return t.lists[partition] }

// Lookup returns the ordered node IDs for bucket/key; it equals
// t.Nodes(Partition(bucket, key, t.Partitions())).
func (t *Table) Lookup(bucket, key string) []string {
	return t.lists[Partition(bucket, key, t.p)]
}

// Counts returns, for each node ID, how many partitions list it (in any
// position). Nodes that hold nothing are absent from the map.
func (t *Table) Counts() map[string]int {
	counts := make(map[string]int)
	for _, list := range t.lists {
		for _, id := range list {
			counts[id]++
		}
	}
	return counts
}

// Moves compares two tables with the same partition count. For each
// partition it counts the node IDs listed in to but not in from, i.e. the
// copies that must be created to go from one table to the other. It
// returns the total and the count per destination node. Moves panics if the
// partition counts differ.
func Moves(from, to *Table) (total int, perNode map[string]int) {
	if from.p != to.p {
		panic(fmt.Sprintf("placement: Moves between tables with %d and %d partitions", from.p, to.p))
	}
	perNode = make(map[string]int)
	for i, dst := range to.lists {
		src := from.lists[i]
		for _, id := range dst {
			if !slices.Contains(src, id) {
				perNode[id]++
				total++
			}
		}
	}
	return total, perNode
}

// ExpectedCounts returns the ideal number of copies each eligible node
// should hold in a table of p partitions and r replicas, ignoring zones and
// hosts: p·r·w/Σw, except that no node can hold more than p copies (one per
// partition). Nodes whose share would exceed p are capped at p and the
// remainder is redistributed over the others by weight ("water-filling").
// If fewer than r eligible nodes exist, each holds p. Nodes with
// Weight <= 0 (or an invalid weight) are absent from the result.
func ExpectedCounts(nodes []Node, p, r int) map[string]float64 {
	cands, _, _ := eligible(nodes)
	out := make(map[string]float64, len(cands))
	capped := make([]bool, len(cands))
	remaining := float64(r) // replicas per partition still to distribute
	for {
		var sum float64
		for j, c := range cands {
			if !capped[j] {
				sum += c.weight
			}
		}
		changed := false
		for j, c := range cands {
			if !capped[j] && remaining*c.weight/sum >= 1 {
				capped[j] = true
				remaining--
				changed = true
			}
		}
		if !changed || remaining <= 0 {
			for j, c := range cands {
				switch {
				case capped[j]:
					out[c.id] = float64(p)
				case remaining > 0 && sum > 0:
					out[c.id] = float64(p) * remaining * c.weight / sum
				default:
					out[c.id] = 0
				}
			}
			return out
		}
	}
}

// newSelector returns a selector over cands, spread over nZones zones and nHosts hosts.
func newSelector(cands []candidate, nZones, nHosts int) selector {
	return selector{
		cands:    cands,
		heap:     make([]scored, 0, len(cands)),
		ranked:   make([]scored, 0, len(cands)),
		taken:    make([]bool, len(cands)),
		zoneUsed: make([]int, nZones),
		hostUsed: make([]int, nHosts),
		nZones:   nZones,
		nHosts:   nHosts,
	}
}
