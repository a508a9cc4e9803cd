// Package budget is the one budget of a node's background work: the bytes per second that
// recovery, rebalance, shard moves, policy apply and deep scrub (and, as they land, tier
// migration, lifecycle and multi-DC transfer) may move together. Every such loop draws
// from it (Wait) instead of pacing itself, so they share one rate rather than each taking
// a full one.
//
// The rate follows the clients. Every Interval a Controller looks at the latency of the
// node's small client requests in the interval (their 99th percentile) and at how many
// there were: with too few clients to matter the budget takes its ceiling (the operator's
// `recovery set --rate`, or unlimited); when the p99 rises above the target it halves the
// rate (never below Floor); while the p99 stays below, it raises the rate by an eighth
// (at least Increase) back toward the ceiling. The target is fixed (Config.Target) or twice
// the p99 the clients see while no background work runs, learned as the node runs.
//
// The Controller is a pure function of its inputs (Step), so tests drive it with chosen
// latencies instead of timing anything.
package budget

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a Budget. Zero values mean the defaults.
type Config struct {
	// Ceiling is the most bytes per second the background may move (0: unlimited).
	Ceiling int64
	// Interval is how often the rate is adjusted (default 500 ms).
	Interval time.Duration
	// Controller decides the rate (zero value: the defaults of Controller).
	Controller Controller
}

// Controller decides the background rate from what the clients see.
type Controller struct {
	// Target is the client p99 above which background work backs off. 0: twice the p99
	// learned while no background work runs (DefaultTarget until it is learned).
	Target time.Duration
	// MinOps is the number of client requests in an interval below which the clients are
	// taken to be quiet (default 20).
	MinOps int
	// Floor is the least rate the budget falls to under client load, so that
	// re-protection always progresses (default 1 MiB/s).
	Floor int64
	// Increase is the least increase per interval (default 1 MiB/s).
	Increase int64
	// Max is the rate taken as unlimited when the ceiling is (default 4 GiB/s).
	Max int64

	baseline time.Duration // EWMA of the quiet p99
}

// DefaultTarget is the target before a quiet p99 has been learned.
const DefaultTarget = 25 * time.Millisecond

// Input is what the controller sees of one interval.
type Input struct {
	ClientOps  int           // small client requests answered in the interval
	ClientP99  time.Duration // their 99th percentile latency
	Background int64         // bytes background work moved in the interval
	Interval   time.Duration
	Rate       int64 // the rate in force (0: unlimited)
	Ceiling    int64 // the operator's ceiling (0: unlimited)
}

func (c *Controller) defaults() {
	if c.MinOps <= 0 {
		c.MinOps = 20
	}
	if c.Floor <= 0 {
		c.Floor = 1 << 20
	}
	if c.Increase <= 0 {
		c.Increase = 1 << 20
	}
	if c.Max <= 0 {
		c.Max = 4 << 30
	}
}

// target is the p99 above which the background backs off.
func (c *Controller) target() time.Duration {
	switch {
	case c.Target > 0:
		return c.Target
	case c.baseline > 0:
		return 2 * c.baseline
	}
	return DefaultTarget
}

// Step returns the rate for the next interval (0: unlimited).
func (c *Controller) Step(in Input) int64 {
	c.defaults()
	ceiling := in.Ceiling
	if ceiling <= 0 {
		ceiling = c.Max
	}
	if in.ClientOps >= c.MinOps && in.Background == 0 {
		// The clients without background work: learn what they normally see.
		if c.baseline == 0 {
			c.baseline = in.ClientP99
		} else {
			c.baseline = (7*c.baseline + in.ClientP99) / 8
		}
	}
	rate := in.Rate
	if rate <= 0 || rate > ceiling {
		rate = ceiling
	}
	switch {
	case in.ClientOps < c.MinOps:
		rate = ceiling // quiet: the full rate
	case in.ClientP99 > c.target():
		// Back off from what the background really moved, if that is less than the rate
		// (halving an unlimited rate that is not used would take many steps to bite).
		if in.Interval > 0 {
			moved := int64(float64(in.Background) / in.Interval.Seconds())
			if moved > 0 && moved < rate {
				rate = moved
			}
		}
		rate = max(rate/2, c.Floor)
	default:
		rate = min(rate+max(rate/8, c.Increase), ceiling)
	}
	if rate >= c.Max && in.Ceiling <= 0 {
		return 0
	}
	return rate
}

// Budget is a token bucket at a rate the Controller sets. It is safe for concurrent use.
type Budget struct {
	interval time.Duration
	ceiling  atomic.Int64
	rate     atomic.Int64 // 0: unlimited
	moved    atomic.Int64 // background bytes since the last step
	lat      histogram

	mu     sync.Mutex
	ctl    Controller
	tokens float64
	last   time.Time
	now    func() time.Time
}

// New returns a budget at its ceiling.
func New(cfg Config) *Budget {
	b := &Budget{interval: cfg.Interval, ctl: cfg.Controller, now: time.Now}
	if b.interval <= 0 {
		b.interval = 500 * time.Millisecond
	}
	b.ctl.defaults()
	b.SetCeiling(cfg.Ceiling)
	return b
}

// SetCeiling sets the most bytes per second the background may move (0: unlimited): the
// operator's recovery rate. The rate in force drops to it at once if it is above.
func (b *Budget) SetCeiling(bytesPerSec int64) {
	bytesPerSec = max(bytesPerSec, 0)
	b.ceiling.Store(bytesPerSec)
	if r := b.rate.Load(); bytesPerSec > 0 && (r == 0 || r > bytesPerSec) {
		b.rate.Store(bytesPerSec)
	}
}

// Ceiling returns the ceiling (0: unlimited).
func (b *Budget) Ceiling() int64 { return b.ceiling.Load() }

// Rate returns the rate in force (0: unlimited).
func (b *Budget) Rate() int64 { return b.rate.Load() }

// Target returns the client p99 above which the background backs off now.
func (b *Budget) Target() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ctl.target()
}

// ObserveClient records a client request that took d and moved size bytes; requests of
// more than 1 MiB are not counted (their time is their size, not the node's load).
func (b *Budget) ObserveClient(d time.Duration, size int64) {
	if size > 1<<20 {
		return
	}
	b.lat.add(d)
}

// reserve takes n bytes from the bucket and returns how long the caller must wait before
// moving them (0: at once). The bucket holds at most a tenth of a second of the rate.
func (b *Budget) reserve(n int64, now time.Time) time.Duration {
	b.moved.Add(n)
	r := b.rate.Load()
	if r <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() { // a full bucket to start
		b.last, b.tokens = now, float64(r)/10
	}
	b.tokens = math.Min(b.tokens+now.Sub(b.last).Seconds()*float64(r), float64(r)/10)
	b.last = now
	b.tokens -= float64(n)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / float64(r) * float64(time.Second))
}

// Wait blocks until n more bytes of background work may move, or ctx ends.
func (b *Budget) Wait(ctx context.Context, n int64) {
	d := b.reserve(n, b.now())
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// step adjusts the rate from the interval that just ended.
func (b *Budget) step(interval time.Duration) Input {
	ops, p99 := b.lat.take()
	in := Input{ClientOps: ops, ClientP99: p99, Background: b.moved.Swap(0), Interval: interval,
		Rate: b.rate.Load(), Ceiling: b.ceiling.Load()}
	b.mu.Lock()
	r := b.ctl.Step(in)
	b.mu.Unlock()
	b.rate.Store(r)
	return in
}

// Run adjusts the rate every interval until ctx ends.
func (b *Budget) Run(ctx context.Context) {
	t := time.NewTicker(b.interval)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			b.step(now.Sub(last))
			last = now
		}
	}
}

// histogram counts latencies in power-of-two buckets of microseconds: cheap to add to
// from every request, and enough to tell a p99 within a factor of two.
type histogram struct {
	buckets [40]atomic.Int64
}

func (h *histogram) add(d time.Duration) {
	us := uint64(max(d.Microseconds(), 1))
	i := min(bits.Len64(us), len(h.buckets)-1)
	h.buckets[i].Add(1)
}

// take returns the number of latencies recorded since the last take and their 99th
// percentile (the upper bound of its bucket), and starts over.
func (h *histogram) take() (int, time.Duration) {
	var counts [40]int64
	total := int64(0)
	for i := range h.buckets {
		counts[i] = h.buckets[i].Swap(0)
		total += counts[i]
	}
	if total == 0 {
		return 0, 0
	}
	need := total - total/100 // the 99th percentile: all but the slowest 1 %
	seen := int64(0)
	for i, c := range counts {
		seen += c
		if seen >= need {
			return int(total), time.Duration(uint64(1)<<i) * time.Microsecond
		}
	}
	return int(total), time.Duration(uint64(1)<<(len(counts)-1)) * time.Microsecond
}
