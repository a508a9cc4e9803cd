package bench

import (
	"math"
	"math/bits"
	"time"
)

// The Histogram is log-linear, like HDR histograms: values below 2^(subBits+1) ns have
// their own bucket, above that every power of two is split into 2^subBits buckets, so a
// bucket's width is at most 1/64 of its value (relative error < 1.6%).
const (
	subBits     = 6
	subCount    = 1 << subBits
	linearLimit = 2 * subCount
	numBuckets  = linearLimit + (64-subBits-1)*subCount
)

// Histogram records latencies without allocating. The zero value is ready to use.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64
	min    uint64
	max    uint64
}

func bucketOf(v uint64) int {
	if v < linearLimit {
		return int(v)
	}
	s := bits.Len64(v) - (subBits + 1)
	top := v >> s
	return linearLimit + (s-1)*subCount + int(top-subCount)
}

// bucketHigh is the largest value that falls in bucket i.
func bucketHigh(i int) uint64 {
	if i < linearLimit {
		return uint64(i)
	}
	s := (i-linearLimit)/subCount + 1
	top := uint64((i-linearLimit)%subCount + subCount)
	return (top+1)<<s - 1
}

func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += v
}

func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the latency below which a fraction q of the values fall, to within a
// bucket's width, never above the maximum nor below the minimum recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(bucketHigh(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// reset empties the Histogram.
func (h *Histogram) reset() { *h = Histogram{} }

// latency summarises the Histogram in milliseconds.
func (h *Histogram) latency() Latency {
	if h.n == 0 {
		return Latency{}
	}
	return Latency{
		Min: ms(time.Duration(h.min)), Avg: ms(h.Mean()),
		P50: ms(h.Quantile(0.50)), P90: ms(h.Quantile(0.90)), P99: ms(h.Quantile(0.99)),
		Max: ms(time.Duration(h.max)),
	}
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Max returns the largest latency recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }
