package placement

import (
	"math"
	"slices"
)

// Calibrate returns a copy of nodes whose weights are adjusted so that a
// table built from them with r replicas gives each node approximately its
// capped weight share (ExpectedCounts of the original nodes), zones and
// hosts aside.
//
// Plain weighted rendezvous is exactly proportional for r = 1 but not for
// r > 1: picking the top r scores is sampling without replacement, so light
// nodes are over-represented and heavy ones under-represented. With weights
// 1,4,4,4 and r = 3 the weight-1 node is listed by 34.4% of partitions
// instead of 23.1%, 49% over its share. Calibrate solves for effective
// weights whose exact top-r inclusion probabilities equal the capped weight
// shares (to about 1e-7). They are computed from the weights alone (equal
// weights stay equal), so the result is deterministic and independent of
// input order. Zones and hosts are not taken into account: zone spreading
// still overrides weights as described in the package documentation.
//
// The price is movement: calibrated weights depend on the whole membership,
// so adding or removing a node changes every node's effective weight a
// little and moves some partitions between old nodes too, unlike plain
// New. When all eligible weights are equal, or there are at most r eligible
// nodes, Calibrate returns the weights unchanged, and such clusters keep
// the minimal-movement guarantees. Nodes whose capped share is a full copy
// of every partition are given an effective weight large enough that they
// are practically always ranked first, so they are also the primary of
// (almost) every partition.
//
// Calibrate is floating-point heavy (a few milliseconds for a few distinct
// weights; the cost grows with the number of distinct weights, not nodes).
// Its result is reproducible on one platform, but math library differences
// between architectures could in rare cases change a weight's last bit, so
// compute calibrated weights in one place and distribute them with the
// cluster map rather than recomputing them on every node.
//
// Ineligible nodes (Weight <= 0, NaN or infinite) are returned unchanged.
func Calibrate(nodes []Node, r int) []Node {
	out := slices.Clone(nodes)
	if r < 1 {
		return out
	}
	// Group eligible nodes into classes of equal weight: by symmetry they
	// get equal effective weights, which keeps equal nodes exactly equal
	// and makes the computation cost depend on distinct weights only.
	cands, _, _ := eligible(nodes)
	if len(cands) <= r {
		return out
	}
	var weights []float64
	for _, c := range cands {
		weights = append(weights, c.weight)
	}
	slices.Sort(weights)
	weights = slices.Compact(weights)
	if len(weights) == 1 {
		return out
	}
	count := make([]int, len(weights))
	for _, c := range cands {
		j, _ := slices.BinarySearch(weights, c.weight)
		count[j]++
	}

	eff, _ := classWeights(weights, count, r)
	for i, n := range out {
		if eligibleWeight(n.Weight) {
			j, _ := slices.BinarySearch(weights, n.Weight)
			out[i].Weight = eff[j]
		}
	}
	return out
}

// classWeights returns the calibrated effective weight of each weight
// class (weights sorted ascending, count[j] nodes of weight weights[j],
// more nodes than r in total) and the class's target inclusion probability
// (its capped share of r replicas). Effective weights are normalised so the
// largest uncapped one is 1; capped classes get 1e9.
func classWeights(weights []float64, count []int, r int) (eff, target []float64) {
	var total float64
	for j, w := range weights {
		total += float64(count[j]) * w
	}
	// Targets: capped water-filling inclusion probabilities per class.
	// Classes are sorted by weight, so capped classes are a suffix.
	target = make([]float64, len(weights))
	remaining := float64(r)
	sum := total
	capFrom := len(weights)
	for capFrom > 0 && remaining*weights[capFrom-1]/sum >= 1 {
		capFrom--
		remaining -= float64(count[capFrom])
		sum -= float64(count[capFrom]) * weights[capFrom]
	}
	for j := range capFrom {
		target[j] = remaining * weights[j] / sum
	}
	for j := capFrom; j < len(weights); j++ {
		target[j] = 1
	}
	eff = slices.Clone(weights)
	if capFrom > 1 && remaining > 0 {
		// Two or more uncapped classes share the remaining replicas:
		// solve for their effective weights. (With one uncapped class,
		// symmetry already gives every node of it the same share.) Start
		// from Rosén's approximation π ≈ 1 - e^{-w}, i.e. w = -ln(1-π).
		for j := range capFrom {
			eff[j] = -math.Log1p(-target[j])
		}
		solve(eff[:capFrom], count[:capFrom], target[:capFrom], int(remaining))
	}
	var maxEff float64
	for j := range capFrom {
		maxEff = max(maxEff, eff[j])
	}
	for j := range eff {
		if j < capFrom {
			eff[j] = quantize(eff[j] / maxEff)
		} else {
			// Practically always ranked ahead of every uncapped node.
			eff[j] = 1e9
		}
	}
	return eff, target
}

// calibrateIterations is the fixed number of fixed-point iterations run by
// solve. A fixed count (no data-dependent convergence test) keeps results
// bit-identical wherever the same floating-point operations are executed.
const calibrateIterations = 24

// solve adjusts eff (an initial guess) in place so that, for classes of
// count[j] nodes with rate eff[j], the probability that a given node of
// class j is among the first r of an exponential race (the top r rendezvous
// scores) is target[j] < 1. It runs the fixed-point iteration
//
//	eff[j] *= ln(1 - target[j]) / ln(1 - π[j])
//
// which is exact where Rosén's approximation π ≈ 1 - e^{-c·eff} holds and
// in practice reaches float32 resolution in under 20 iterations, including
// targets close to 1.
func solve(eff []float64, count []int, target []float64, r int) {
	pi := make([]float64, len(eff))
	for range calibrateIterations {
		inclusion(eff, count, r, pi)
		var s float64
		for j := range eff {
			// Clamp away from 0 and 1 (where the logarithm degenerates)
			// and limit the step, for robustness far from the solution.
			q := min(max(pi[j], 1e-300), 1-1e-15)
			eff[j] *= min(max(math.Log1p(-target[j])/math.Log1p(-q), 1.0/16), 16)
			s += float64(count[j]) * eff[j]
		}
		for j := range eff {
			eff[j] /= s
		}
	}
}

// inclusion sets pi[j] to the probability that a given node of class j is
// among the first r arrivals when every node of class k arrives at an
// independent Exp(eff[k]) time. This is the top-r inclusion probability of
// weighted rendezvous hashing (the score -w/ln(u) is 1/T for T ~ Exp(w)).
//
// pi[j] = ∫ eff[j] e^{-eff[j] t} P(fewer than r other nodes arrived by t) dt,
// evaluated with the trapezoid rule in y = ln t, where the integrand is a
// smooth bell and the rule converges very fast.
func inclusion(eff []float64, count []int, r int, pi []float64) {
	// Trapezoid step in ln t; the rule's error decays like e^(-π²/h),
	// so 0.25 is far below float64 resolution.
	const h = 0.25
	lo, hi := math.Inf(1), 0.0
	for _, e := range eff {
		lo, hi = min(lo, e), max(hi, e)
	}
	y0 := math.Log(1e-12 / hi)
	y1 := math.Log(50 / lo)
	k := len(eff)
	// pmf[j][m]: P(m nodes of class j arrived by t), m < r; for the node's
	// own class, one node fewer.
	pmf := make([][]float64, k)
	own := make([][]float64, k)
	for j := range k {
		pmf[j] = make([]float64, r)
		own[j] = make([]float64, r)
	}
	prefix := make([][]float64, k+1)
	suffix := make([][]float64, k+1)
	for j := range k + 1 {
		prefix[j] = make([]float64, r)
		suffix[j] = make([]float64, r)
	}
	tmp := make([]float64, r)
	clear(pi)
	for y := y0; y <= y1; y += h {
		t := math.Exp(y)
		for j := range k {
			binomialPMF(pmf[j], count[j], eff[j]*t)
			binomialPMF(own[j], count[j]-1, eff[j]*t)
		}
		// prefix[j] = pmf[0] * ... * pmf[j-1]; suffix[j] = pmf[j] * ... * pmf[k-1].
		clear(prefix[0])
		prefix[0][0] = 1
		for j := range k {
			convolve(prefix[j+1], prefix[j], pmf[j])
		}
		clear(suffix[k])
		suffix[k][0] = 1
		for j := k - 1; j >= 0; j-- {
			convolve(suffix[j], suffix[j+1], pmf[j])
		}
		for j := range k {
			convolve(tmp, prefix[j], suffix[j+1])
			convolve(tmp, tmp, own[j])
			var fewer float64
			for _, v := range tmp {
				fewer += v
			}
			x := eff[j] * t
			pi[j] += h * x * math.Exp(-x) * fewer
		}
	}
}

// binomialPMF sets dst[m] = P(Binomial(n, 1-e^{-x}) = m) for m < len(dst).
func binomialPMF(dst []float64, n int, x float64) {
	q := -math.Expm1(-x) // success probability, accurate for small x
	c, qm := 1.0, 1.0    // C(n, m) and q^m
	for m := range dst {
		if m > n {
			dst[m] = 0
			continue
		}
		// (1-q)^(n-m) = e^{-x(n-m)}, exact even when q rounds to 1.
		dst[m] = c * qm * math.Exp(-x*float64(n-m))
		c = c * float64(n-m) / float64(m+1)
		qm *= q
	}
}

// convolve sets dst = a * b truncated to len(dst) terms. dst may alias a.
func convolve(dst, a, b []float64) {
	for m := len(dst) - 1; m >= 0; m-- {
		var s float64
		for i := 0; i <= m; i++ {
			s += a[i] * b[m-i]
		}
		dst[m] = s
	}
}

// quantize rounds x to 24 significant bits, so that last-bit differences in
// the calibration arithmetic do not change the effective weights.
func quantize(x float64) float64 {
	return float64(float32(x))
}
