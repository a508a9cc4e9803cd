package bench

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// readBufSize is each worker's scratch buffer for response bodies.
const readBufSize = 64 << 10

// phase is one stretch of a run in which concurrency workers repeat a step: preparing
// objects, one measured mix of operations, one repetition of a concurrency level, or
// cleaning up.
type phase struct {
	label       string   // shown in the progress line
	ops         []string // names of the operations step records, by index
	concurrency int
	duration    time.Duration // stop after this long (0: no limit)
	maxOps      int64         // stop after this many operations (0: no limit)
	work        int64         // total operations when known in advance (prepare, delete), for the ETA
	measured    bool          // counts in the results and the timeline
	// step does one operation and records it in w; it returns false when no work is left.
	step func(ctx context.Context, w *worker) bool
}

// opStats is one worker's figures for one operation: totals for the phase, and the
// current one-second window of the timeline, which the ticker takes and resets. The
// worker holds mu only while recording, so the lock is uncontended but for the ticks.
type opStats struct {
	mu     sync.Mutex
	total  opTotal
	window Histogram
	wCount int64
	wBytes int64
	wErrs  int64
}

// opTotal is the figures of one operation over a phase (or, merged, over a run).
type opTotal struct {
	hist     Histogram
	count    int64 // successful operations
	bytes    int64 // body bytes sent or received by successful operations
	errs     int64
	keys     int64 // keys listed (LIST only)
	verified int64 // GET bodies compared with what was written
	errsBy   map[string]int
	firstErr map[string]string // first message for each error code
	elapsed  time.Duration     // measured time the operation ran in
}

// merge adds o to t.
func (t *opTotal) Merge(o *opTotal) {
	t.hist.Merge(&o.hist)
	t.count += o.count
	t.bytes += o.bytes
	t.errs += o.errs
	t.keys += o.keys
	t.verified += o.verified
	for code, n := range o.errsBy {
		if t.errsBy == nil {
			t.errsBy, t.firstErr = map[string]int{}, map[string]string{}
		}
		t.errsBy[code] += n
		if _, ok := t.firstErr[code]; !ok {
			t.firstErr[code] = o.firstErr[code]
		}
	}
}

// worker is one client's state. Only its own goroutine uses it, except for the ticker's
// locked reads of stats.
type worker struct {
	id    int
	rng   *rand.Rand
	stats []opStats
	buf   []byte        // scratch buffer for bodies
	list  *bytes.Buffer // listing pages
	token string        // continuation token of the next listing page
	fresh []freshObject // objects this worker created under new keys
}

// ok records a successful operation that started at start and moved n body bytes.
func (w *worker) ok(op int, start time.Time, n int64) {
	d := time.Since(start)
	s := &w.stats[op]
	s.mu.Lock()
	s.total.hist.Record(d)
	s.total.count++
	s.total.bytes += n
	s.window.Record(d)
	s.wCount++
	s.wBytes += n
	s.mu.Unlock()
}

// note adds keys listed and bodies verified to op's totals.
func (w *worker) note(op int, keys int64, verified bool) {
	s := &w.stats[op]
	s.mu.Lock()
	s.total.keys += keys
	if verified {
		s.total.verified++
	}
	s.mu.Unlock()
}

// fail records a failed operation, unless ctx was cancelled meanwhile: an interrupted
// request is not the server's failure.
func (w *worker) fail(ctx context.Context, op int, err error) {
	if ctx.Err() != nil {
		return
	}
	code := errorCode(err)
	s := &w.stats[op]
	s.mu.Lock()
	t := &s.total
	t.errs++
	s.wErrs++
	if t.errsBy == nil {
		t.errsBy, t.firstErr = map[string]int{}, map[string]string{}
	}
	t.errsBy[code]++
	if _, ok := t.firstErr[code]; !ok {
		t.firstErr[code] = err.Error()
	}
	s.mu.Unlock()
}

// windowStats is one operation's figures over a tick.
type windowStats struct {
	hist                 Histogram
	count, bytes, errors int64
}

// takeWindow moves op's window figures of every worker into ws.
func takeWindow(workers []*worker, op int, ws *windowStats) {
	ws.hist.reset()
	ws.count, ws.bytes, ws.errors = 0, 0, 0
	for _, w := range workers {
		s := &w.stats[op]
		s.mu.Lock()
		ws.hist.Merge(&s.window)
		s.window.reset()
		ws.count += s.wCount
		ws.bytes += s.wBytes
		ws.errors += s.wErrs
		s.wCount, s.wBytes, s.wErrs = 0, 0, 0
		s.mu.Unlock()
	}
}

// phaseResult is what a phase measured.
type phaseResult struct {
	ops         []opTotal // by operation index
	elapsed     time.Duration
	samples     []Sample
	workers     []*worker
	interrupted bool // ctx was cancelled before the phase ended
}

// phaseEnv is what phases share within a run.
type phaseEnv struct {
	seed     uint64
	salt     atomic.Uint64 // makes each phase's random streams differ
	progress *progress
	t0       time.Time // start of the first measured phase (timeline origin)
}

// runPhase runs p to its end and sums up its workers' figures.
func (env *phaseEnv) runPhase(ctx context.Context, p *phase) *phaseResult {
	salt := env.salt.Add(1)
	workers := make([]*worker, p.concurrency)
	for i := range workers {
		workers[i] = &worker{id: i, rng: rand.New(rand.NewPCG(env.seed, salt<<20|uint64(i))),
			stats: make([]opStats, len(p.ops)), buf: make([]byte, readBufSize)}
	}
	start := time.Now()
	if p.measured && env.t0.IsZero() {
		env.t0 = start
	}
	deadline := start.Add(p.duration)
	var issued atomic.Int64
	claim := func() bool {
		return ctx.Err() == nil && (p.duration <= 0 || time.Now().Before(deadline)) &&
			(p.maxOps <= 0 || issued.Add(1) <= p.maxOps)
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			for claim() && p.step(ctx, w) {
			}
		})
	}
	done := make(chan struct{})
	tk := newTicker(env, p, workers, start)
	var tickerDone sync.WaitGroup
	tickerDone.Go(func() { tk.loop(done) })
	wg.Wait()
	elapsed := time.Since(start)
	close(done)
	tickerDone.Wait()
	tk.finish(elapsed)

	res := &phaseResult{ops: make([]opTotal, len(p.ops)), elapsed: elapsed, samples: tk.samples,
		workers: workers, interrupted: ctx.Err() != nil}
	for i := range res.ops {
		for _, w := range workers {
			res.ops[i].Merge(&w.stats[i].total)
		}
		res.ops[i].elapsed = elapsed
	}
	return res
}

// ticker takes each second's window of a running phase for the timeline and the progress
// line.
type ticker struct {
	env     *phaseEnv
	p       *phase
	workers []*worker
	start   time.Time
	last    time.Time // end of the previous window
	ws      []windowStats
	sums    []windowStats // totals so far, for the progress line
	samples []Sample
}

func newTicker(env *phaseEnv, p *phase, workers []*worker, start time.Time) *ticker {
	return &ticker{env: env, p: p, workers: workers, start: start, last: start,
		ws: make([]windowStats, len(p.ops)), sums: make([]windowStats, len(p.ops))}
}

// loop ticks every second, and at the phase's deadline, until done is closed.
func (tk *ticker) loop(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var deadline <-chan time.Time
	if tk.p.duration > 0 {
		dt := time.NewTimer(time.Until(tk.deadline()))
		defer dt.Stop()
		deadline = dt.C
	}
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			tk.tick(now)
		case now := <-deadline:
			tk.tick(now)
		}
	}
}

func (tk *ticker) deadline() time.Time { return tk.start.Add(tk.p.duration) }

// keep says whether the window ending at now goes into the timeline: not if it is shorter
// than a quarter of a second (its rate would be noise), nor if it ends after the deadline
// (then only requests in flight were finishing, which would show as a spurious spike or
// dip). Either way its operations are in the totals.
func (tk *ticker) keep(now time.Time) bool {
	if !tk.p.measured || now.Sub(tk.last) < time.Second/4 {
		return false
	}
	return tk.p.duration <= 0 || !now.After(tk.deadline().Add(10*time.Millisecond))
}

// tick closes the window ending at now.
func (tk *ticker) tick(now time.Time) {
	keep := tk.keep(now)
	secs := now.Sub(tk.last).Seconds()
	tk.last = now
	for i, op := range tk.p.ops {
		ws := &tk.ws[i]
		takeWindow(tk.workers, i, ws)
		tk.sums[i].count += ws.count
		tk.sums[i].bytes += ws.bytes
		tk.sums[i].errors += ws.errors
		if keep {
			tk.samples = append(tk.samples, Sample{
				T: now.Sub(tk.env.t0).Seconds(), Op: op,
				OpsPerSec: float64(ws.count) / secs, MiBPerSec: float64(ws.bytes) / MiB / secs,
				P50: ms(ws.hist.Quantile(0.5)), P99: ms(ws.hist.Quantile(0.99)), Errors: ws.errors,
			})
		}
	}
	tk.env.progress.update(tk.p, tk.ws, tk.sums, secs, now.Sub(tk.start))
}

// finish takes the last window, which the timeline keeps only for a phase that ended by
// running out of work or operations, not by its deadline.
func (tk *ticker) finish(elapsed time.Duration) {
	tk.tick(tk.start.Add(elapsed))
	tk.env.progress.end(tk.p, tk.sums, elapsed)
}
