package plot

import (
	"math"
	"strconv"
	"strings"
)

// scale is how an axis maps data values to positions.
type scale int

const (
	linearScale scale = iota // positions proportional to values
	log10Scale               // positions proportional to log10(value); values must be > 0
	log2Scale                // positions proportional to log2(value); used for concurrency levels
)

// axis maps data values to a fraction [0, 1] of the plot area and carries
// the tick marks to draw. lo and hi are in the transformed space (the value
// itself for linear axes, its logarithm otherwise).
type axis struct {
	title  string
	scale  scale
	lo, hi float64
	ticks  []float64
	labels []string
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// transform maps a data value into the axis' transformed space.
func (a *axis) transform(v float64) float64 {
	switch a.scale {
	case log10Scale:
		return math.Log10(v)
	case log2Scale:
		return math.Log2(v)
	}
	return v
}

// valid reports whether v can be placed on the axis at all.
func (a *axis) valid(v float64) bool {
	if !finite(v) {
		return false
	}
	return a.scale == linearScale || v > 0
}

// frac returns the position of v as a fraction of the axis length, clamped to
// a small margin around [0, 1] so that stray values never produce wild
// coordinates. Invalid values map to 0.
func (a *axis) frac(v float64) float64 {
	if !a.valid(v) {
		return 0
	}
	f := (a.transform(v) - a.lo) / (a.hi - a.lo)
	if !finite(f) {
		return 0
	}
	return math.Max(-0.02, math.Min(1.02, f))
}

// isLog reports whether the axis is logarithmic (for labelling).
func (a *axis) isLog() bool { return a.scale == log10Scale }

// base returns the data value at the low end of the axis (where bars start).
func (a *axis) base() float64 {
	switch a.scale {
	case log10Scale:
		return math.Pow(10, a.lo)
	case log2Scale:
		return math.Pow(2, a.lo)
	}
	return a.lo
}

// niceStep rounds x to the nearest of 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if !finite(x) || x <= 0 {
		return 1
	}
	e := math.Floor(math.Log10(x))
	p := math.Pow(10, e)
	f := x / p
	switch {
	case f < 1.5:
		return p
	case f < 3:
		return 2 * p
	case f < 7:
		return 5 * p
	}
	return 10 * p
}

// decimals returns how many fractional digits a tick step needs.
func decimals(step float64) int {
	if !finite(step) || step <= 0 {
		return 0
	}
	d := int(math.Ceil(-math.Log10(step) - 1e-9))
	return max(0, min(d, 12))
}

// siDivisor picks a k/M/G/T suffix for labels of magnitude m.
func siDivisor(m float64) (float64, string) {
	switch {
	case m >= 1e13:
		return 1e12, "T"
	case m >= 1e10:
		return 1e9, "G"
	case m >= 1e7:
		return 1e6, "M"
	case m >= 1e4:
		return 1e3, "k"
	}
	return 1, ""
}

// dataRange returns the smallest and largest finite value of vs (and for
// positiveOnly, the smallest and largest positive one); ok is false when
// there is none.
func dataRange(vs []float64, positiveOnly bool) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if !finite(v) || (positiveOnly && v <= 0) {
			continue
		}
		lo, hi, ok = math.Min(lo, v), math.Max(hi, v), true
	}
	return lo, hi, ok
}

// newLinearAxis builds a linear axis covering vs with ticks at 1-2-5 steps.
// With includeZero the axis always starts (or ends) at zero. headroom
// enlarges the top of the range by that fraction (room for value labels).
func newLinearAxis(title string, vs []float64, includeZero bool, headroom float64) axis {
	a := axis{title: title, scale: linearScale}
	lo, hi, ok := dataRange(vs, false)
	if !ok {
		lo, hi = 0, 1
	}
	if includeZero {
		lo, hi = math.Min(lo, 0), math.Max(hi, 0)
	}
	if h := hi + (hi-lo)*headroom; hi > 0 && headroom > 0 && finite(h) {
		hi = h
	}
	if hi == lo {
		if lo == 0 {
			hi = 1
		} else {
			d := math.Abs(lo) * 0.1
			lo, hi = lo-d, hi+d
			if includeZero {
				lo, hi = math.Min(lo, 0), math.Max(hi, 0)
			}
		}
	}
	if !finite(hi-lo) || !finite(lo) || !finite(hi) {
		lo, hi = -math.MaxFloat64/4, math.MaxFloat64/4
	}
	step := niceStep((hi - lo) / 5)
	a.lo = math.Floor(lo/step) * step
	a.hi = math.Ceil(hi/step) * step
	n := math.Round((a.hi - a.lo) / step)
	if !finite(a.lo) || !finite(a.hi) || a.hi <= a.lo || !finite(n) || n < 1 || n > 40 {
		// Pathological range (precision exhausted): just label both ends.
		a.lo, a.hi = lo, hi
		if !(a.hi > a.lo) {
			a.lo, a.hi = 0, 1
		}
		a.ticks = []float64{a.lo, a.hi}
		a.labels = []string{fmtValue(a.lo), fmtValue(a.hi)}
		return a
	}
	mag := math.Max(math.Abs(a.lo), math.Abs(a.hi))
	div, suffix := siDivisor(mag)
	d := decimals(step / div)
	for i := 0; i <= int(n); i++ {
		v := a.lo + float64(i)*step
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		a.ticks = append(a.ticks, v)
		switch {
		case v == 0:
			a.labels = append(a.labels, "0")
		case mag >= 1e15 || d > 6:
			// Beyond T or below micro: scientific notation keeps labels short.
			a.labels = append(a.labels, strconv.FormatFloat(v, 'g', 3, 64))
		default:
			a.labels = append(a.labels, strconv.FormatFloat(v/div, 'f', d, 64)+suffix)
		}
	}
	return a
}

// newLogAxis builds a base-10 logarithmic axis spanning whole decades around
// the positive values of vs, with ticks at decades (and at 2 and 5 times
// them when the range is short).
func newLogAxis(title string, vs []float64) axis {
	lo, hi, ok := dataRange(vs, true)
	if !ok {
		return newLinearAxis(title, vs, true, 0)
	}
	a := axis{title: title, scale: log10Scale}
	elo := math.Max(-300, math.Floor(math.Log10(lo)))
	ehi := math.Min(300, math.Ceil(math.Log10(hi)))
	if ehi <= elo {
		ehi = elo + 1
	}
	a.lo, a.hi = elo, ehi
	n := ehi - elo
	if n <= 2 {
		for e := elo; e <= ehi; e++ {
			for _, m := range []float64{1, 2, 5} {
				if e == ehi && m > 1 {
					break
				}
				v := m * math.Pow(10, e)
				a.ticks = append(a.ticks, v)
				a.labels = append(a.labels, fmtLogTick(v))
			}
		}
		return a
	}
	k := math.Ceil(n / 7)
	for e := elo; e <= ehi; e += k {
		v := math.Pow(10, e)
		a.ticks = append(a.ticks, v)
		a.labels = append(a.labels, fmtLogTick(v))
	}
	return a
}

// newLog2Axis builds a base-2 logarithmic axis for concurrency levels,
// with ticks at powers of two and half a step of padding at both ends.
func newLog2Axis(title string, vs []float64) axis {
	lo, hi, ok := dataRange(vs, true)
	if !ok {
		lo, hi = 1, 1
	}
	a := axis{title: title, scale: log2Scale}
	llo := math.Max(-60, math.Log2(lo))
	lhi := math.Min(60, math.Log2(hi))
	a.lo, a.hi = llo-0.35, lhi+0.35
	first, last := math.Ceil(llo-1e-9), math.Floor(lhi+1e-9)
	k := math.Max(1, math.Ceil((last-first+1)/12))
	for e := first; e <= last; e += k {
		v := math.Pow(2, e)
		a.ticks = append(a.ticks, v)
		a.labels = append(a.labels, fmtLogTick(v))
	}
	if len(a.ticks) == 0 { // e.g. a single level of 3 clients
		a.ticks = []float64{lo}
		a.labels = []string{fmtValue(lo)}
	}
	return a
}

// newValueAxis builds a y axis for values that may span orders of magnitude
// (latencies): logarithmic when the largest positive value is more than 100
// times the smallest, linear from zero otherwise.
func newValueAxis(title string, vs []float64, headroom float64) axis {
	lo, hi, ok := dataRange(vs, true)
	if ok && hi/lo > 100 {
		return newLogAxis(title, vs)
	}
	return newLinearAxis(title, vs, true, headroom)
}

// fmtLogTick formats a tick of a logarithmic axis (1, 2 or 5 times a power of ten or a power of two).
func fmtLogTick(v float64) string {
	switch {
	case v >= 1e15:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case v >= 1e4:
		div, suffix := siDivisor(v)
		return strconv.FormatFloat(v/div, 'g', 4, 64) + suffix
	case v >= 1e-3:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// fmtValue formats a measured value compactly with about three significant digits.
func fmtValue(v float64) string {
	if !finite(v) {
		return "–"
	}
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1e13:
		return strconv.FormatFloat(v, 'g', 3, 64)
	case a >= 1e4:
		div, suffix := siDivisor(a)
		return strconv.FormatFloat(v/div, 'f', 1, 64) + suffix
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return trimZeros(strconv.FormatFloat(v, 'f', 1, 64))
	case a >= 1:
		return trimZeros(strconv.FormatFloat(v, 'f', 2, 64))
	case a >= 0.001:
		return trimZeros(strconv.FormatFloat(v, 'f', 3, 64))
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

// trimZeros removes trailing fractional zeros (and a bare decimal point).
func trimZeros(s string) string {
	if !strings.Contains(s, ".") {
		return s
	}
	return strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
}
