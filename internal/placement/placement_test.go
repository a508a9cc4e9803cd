package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"
)

// genCluster draws a membership of minN..maxN nodes spread over 1..maxZones
// zones. Hosts are nested in zones (a machine sits in one rack): a node is
// either its own host (Host "") or on one of two shared hosts of its zone.
// Weights are drawn from weights.
func genCluster(t *rapid.T, minN, maxN, maxZones int, weights []float64) []Node {
	n := rapid.IntRange(minN, maxN).Draw(t, "n")
	zones := rapid.IntRange(1, maxZones).Draw(t, "zones")
	salt := rapid.StringMatching(`[a-z]{0,3}`).Draw(t, "salt") // vary the hashes
	nodes := make([]Node, n)
	for i := range nodes {
		zone := fmt.Sprintf("zone-%d", rapid.IntRange(0, zones-1).Draw(t, "zone"))
		host := ""
		if h := rapid.IntRange(0, 2).Draw(t, "host"); h > 0 {
			host = fmt.Sprintf("%s/host-%d", zone, h)
		}
		nodes[i] = Node{
			ID:     fmt.Sprintf("node-%02d%s", i, salt),
			Zone:   zone,
			Host:   host,
			Weight: rapid.SampledFrom(weights).Draw(t, "weight"),
		}
	}
	return nodes
}

// equalNodes returns n nodes of weight 1, named prefix0..prefix(n-1), all in
// zone (or each in its own zone if zone is "").
func equalNodes(prefix string, n int, zone string) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		z := zone
		if z == "" {
			z = fmt.Sprintf("own-%d", i)
		}
		nodes[i] = Node{ID: fmt.Sprintf("%s%d", prefix, i), Zone: z, Weight: 1}
	}
	return nodes
}

// fataler is what mustNew needs of a *testing.T, *testing.B or *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustNew(t fataler, nodes []Node, p, r int) *Table {
	t.Helper()
	tb, err := New(nodes, p, r)
	if err != nil {
		t.Fatalf("New(%d nodes, p=%d, r=%d): %v", len(nodes), p, r, err)
	}
	return tb
}

// eligibleNodes returns the nodes New considers, keyed by ID.
func eligibleNodes(nodes []Node) map[string]Node {
	m := make(map[string]Node)
	for _, n := range nodes {
		if n.Weight > 0 {
			if n.Host == "" {
				n.Host = n.ID
			}
			m[n.ID] = n
		}
	}
	return m
}

func distinct[T comparable](xs []T) int {
	seen := make(map[T]bool)
	for _, x := range xs {
		seen[x] = true
	}
	return len(seen)
}

func sameTables(a, b *Table) error {
	if a.Partitions() != b.Partitions() || a.Replicas() != b.Replicas() {
		return fmt.Errorf("shape %d/%d vs %d/%d", a.Partitions(), a.Replicas(), b.Partitions(), b.Replicas())
	}
	for i := range a.Partitions() {
		if !slices.Equal(a.Nodes(i), b.Nodes(i)) {
			return fmt.Errorf("partition %d: %v vs %v", i, a.Nodes(i), b.Nodes(i))
		}
	}
	return nil
}

func TestPartition(t *testing.T) {
	tests := []struct {
		bucket, key string
		p           int
	}{
		{"b", "k", 1},
		{"b", "k", 7},
		{"photos", "2024/01/cat.jpg", 4096},
		{"", "", 4096},
		{"a", "b\x00c", 1 << 20},
	}
	for _, tt := range tests {
		got := Partition(tt.bucket, tt.key, tt.p)
		want := int(xxhash.Sum64String(tt.bucket+"\x00"+tt.key) % uint64(tt.p))
		if got != want {
			t.Errorf("Partition(%q, %q, %d) = %d, want %d", tt.bucket, tt.key, tt.p, got, want)
		}
		if got < 0 || got >= tt.p {
			t.Errorf("Partition(%q, %q, %d) = %d out of range", tt.bucket, tt.key, tt.p, got)
		}
	}
	// The separator keeps bucket/key boundaries apart.
	if Partition("ab", "c", 1<<30) == Partition("a", "bc", 1<<30) {
		t.Error(`Partition("ab","c") == Partition("a","bc")`)
	}
	defer func() {
		if recover() == nil {
			t.Error("Partition with p = 0 did not panic")
		}
	}()
	Partition("b", "k", 0)
}

func TestLookup(t *testing.T) {
	tb := mustNew(t, equalNodes("n", 5, "z"), 64, 2)
	for i := range 200 {
		key := fmt.Sprintf("key-%d", i)
		if got, want := tb.Lookup("bkt", key), tb.Nodes(Partition("bkt", key, 64)); !slices.Equal(got, want) {
			t.Fatalf("Lookup(bkt, %s) = %v, want %v", key, got, want)
		}
	}
}

// TestDeterminism: any permutation of the same nodes gives the same table.
func TestDeterminism(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genCluster(t, 1, 12, 5, []float64{0, 1, 2, 3, 4, 0.5})
		p := rapid.IntRange(1, 300).Draw(t, "p")
		r := rapid.IntRange(1, 4).Draw(t, "r")
		shuffled := rapid.Permutation(nodes).Draw(t, "shuffled")
		a := mustNew(t, nodes, p, r)
		b := mustNew(t, shuffled, p, r)
		if err := sameTables(a, b); err != nil {
			t.Fatalf("shuffled input changed the table: %v", err)
		}
		if again := mustNew(t, nodes, p, r); sameTables(a, again) != nil {
			t.Fatal("New is not deterministic")
		}
		// Calibrate is order-independent too.
		weights := func(ns []Node) map[string]float64 {
			m := make(map[string]float64)
			for _, n := range Calibrate(ns, r) {
				m[n.ID] = n.Weight
			}
			return m
		}
		wa, wb := weights(nodes), weights(shuffled)
		for id, w := range wa {
			if wb[id] != w {
				t.Fatalf("Calibrate weight of %s: %v vs %v after shuffling", id, w, wb[id])
			}
		}
	})
}

// TestSpreading checks the failure-domain and shape invariants of every
// list on random clusters.
func TestSpreading(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genCluster(t, 2, 12, 5, []float64{1, 2, 3, 4})
		if rapid.Bool().Draw(t, "withIneligible") {
			nodes = append(nodes, Node{ID: "zero", Zone: "zone-9", Weight: 0},
				Node{ID: "negative", Zone: "zone-8", Weight: -1},
				Node{ID: "nan", Zone: "zone-7", Weight: math.NaN()})
		}
		r := rapid.IntRange(1, 3).Draw(t, "r")
		const p = 128
		tb := mustNew(t, nodes, p, r)
		el := eligibleNodes(nodes)
		var allZones, allHosts []string
		for _, n := range el {
			allZones = append(allZones, n.Zone)
			allHosts = append(allHosts, n.Host)
		}
		nZones, nHosts := distinct(allZones), distinct(allHosts)
		k := min(r, len(el))

		cands, _, _ := eligible(nodes)
		for i := range p {
			list := tb.Nodes(i)
			if len(list) != k {
				t.Fatalf("partition %d: %d nodes %v, want %d", i, len(list), list, k)
			}
			if distinct(list) != len(list) {
				t.Fatalf("partition %d: duplicate node in %v", i, list)
			}
			var zones, hosts []string
			for _, id := range list {
				n, ok := el[id]
				if !ok {
					t.Fatalf("partition %d: ineligible node %q in %v", i, id, list)
				}
				zones, hosts = append(zones, n.Zone), append(hosts, n.Host)
			}
			// As many zones as possible, then as many hosts as possible.
			if got, want := distinct(zones), min(k, nZones); got != want {
				t.Fatalf("partition %d: %v spans %d zones, want %d (%d zones, r=%d)", i, list, got, want, nZones, r)
			}
			if got, want := distinct(hosts), min(k, nHosts); got != want {
				t.Fatalf("partition %d: %v spans %d hosts, want %d (%d hosts, r=%d)", i, list, got, want, nHosts, r)
			}
			// The primary is the node with the highest score.
			best := scored{idx: -1}
			for j := range cands {
				s := scored{idx: j, score: score(uint64(i), &cands[j])}
				if best.idx < 0 || s.before(best) {
					best = s
				}
			}
			if list[0] != cands[best.idx].id {
				t.Fatalf("partition %d: primary %s, want top-scoring %s", i, list[0], cands[best.idx].id)
			}
		}
	})
}

func TestErrorsAndEdgeCases(t *testing.T) {
	three := equalNodes("n", 3, "z")
	errCases := []struct {
		name  string
		nodes []Node
		p, r  int
		want  error
	}{
		{"p zero", three, 0, 3, ErrPartitions},
		{"p negative", three, -5, 3, ErrPartitions},
		{"r zero", three, 16, 0, ErrReplicas},
		{"r negative", three, 16, -1, ErrReplicas},
		{"duplicate ID", append(slices.Clone(three), Node{ID: "n1", Weight: 2}), 16, 3, ErrDuplicateID},
		{"infinite weight", append(slices.Clone(three), Node{ID: "inf", Weight: math.Inf(1)}), 16, 3, ErrWeight},
	}
	for _, tt := range errCases {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := New(tt.nodes, tt.p, tt.r)
			if !errors.Is(err, tt.want) || tb != nil {
				t.Fatalf("New = %v, %v; want nil, %v", tb, err, tt.want)
			}
		})
	}

	cases := []struct {
		name    string
		nodes   []Node
		r       int
		wantLen int
	}{
		{"nil nodes", nil, 3, 0},
		{"all zero weight", []Node{{ID: "a", Weight: 0}, {ID: "b", Weight: 0}}, 2, 0},
		{"negative and NaN weights", []Node{{ID: "a", Weight: -1}, {ID: "b", Weight: math.NaN()}}, 1, 0},
		{"fewer nodes than replicas", equalNodes("n", 2, "z"), 3, 2},
		{"zero-weight node ignored", append(equalNodes("n", 3, ""), Node{ID: "zero", Weight: 0}), 3, 3},
		// A zero-weight node may share an eligible node's ID (e.g. a
		// drained node being replaced): it is ignored, not an error.
		{"ineligible duplicate ID", append(equalNodes("n", 4, ""), Node{ID: "n0", Weight: 0}), 3, 3},
		{"single node", equalNodes("n", 1, "z"), 1, 1},
		{"fractional weights", []Node{{ID: "a", Weight: 1e-9}, {ID: "b", Weight: 1e9}}, 1, 1},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			const p = 32
			tb := mustNew(t, tt.nodes, p, tt.r)
			if tb.Partitions() != p || tb.Replicas() != tt.r {
				t.Fatalf("Partitions, Replicas = %d, %d; want %d, %d", tb.Partitions(), tb.Replicas(), p, tt.r)
			}
			for i := range p {
				if got := tb.Nodes(i); len(got) != tt.wantLen || slices.Contains(got, "zero") {
					t.Fatalf("partition %d: %v, want %d eligible nodes", i, got, tt.wantLen)
				}
			}
			if got := tb.Lookup("b", "k"); len(got) != tt.wantLen {
				t.Fatalf("Lookup = %v", got)
			}
			counts := tb.Counts()
			if tt.wantLen == 0 && len(counts) != 0 {
				t.Fatalf("Counts = %v, want empty", counts)
			}
			if tt.wantLen > 0 && tt.wantLen < tt.r {
				for id, c := range counts {
					if c != p {
						t.Fatalf("Counts[%s] = %d, want %d: with fewer nodes than r every node holds everything", id, c, p)
					}
				}
			}
		})
	}
}

func TestCountsAndMoves(t *testing.T) {
	from := &Table{p: 3, r: 2, lists: [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}}}
	to := &Table{p: 3, r: 2, lists: [][]string{{"b", "a"}, {"d", "c"}, {"d", "e"}}}
	if got, want := from.Counts(), map[string]int{"a": 2, "b": 2, "c": 2}; !mapsEqual(got, want) {
		t.Errorf("Counts = %v, want %v", got, want)
	}
	total, per := Moves(from, to)
	// Partition 0 only reorders; 1 gains d; 2 gains d and e.
	if want := map[string]int{"d": 2, "e": 1}; total != 3 || !mapsEqual(per, want) {
		t.Errorf("Moves = %d, %v; want 3, %v", total, per, want)
	}
	if total, per := Moves(to, to); total != 0 || len(per) != 0 {
		t.Errorf("Moves(t, t) = %d, %v; want 0, empty", total, per)
	}
	defer func() {
		if recover() == nil {
			t.Error("Moves between different partition counts did not panic")
		}
	}()
	Moves(from, &Table{p: 4, r: 2, lists: make([][]string, 4)})
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestExpectedCounts(t *testing.T) {
	tests := []struct {
		name    string
		weights []float64
		r       int
		want    []float64 // per node, in units of p
	}{
		{"equal", []float64{1, 1, 1, 1}, 2, []float64{0.5, 0.5, 0.5, 0.5}},
		{"proportional", []float64{1, 2, 3}, 1, []float64{1.0 / 6, 2.0 / 6, 3.0 / 6}},
		{"one capped", []float64{1, 1, 1, 4}, 3, []float64{2.0 / 3, 2.0 / 3, 2.0 / 3, 1}},
		{"cascade", []float64{1, 1, 10, 10}, 3, []float64{0.5, 0.5, 1, 1}},
		{"fewer than r", []float64{1, 5}, 3, []float64{1, 1}},
		{"ineligible", []float64{0, 2, 2}, 1, []float64{0, 0.5, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var nodes []Node
			for i, w := range tt.weights {
				nodes = append(nodes, Node{ID: fmt.Sprint(i), Weight: w})
			}
			got := ExpectedCounts(nodes, 1000, tt.r)
			var sum float64
			for i, w := range tt.want {
				if math.Abs(got[fmt.Sprint(i)]-1000*w) > 1e-9 {
					t.Errorf("node %d: %v, want %v", i, got[fmt.Sprint(i)], 1000*w)
				}
				sum += 1000 * w
			}
			if _, ok := got["0"]; tt.weights[0] <= 0 && ok {
				t.Error("ineligible node present")
			}
			if n := min(tt.r, len(got)); math.Abs(sum-float64(1000*n)) > 1e-6 {
				t.Errorf("shares sum to %v, want %v", sum, 1000*n)
			}
		})
	}
}

// deviation returns the largest |count/expected - 1| over expected's nodes.
func deviation(counts map[string]int, expected map[string]float64) (worst float64, worstID string) {
	for id, e := range expected {
		if d := math.Abs(float64(counts[id])/e - 1); d > worst || worstID == "" {
			worst, worstID = d, id
		}
	}
	return worst, worstID
}

// TestBalanceEqual: equal nodes get equal shares within ±10% at only 1024
// partitions.
func TestBalanceEqual(t *testing.T) {
	const p, r = 1024, 3
	var worst float64
	for n := 3; n <= 8; n++ {
		for _, layout := range []string{"one zone", "own zones"} {
			zone := "z"
			if layout == "own zones" {
				zone = ""
			}
			nodes := equalNodes("node-", n, zone)
			counts := mustNew(t, nodes, p, r).Counts()
			d, id := deviation(counts, ExpectedCounts(nodes, p, r))
			worst = max(worst, d)
			if d > 0.10 {
				t.Errorf("%d nodes, %s: %s holds %d, expected %.0f (%.1f%% off)", n, layout, id, counts[id], float64(p*r)/float64(n), 100*d)
			}
		}
	}
	t.Logf("p=%d r=%d, 3..8 equal nodes: worst deviation %.1f%%", p, r, 100*worst)
}

// rendezvousInclusion returns, per eligible node, the exact probability
// that plain weighted rendezvous lists it among the top r (one zone).
func rendezvousInclusion(nodes []Node, r int) map[string]float64 {
	cands, _, _ := eligible(nodes)
	out := make(map[string]float64)
	if len(cands) <= r {
		for _, c := range cands {
			out[c.id] = 1
		}
		return out
	}
	var weights []float64
	for _, c := range cands {
		weights = append(weights, c.weight)
	}
	slices.Sort(weights)
	weights = slices.Compact(weights)
	count := make([]int, len(weights))
	for _, c := range cands {
		j, _ := slices.BinarySearch(weights, c.weight)
		count[j]++
	}
	pi := make([]float64, len(weights))
	inclusion(weights, count, r, pi)
	for _, c := range cands {
		j, _ := slices.BinarySearch(weights, c.weight)
		out[c.id] = pi[j]
	}
	return out
}

// TestBalanceWeighted checks weighted clusters (3..12 nodes, weights 1..4,
// r = 3, one zone or one zone per node) on a fixed, seeded sample of
// random clusters plus adversarial ones:
//
//   - New(Calibrate(nodes)) gives every node its capped weight share
//     (ExpectedCounts) within ±10%;
//   - plain New gives every node the share predicted by the exact
//     sampling-without-replacement model of rendezvous (within ±10%), and
//     its deviation from the weight share is logged: plain rendezvous does
//     NOT meet ±10% of the weight share when weights differ.
//
// The partition count is chosen per cluster so that ±10% is at least 4
// binomial standard deviations for the smallest share (at least 4096).
// The sample is seeded, so the test is deterministic.
func TestBalanceWeighted(t *testing.T) {
	const r = 3
	rng := rand.New(rand.NewPCG(7, 11))
	var clusters [][]Node
	for range 14 {
		n := 3 + rng.IntN(10)
		nodes := make([]Node, n)
		for i := range nodes {
			nodes[i] = Node{ID: fmt.Sprintf("node-%02d", i), Zone: "z", Weight: float64(1 + rng.IntN(4))}
		}
		clusters = append(clusters, nodes)
	}
	withWeights := func(ws ...float64) []Node {
		nodes := make([]Node, len(ws))
		for i, w := range ws {
			nodes[i] = Node{ID: fmt.Sprintf("w-%02d", i), Zone: "z", Weight: w}
		}
		return nodes
	}
	clusters = append(clusters,
		withWeights(1, 4, 4, 4),                      // light node among heavy ones
		withWeights(1, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4), // smallest share
		withWeights(4, 1, 1, 1, 1, 1, 1),             // one heavy node (capped at p)
		withWeights(1, 1, 2, 2, 3, 3, 4, 4),
	)
	for i := range clusters {
		if i%2 == 1 { // every node in its own zone
			for j := range clusters[i] {
				clusters[i][j].Zone = clusters[i][j].ID
			}
		}
	}

	var worstCal, worstModel, worstPlain, worstBias float64
	var worstPlainDesc, worstBiasDesc string
	for _, nodes := range clusters {
		share := ExpectedCounts(nodes, 1, r)
		model := rendezvousInclusion(nodes, r)
		minPi := 1.0
		for id := range share {
			minPi = min(minPi, share[id], model[id])
		}
		sigmas := 4.0
		p := int(math.Ceil(sigmas * sigmas / 0.01 * (1 - minPi) / minPi))
		p = max(4096, (p+1023)/1024*1024)

		want := ExpectedCounts(nodes, p, r)
		cal := mustNew(t, Calibrate(nodes, r), p, r).Counts()
		d, id := deviation(cal, want)
		worstCal = max(worstCal, d)
		if d > 0.10 {
			t.Errorf("calibrated %v, p=%d: %s holds %d, expected %.0f (%.1f%% off)", weightsOf(nodes), p, id, cal[id], want[id], 100*d)
		}

		for id, pi := range model { // noise-free bias of plain rendezvous
			if d := math.Abs(pi/share[id] - 1); d > worstBias {
				worstBias = d
				worstBiasDesc = fmt.Sprintf("weights %v: %s (weight %v) listed by %.1f%% of partitions, share %.1f%%",
					weightsOf(nodes), id, weightOf(nodes, id), 100*pi, 100*share[id])
			}
		}
		plain := mustNew(t, nodes, p, r).Counts()
		predicted := make(map[string]float64)
		for id, pi := range model {
			predicted[id] = pi * float64(p)
		}
		d, id = deviation(plain, predicted)
		worstModel = max(worstModel, d)
		if d > 0.10 {
			t.Errorf("plain %v, p=%d: %s holds %d, model predicts %.0f (%.1f%% off)", weightsOf(nodes), p, id, plain[id], predicted[id], 100*d)
		}
		if d, id := deviation(plain, want); d > worstPlain {
			worstPlain = d
			worstPlainDesc = fmt.Sprintf("weights %v: %s (weight %v) holds %d, share %.0f", weightsOf(nodes), id, weightOf(nodes, id), plain[id], want[id])
		}
	}
	t.Logf("calibrated vs weight share: worst deviation %.1f%%", 100*worstCal)
	t.Logf("plain vs rendezvous model: worst deviation %.1f%%", 100*worstModel)
	t.Logf("plain vs weight share: worst deviation %.1f%% (%s)", 100*worstPlain, worstPlainDesc)
	t.Logf("plain rendezvous model vs weight share: worst bias %.1f%% (%s)", 100*worstBias, worstBiasDesc)
}

func weightsOf(nodes []Node) []float64 {
	var ws []float64
	for _, n := range nodes {
		ws = append(ws, n.Weight)
	}
	return ws
}

func weightOf(nodes []Node, id string) float64 {
	for _, n := range nodes {
		if n.ID == id {
			return n.Weight
		}
	}
	return 0
}

// TestCalibrateModel: for random weight mixes the calibrated weights give
// exact top-r inclusion probabilities equal to the capped weight shares.
func TestCalibrateModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.IntRange(1, 4).Draw(t, "r")
		nodes := genCluster(t, 1, 16, 1, []float64{0, 0.5, 1, 2, 3, 4, 10})
		cal := Calibrate(nodes, r)
		if len(cal) != len(nodes) {
			t.Fatalf("Calibrate returned %d nodes, want %d", len(cal), len(nodes))
		}
		for i := range nodes {
			if cal[i].ID != nodes[i].ID || (nodes[i].Weight > 0) != (cal[i].Weight > 0) {
				t.Fatalf("Calibrate changed node %d from %+v to %+v", i, nodes[i], cal[i])
			}
		}
		el := eligibleNodes(nodes)
		if distinct(weightsOf(slices.Collect(mapValues(el)))) <= 1 || len(el) <= r {
			for i := range nodes {
				if cal[i].Weight != nodes[i].Weight && nodes[i].Weight > 0 {
					t.Fatalf("Calibrate changed weights although it should not: %v -> %v", weightsOf(nodes), weightsOf(cal))
				}
			}
		}
		share := ExpectedCounts(nodes, 1, r)
		got := rendezvousInclusion(cal, r)
		for id, want := range share {
			if want == 1 {
				// Capped: "practically always", by a margin of ~n/1e9.
				if got[id] < 1-1e-6 {
					t.Fatalf("capped node %s included with probability %v", id, got[id])
				}
				continue
			}
			if math.Abs(got[id]/want-1) > 1e-5 {
				t.Fatalf("weights %v: node %s (weight %v) included with probability %v, want %v",
					weightsOf(nodes), id, el[id].Weight, got[id], want)
			}
		}
	})
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// TestMovesAddEqual: adding one equal node to n equal nodes in one zone
// only creates copies on the new node, about p*r/(n+1) of them.
func TestMovesAddEqual(t *testing.T) {
	const p, r = 4096, 3
	worst := 0.0
	tables := make(map[int]*Table) // by n; rapid runs checks sequentially
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(3, 10).Draw(t, "n")
		newID := rapid.StringMatching(`new-[a-z0-9]{1,6}`).Draw(t, "newID")
		before := equalNodes("node-", n, "z")
		if tables[n] == nil {
			tables[n] = mustNew(t, before, p, r)
		}
		after := append(slices.Clone(before), Node{ID: newID, Zone: "z", Weight: 1})
		total, per := Moves(tables[n], mustNew(t, after, p, r))
		if len(per) != 1 || per[newID] != total {
			t.Fatalf("n=%d: copies created on %v, want only on %s", n, per, newID)
		}
		expected := float64(p*r) / float64(n+1)
		ratio := float64(total) / expected
		worst = max(worst, math.Abs(ratio-1))
		if math.Abs(ratio-1) > 0.25 {
			t.Fatalf("n=%d: %d copies moved, expected about %.0f (ratio %.3f)", n, total, expected, ratio)
		}
	})
	t.Logf("moved/expected worst deviation: %.1f%%", 100*worst)
}

// TestMovesAddZones: 3 zones of 2..4 equal nodes; adding a node to one zone
// only creates copies on the new node. With r = 3 each zone holds one copy
// of every partition, so the new node takes 1/(m+1) of its zone's p copies.
func TestMovesAddZones(t *testing.T) {
	const p = 4096
	worst := 0.0
	tables := make(map[string]*Table) // by r and zone sizes
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.IntRange(2, 3).Draw(t, "r")
		var before []Node
		sizes := make([]int, 3)
		for z := range sizes {
			sizes[z] = rapid.IntRange(2, 4).Draw(t, "size")
			for i := range sizes[z] {
				before = append(before, Node{ID: fmt.Sprintf("z%d-n%d", z, i), Zone: fmt.Sprintf("zone-%d", z), Weight: 1})
			}
		}
		z := rapid.IntRange(0, 2).Draw(t, "zone")
		after := append(slices.Clone(before), Node{ID: "new", Zone: fmt.Sprintf("zone-%d", z), Weight: 1})
		key := fmt.Sprint(r, sizes)
		if tables[key] == nil {
			tables[key] = mustNew(t, before, p, r)
		}
		total, per := Moves(tables[key], mustNew(t, after, p, r))
		if len(per) != 1 || per["new"] != total {
			t.Fatalf("zone sizes %v, new node in zone %d, r=%d: copies created on %v, want only on the new node", sizes, z, r, per)
		}
		if r == 3 {
			expected := float64(p) / float64(sizes[z]+1)
			ratio := float64(total) / expected
			worst = max(worst, math.Abs(ratio-1))
			if math.Abs(ratio-1) > 0.25 {
				t.Fatalf("zone sizes %v, new node in zone %d: %d copies moved, expected about %.0f", sizes, z, total, expected)
			}
		}
	})
	t.Logf("r=3: moved/expected worst deviation: %.1f%%", 100*worst)
}

// TestMovesAddGeneral: on arbitrary clusters (zones, hosts nested in zones,
// weights, r = 1..4) adding a node never creates a copy anywhere but on the
// new node, and each partition gains at most that one node.
func TestMovesAddGeneral(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		before := genCluster(t, 1, 12, 4, []float64{1, 2, 3, 4})
		r := rapid.IntRange(1, 4).Draw(t, "r")
		zone := fmt.Sprintf("zone-%d", rapid.IntRange(0, 4).Draw(t, "newZone"))
		host := ""
		if h := rapid.IntRange(0, 2).Draw(t, "newHost"); h > 0 {
			host = fmt.Sprintf("%s/host-%d", zone, h)
		}
		added := Node{ID: "added", Zone: zone, Host: host, Weight: rapid.SampledFrom([]float64{1, 2, 3, 4}).Draw(t, "newWeight")}
		after := append(slices.Clone(before), added)
		const p = 256
		from, to := mustNew(t, before, p, r), mustNew(t, after, p, r)
		if _, per := Moves(from, to); len(per) > 1 || (len(per) == 1 && per["added"] == 0) {
			t.Fatalf("adding %+v created copies on %v", added, per)
		}
	})
}

// TestMovesRemove: removing a node changes only the partitions that held
// it, and each of those gains exactly one replacement (none if too few
// nodes remain).
func TestMovesRemove(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		before := genCluster(t, 1, 12, 4, []float64{1, 2, 3, 4})
		r := rapid.IntRange(1, 4).Draw(t, "r")
		victim := rapid.IntRange(0, len(before)-1).Draw(t, "victim")
		gone := before[victim].ID
		after := slices.Delete(slices.Clone(before), victim, victim+1)
		const p = 256
		from, to := mustNew(t, before, p, r), mustNew(t, after, p, r)
		for i := range p {
			old, cur := from.Nodes(i), to.Nodes(i)
			if !slices.Contains(old, gone) {
				if !slices.Equal(old, cur) {
					t.Fatalf("partition %d did not hold %s but changed: %v -> %v", i, gone, old, cur)
				}
				continue
			}
			var added []string
			for _, id := range cur {
				if !slices.Contains(old, id) {
					added = append(added, id)
				}
			}
			want := 1
			if len(after) < r {
				want = 0
			}
			if len(added) != want || slices.Contains(cur, gone) {
				t.Fatalf("partition %d: %v -> %v after removing %s, want exactly %d replacement", i, old, cur, gone, want)
			}
		}
	})
}

// TestCalibrateMovement measures (and bounds) the extra movement Calibrate
// costs: its weights depend on the whole membership, so adding a node to a
// mixed-weight cluster also moves some copies between old nodes.
func TestCalibrateMovement(t *testing.T) {
	const p, r = 4096, 3
	rng := rand.New(rand.NewPCG(3, 5))
	var worst float64
	for range 8 {
		n := 4 + rng.IntN(9)
		before := make([]Node, n)
		for i := range before {
			before[i] = Node{ID: fmt.Sprintf("node-%02d", i), Zone: "z", Weight: float64(1 + rng.IntN(4))}
		}
		after := append(slices.Clone(before), Node{ID: "added", Zone: "z", Weight: float64(1 + rng.IntN(4))})
		total, per := Moves(mustNew(t, Calibrate(before, r), p, r), mustNew(t, Calibrate(after, r), p, r))
		elsewhere := float64(total-per["added"]) / float64(total)
		worst = max(worst, elsewhere)
		if elsewhere > 0.2 {
			t.Errorf("weights %v + %v: %.0f%% of %d created copies are not on the new node", weightsOf(before), after[n].Weight, 100*elsewhere, total)
		}
	}
	t.Logf("calibrated add: worst share of created copies not on the new node: %.1f%%", 100*worst)
}

func benchNodes() []Node {
	var nodes []Node
	for i := range 12 {
		nodes = append(nodes, Node{
			ID:     fmt.Sprintf("node-%02d", i),
			Zone:   fmt.Sprintf("zone-%d", i%3),
			Weight: float64(1 + i%4),
		})
	}
	return nodes
}

func BenchmarkNew(b *testing.B) {
	nodes := benchNodes()
	for b.Loop() {
		if _, err := New(nodes, 4096, 3); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	tb := mustNew(b, benchNodes(), 4096, 3)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("photos/2024/%06d.jpg", i)
	}
	i := 0
	for b.Loop() {
		if len(tb.Lookup("bucket", keys[i%len(keys)])) != 3 {
			b.Fatal("short list")
		}
		i++
	}
}

func BenchmarkCalibrate(b *testing.B) {
	nodes := benchNodes()
	for b.Loop() {
		Calibrate(nodes, 3)
	}
}

// referenceNew is New as first written: every node scored and the whole ranking sorted
// for every partition, then the three passes. New must give exactly its tables (it finds
// the first ranks without scoring every node exactly, and the rest only when needed).
func referenceNew(nodes []Node, p, r int) [][]string {
	cands, nZones, nHosts := eligible(nodes)
	k := min(r, len(cands))
	lists := make([][]string, p)
	for i := range p {
		ranked := make([]scored, len(cands))
		for j := range cands {
			ranked[j] = scored{idx: j, score: score(uint64(i), &cands[j])}
		}
		slices.SortFunc(ranked, func(a, b scored) int {
			if a.before(b) {
				return -1
			}
			if b.before(a) {
				return 1
			}
			return 0
		})
		taken := make([]bool, len(ranked))
		zones, hosts := map[int]bool{}, map[int]bool{}
		var list []string
		take := func(pos int) {
			c := cands[ranked[pos].idx]
			taken[pos] = true
			zones[c.zone], hosts[c.host] = true, true
			list = append(list, c.id)
		}
		for pos := 0; pos < len(ranked) && len(list) < k && len(zones) < nZones; pos++ {
			if !zones[cands[ranked[pos].idx].zone] {
				take(pos)
			}
		}
		for pos := 0; pos < len(ranked) && len(list) < k && len(hosts) < nHosts; pos++ {
			if !taken[pos] && !hosts[cands[ranked[pos].idx].host] {
				take(pos)
			}
		}
		for pos := 0; pos < len(ranked) && len(list) < k; pos++ {
			if !taken[pos] {
				take(pos)
			}
		}
		lists[i] = list
	}
	return lists
}

// TestNewMatchesReference checks that New's tables are exactly the reference's, on random
// clusters larger and smaller than topRanks, and on clusters whose passes must look far
// down the ranking (a zone or a host of tiny weight).
func TestNewMatchesReference(t *testing.T) {
	check := func(t fataler, nodes []Node, p, r int) {
		t.Helper()
		tb := mustNew(t, nodes, p, r)
		for i, want := range referenceNew(nodes, p, r) {
			if got := tb.Nodes(i); !slices.Equal(got, want) {
				t.Fatalf("partition %d: New gives %v, the reference %v", i, got, want)
			}
		}
	}
	t.Run("random", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			nodes := genCluster(t, 1, 80, 6, []float64{0, 1, 2, 3, 4, 0.5, 1e-6, 1e6})
			check(t, nodes, rapid.IntRange(1, 200).Draw(t, "p"), rapid.IntRange(1, 5).Draw(t, "r"))
		})
	})
	t.Run("far down the ranking", func(t *testing.T) {
		nodes := equalNodes("big-", 60, "a")
		nodes = append(nodes, Node{ID: "tiny-b", Zone: "b", Weight: 1e-4}, Node{ID: "tiny-c", Zone: "c", Weight: 1e-3},
			Node{ID: "shared-1", Zone: "d", Host: "h", Weight: 1e-2}, Node{ID: "shared-2", Zone: "d", Host: "h", Weight: 1e-2})
		for _, r := range []int{1, 3, 4, 6, 64} {
			check(t, nodes, 500, r)
		}
	})
	t.Run("equal weights, many nodes", func(t *testing.T) {
		check(t, equalNodes("n", 300, ""), 300, 3)
		check(t, equalNodes("n", 300, "one"), 300, 3)
	})
}

func BenchmarkNewLarge(b *testing.B) {
	var nodes []Node
	for i := range 1000 {
		nodes = append(nodes, Node{ID: fmt.Sprintf("n%05d", i), Zone: fmt.Sprintf("z%d", i%5), Weight: float64(int(50) << (i % 3))})
	}
	for b.Loop() {
		if _, err := New(nodes, 10000, 3); err != nil {
			b.Fatal(err)
		}
	}
}
