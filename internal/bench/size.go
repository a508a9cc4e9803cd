package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Binary and decimal size units.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
	TiB = 1 << 40
)

// sizeUnits are the suffixes ParseSize accepts, longest first so that "KiB" wins over
// "B". KiB, MiB, ... and K, M, ... are powers of two; KB, MB, ... are powers of ten (the
// ClawIO file set is stated in them).
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", KiB}, {"MiB", MiB}, {"GiB", GiB}, {"TiB", TiB},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", KiB}, {"M", MiB}, {"G", GiB}, {"T", TiB}, {"B", 1},
}

// ParseSize parses a byte count such as "4096", "4KiB", "16MiB", "1.5MiB" or "500KB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), u.mult
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 || (mult > 1 && n > (1<<62)/mult) {
			return 0, fmt.Errorf("bad size %q", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return int64(f * float64(mult)), nil
}

// FormatSize renders n bytes compactly: "4 KiB", "1.5 MiB", "100 B".
func FormatSize(n int64) string {
	switch {
	case n >= TiB:
		return trimFloat(float64(n)/TiB) + " TiB"
	case n >= GiB:
		return trimFloat(float64(n)/GiB) + " GiB"
	case n >= MiB:
		return trimFloat(float64(n)/MiB) + " MiB"
	case n >= KiB:
		return trimFloat(float64(n)/KiB) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

// trimFloat renders f with at most two decimals and no trailing zeros.
func trimFloat(f float64) string {
	return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64)
}

// SizeRange is one bucket of a size distribution: sizes from Lo (inclusive) to Hi
// (exclusive; Lo == Hi means exactly Lo), drawn uniformly, with relative weight Weight.
type SizeRange struct {
	Lo, Hi int64
	Weight float64
}

// Contains reports whether n falls in the range.
func (r SizeRange) Contains(n int64) bool {
	if r.Lo == r.Hi {
		return n == r.Lo
	}
	return n >= r.Lo && n < r.Hi
}

// Dist is a distribution of object sizes: weighted ranges, uniform within each. It is
// immutable and safe for concurrent use; each caller brings its own random source.
type Dist struct {
	Name   string // "4 KiB", "leofs", "afs", "clawio" or the spec it was parsed from
	Ranges []SizeRange
	cum    []float64 // cumulative weights, normalised to 1
}

// newDist builds a distribution; it panics on an empty table (a programming error).
func newDist(name string, ranges []SizeRange) *Dist {
	d := &Dist{Name: name, Ranges: ranges, cum: make([]float64, len(ranges))}
	var total, acc float64
	for _, r := range ranges {
		total += r.Weight
	}
	for i, r := range ranges {
		acc += r.Weight
		d.cum[i] = acc / total
	}
	d.cum[len(d.cum)-1] = 1
	return d
}

// Fixed is the distribution of one size.
func Fixed(n int64) *Dist {
	return newDist(FormatSize(n), []SizeRange{{n, n, 1}})
}

// Draw returns a size.
func (d *Dist) Draw(r *rand.Rand) int64 {
	n, _ := d.draw(r)
	return n
}

// draw returns a size and the index of the range it was drawn from.
func (d *Dist) draw(r *rand.Rand) (int64, int) {
	u := r.Float64()
	i := 0
	for i < len(d.cum)-1 && u >= d.cum[i] {
		i++
	}
	sr := d.Ranges[i]
	if sr.Hi <= sr.Lo {
		return sr.Lo, i
	}
	return sr.Lo + r.Int64N(sr.Hi-sr.Lo), i
}

// Max is the largest size Draw can return.
func (d *Dist) Max() int64 {
	var m int64
	for _, r := range d.Ranges {
		m = max(m, r.Lo, r.Hi-1)
	}
	return m
}

// ShareAbove is the probability that a draw exceeds limit.
func (d *Dist) ShareAbove(limit int64) float64 {
	var total, above float64
	for _, r := range d.Ranges {
		total += r.Weight
		switch {
		case r.Lo > limit:
			above += r.Weight
		case r.Hi-1 > limit:
			above += r.Weight * float64(r.Hi-1-limit) / float64(r.Hi-r.Lo)
		}
	}
	return above / total
}

// LeoFS is the value-size mix of the LeoFS benchmarks (the 10-100 KiB and 10-800 KiB
// ranges overlap, as in LeoFS's own configuration).
func LeoFS() *Dist {
	return newDist("leofs", []SizeRange{
		{1 * KiB, 10 * KiB, 24},
		{10 * KiB, 100 * KiB, 30},
		{10 * KiB, 800 * KiB, 30},
		{800 * KiB, 1536 * KiB, 16},
	})
}

// AFS is the file-size distribution measured on the AFS/OSD production cells: shares of
// files per power-of-two bucket. The last 0.01 % (2 GiB to 512 GiB) is spread evenly over
// its eight buckets.
func AFS() *Dist {
	shares := []float64{50.31, 8.04, 7.10, 7.99, 6.16, 4.66, 3.11, 3.38, 2.38, 1.59, 1.58, 1.42,
		0.86, 0.46, 0.37, 0.24, 0.13, 0.10, 0.10, 0.01}
	ranges := []SizeRange{{0, 4 * KiB, shares[0]}}
	lo := int64(4 * KiB)
	for _, s := range shares[1:] {
		ranges = append(ranges, SizeRange{lo, 2 * lo, s})
		lo *= 2
	}
	for lo < 512*GiB { // lo is 2 GiB here
		ranges = append(ranges, SizeRange{lo, 2 * lo, 0.01 / 8})
		lo *= 2
	}
	return newDist("afs", ranges)
}

// ClawIO is the 100-file set of ClawIO's upload benchmark (CERN user files; MB and KB are
// powers of ten), each file equally likely.
func ClawIO() *Dist {
	var ranges []SizeRange
	for _, mb := range []int64{50, 15, 10, 8, 5, 4, 3, 2, 1} {
		ranges = append(ranges, SizeRange{mb * 1e6, mb * 1e6, 1})
	}
	for _, f := range []struct{ n, size int64 }{{11, 500e3}, {32, 50e3}, {28, 5e3}, {15, 1e3}, {5, 100}} {
		ranges = append(ranges, SizeRange{f.size, f.size, float64(f.n)})
	}
	return newDist("clawio", ranges)
}

// ParseDist parses a --size value: a size ("4KiB"), a named distribution ("leofs", "afs",
// "clawio") or a spec of weighted ranges, "1KiB-10KiB:24,10KiB-100KiB:30" (a range
// without a weight gets 1; a single size may stand for a range: "4KiB:50,1MiB:50").
func ParseDist(spec string) (*Dist, error) {
	s := strings.TrimSpace(spec)
	switch strings.ToLower(s) {
	case "leofs":
		return LeoFS(), nil
	case "afs":
		return AFS(), nil
	case "clawio":
		return ClawIO(), nil
	case "":
		return nil, fmt.Errorf("empty size")
	}
	if !strings.ContainsAny(s, ",:-") {
		n, err := ParseSize(s)
		if err != nil {
			return nil, err
		}
		return Fixed(n), nil
	}
	var ranges []SizeRange
	for part := range strings.SplitSeq(s, ",") {
		r, err := parseRange(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("bad size distribution %q: %w", spec, err)
		}
		ranges = append(ranges, r)
	}
	return newDist(s, ranges), nil
}

// parseRange parses "LO-HI:WEIGHT", "LO-HI" or "SIZE:WEIGHT".
func parseRange(s string) (SizeRange, error) {
	r := SizeRange{Weight: 1}
	span, weight, hasWeight := strings.Cut(s, ":")
	if hasWeight {
		w, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(weight, "%")), 64)
		if err != nil || w <= 0 {
			return r, fmt.Errorf("bad weight in %q", s)
		}
		r.Weight = w
	}
	lo, hi, isRange := strings.Cut(span, "-")
	var err error
	if r.Lo, err = ParseSize(lo); err != nil {
		return r, err
	}
	r.Hi = r.Lo
	if isRange {
		if r.Hi, err = ParseSize(hi); err != nil {
			return r, err
		}
		if r.Hi < r.Lo {
			return r, fmt.Errorf("range %q ends before it starts", span)
		}
	}
	return r, nil
}

// cappedDist draws from a distribution and redraws every size above a cap, so that the
// sizes below the cap keep their relative shares. It counts the redraws.
type cappedDist struct {
	d   *Dist
	cap int64 // 0: none
}

// draw returns a size <= cap and how many draws were rejected before it.
func (c cappedDist) draw(r *rand.Rand) (size int64, redrawn int) {
	for {
		n := c.d.Draw(r)
		if c.cap <= 0 || n <= c.cap {
			return n, redrawn
		}
		redrawn++
	}
}

// max is the largest size draw can return.
func (c cappedDist) max() int64 {
	if c.cap > 0 {
		return min(c.cap, c.d.Max())
	}
	return c.d.Max()
}
