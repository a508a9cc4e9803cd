package placement

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

func mustNewV2(t fataler, nodes []Node, p, r int) *Table {
	t.Helper()
	tb, err := NewVersion(V2, nodes, p, r)
	if err != nil {
		t.Fatalf("NewVersion(V2, %d nodes, p=%d, r=%d): %v", len(nodes), p, r, err)
	}
	return tb
}

// limitsByID returns each eligible node's V2 limit by ID.
func limitsByID(nodes []Node, p, r int) map[string]int {
	cands, nZones, _ := eligible(nodes)
	out := make(map[string]int, len(cands))
	for j, l := range limits(cands, nZones, p, min(r, len(cands)), V2Epsilon) {
		out[cands[j].id] = l
	}
	return out
}

func TestNewVersion(t *testing.T) {
	nodes := genClusterFixed(20, 4)
	v1 := mustNew(t, nodes, 512, 3)
	for _, v := range []Version{0, V1} {
		tb, err := NewVersion(v, nodes, 512, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := sameTables(v1, tb); err != nil {
			t.Errorf("version %d differs from New: %v", v, err)
		}
	}
	for _, v := range []Version{-1, 3} {
		if _, err := NewVersion(v, nodes, 512, 3); !errors.Is(err, ErrVersion) {
			t.Errorf("version %d: err %v, want ErrVersion", v, err)
		}
	}
	for _, eps := range []float64{0, -0.1, math.NaN(), math.Inf(1)} {
		if _, err := NewBounded(nodes, 512, 3, eps); err == nil {
			t.Errorf("NewBounded with eps %v: no error", eps)
		}
	}
	for _, c := range []struct{ p, r int }{{0, 3}, {512, 0}} {
		if _, err := NewVersion(V2, nodes, c.p, c.r); err == nil {
			t.Errorf("V2 with p=%d r=%d: no error", c.p, c.r)
		}
	}
}

// genClusterFixed is n nodes over zones zones, weights 1 to 4, each its own host.
func genClusterFixed(n, zones int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("n%03d", i), Zone: fmt.Sprintf("z%d", i%zones), Weight: float64(1 + i%4)}
	}
	return nodes
}

// TestBoundedDeterminism: V2's table depends on the membership only, not on the order
// of the nodes, and is the same on every call.
func TestBoundedDeterminism(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genCluster(t, 1, 30, 5, []float64{0, 1, 2, 4, 8})
		r := rapid.IntRange(1, 4).Draw(t, "r")
		p := rapid.IntRange(1, 600).Draw(t, "p")
		a := mustNewV2(t, nodes, p, r)
		shuffled := slices.Clone(nodes)
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if err := sameTables(a, mustNewV2(t, shuffled, p, r)); err != nil {
			t.Fatalf("shuffled nodes give another table: %v", err)
		}
	})
}

// TestBoundedSpreading: every V2 list has the length, the distinct zones and the
// distinct hosts of the V1 list of the same partition, and no node twice (V2 keeps
// every rule of V1; only which nodes changes).
func TestBoundedSpreading(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := genCluster(t, 1, 30, 6, []float64{0, 1, 2, 4, 8})
		r := rapid.IntRange(1, 5).Draw(t, "r")
		p := rapid.IntRange(1, 400).Draw(t, "p")
		el := eligibleNodes(nodes)
		v1, v2 := mustNew(t, nodes, p, r), mustNewV2(t, nodes, p, r)
		spread := func(ids []string) (int, int) {
			var zs, hs []string
			for _, id := range ids {
				zs, hs = append(zs, el[id].Zone), append(hs, el[id].Host)
			}
			return distinct(zs), distinct(hs)
		}
		for i := range p {
			a, b := v1.Nodes(i), v2.Nodes(i)
			if len(a) != len(b) || distinct(b) != len(b) {
				t.Fatalf("partition %d: v1 %v, v2 %v", i, a, b)
			}
			za, ha := spread(a)
			zb, hb := spread(b)
			if za != zb || ha != hb {
				t.Fatalf("partition %d: v1 %v spreads over %d zones and %d hosts, v2 %v over %d and %d", i, a, za, ha, b, zb, hb)
			}
		}
	})
}

// TestBoundedBalance: on random clusters with at least r zones (or one) and enough
// copies per node that the limits leave room, no node holds more than its limit,
// floor((1+V2Epsilon) × share), while V1 usually puts some node above it.
func TestBoundedBalance(t *testing.T) {
	v1Over := 0
	runs := 0
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.IntRange(1, 3).Draw(t, "r")
		zones := rapid.IntRange(r, 5).Draw(t, "zones")
		if rapid.Bool().Draw(t, "oneZone") {
			zones = 1
		}
		n := rapid.IntRange(max(r, zones), 24).Draw(t, "n")
		weights := []float64{1, 2, 4}
		nodes := make([]Node, n)
		for i := range nodes {
			// Every zone gets a node; the rest are spread at random.
			z := i
			if i >= zones {
				z = rapid.IntRange(0, zones-1).Draw(t, "zone")
			}
			nodes[i] = Node{ID: fmt.Sprintf("node-%02d", i), Zone: fmt.Sprintf("zone-%d", z), Weight: rapid.SampledFrom(weights).Draw(t, "weight")}
		}
		// The lightest node's share is at least 100 copies (a limit 10 above it).
		var sum float64
		for _, nd := range nodes {
			sum += nd.Weight
		}
		p := int(math.Ceil(100 * sum / float64(r)))
		lim := limitsByID(nodes, p, r)
		for id, c := range mustNewV2(t, nodes, p, r).Counts() {
			if c > lim[id] {
				t.Fatalf("%d nodes in %d zones, p=%d, r=%d: %s holds %d copies, its limit is %d", n, zones, p, r, id, c, lim[id])
			}
		}
		runs++
		for id, c := range mustNew(t, nodes, p, r).Counts() {
			if c > lim[id] {
				v1Over++
				break
			}
		}
	})
	t.Logf("v1 puts a node above its v2 limit in %d of %d clusters", v1Over, runs)
}

// capacityCluster is n nodes of capacities 50, 100, 100 or 200 (seeded) in zones zones,
// as tools/placesim draws them.
func capacityCluster(n, zones int, seed uint64) []Node {
	rng := rand.New(rand.NewPCG(seed, 0x9ace))
	caps := []float64{50, 100, 100, 200}
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: fmt.Sprintf("n%05d", i), Zone: fmt.Sprintf("z%02d", i%zones), Weight: caps[rng.IntN(len(caps))]}
	}
	return nodes
}

// TestBoundedMovement: on a cluster of a few hundred mixed nodes with 100 partitions
// per node, a join of a 100-weight node creates at most 1.15 times its share of the
// copies (docs/placement-at-scale.md measures 1.07-1.09 at 1,000 nodes), most of them
// on the new node, and a loss at most 1.1 new copies per copy the lost node held.
func TestBoundedMovement(t *testing.T) {
	n, joins := 240, 2
	if testing.Short() {
		n, joins = 120, 1
	}
	const r = 3
	p := 100 * n
	nodes := capacityCluster(n, 5, 1)
	var sum float64
	for _, nd := range nodes {
		sum += nd.Weight
	}
	base := mustNewV2(t, nodes, p, r)
	for j := range joins {
		added := Node{ID: fmt.Sprintf("new-%d", j), Zone: fmt.Sprintf("z%02d", j%5), Weight: 100}
		moved, per := Moves(base, mustNewV2(t, append(slices.Clone(nodes), added), p, r))
		bound := float64(p*r) * added.Weight / (sum + added.Weight)
		ratio := float64(moved) / bound
		elsewhere := moved - per[added.ID]
		t.Logf("join %d: %d copies created, %.3f times the bound %.0f, %d not on the new node", j, moved, ratio, bound, elsewhere)
		if ratio > 1.15 || float64(elsewhere) > 0.1*bound {
			t.Errorf("join %d: %d copies created (%.3f times the bound %.0f), %d not on the new node", j, moved, ratio, bound, elsewhere)
		}
	}
	lost := 1 // a node of weight 100 in this draw
	if nodes[lost].Weight != 100 {
		t.Fatalf("node %d has weight %v: choose another", lost, nodes[lost].Weight)
	}
	held := base.Counts()[nodes[lost].ID]
	moved, _ := Moves(base, mustNewV2(t, slices.Delete(slices.Clone(nodes), lost, lost+1), p, r))
	t.Logf("loss: %d copies created for %d held (%.3f)", moved, held, float64(moved)/float64(held))
	if float64(moved) > 1.1*float64(held) {
		t.Errorf("loss: %d copies created for %d held", moved, held)
	}
}

// TestWaterFill checks the capped proportional split NewBounded's shares use.
func TestWaterFill(t *testing.T) {
	for _, c := range []struct {
		w            []float64
		total, limit float64
		want         []float64
	}{
		{[]float64{1, 1, 2}, 8, 10, []float64{2, 2, 4}},
		{[]float64{1, 1, 8}, 20, 10, []float64{5, 5, 10}},
		{[]float64{1, 1, 1}, 30, 10, []float64{10, 10, 10}},
		{[]float64{}, 5, 10, []float64{}},
		{[]float64{0, 2}, 5, 10, []float64{0, 5}},
	} {
		got := waterFill(c.w, c.total, c.limit)
		for j := range got {
			if math.Abs(got[j]-c.want[j]) > 1e-9 {
				t.Errorf("waterFill(%v, %v, %v) = %v, want %v", c.w, c.total, c.limit, got, c.want)
				break
			}
		}
	}
}

// BenchmarkNewV2 compares the table time of V1 and V2: 1,000 mixed nodes in 5 zones,
// 20 and 100 partitions per node. cpu-ns/op is the process's CPU per table (getrusage),
// which a loaded machine does not inflate as it does ns/op.
func BenchmarkNewV2(b *testing.B) {
	nodes := capacityCluster(1000, 5, 1)
	for _, perNode := range []int{20, 100} {
		for _, v := range []Version{V1, V2} {
			b.Run(fmt.Sprintf("pn=%d/v%d", perNode, v), func(b *testing.B) {
				cpu := processCPU()
				for range b.N {
					if _, err := NewVersion(v, nodes, perNode*len(nodes), 3); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the CPU time of the process so far, user and system, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
