package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	benchlib "github.com/cairnfs/cairn/internal/bench"
)

// window is how far into a dataset's content an object may start.
const window = 64 << 10

// dataset is one object size class. Every object is a slice of content starting at an
// offset derived from its key, so a GET that returns another object's bytes fails the
// comparison, and no PUT copies or allocates its body.
type dataset struct {
	prefix  string
	size    int64
	content []byte
	written []int // written[w]: objects 0..written[w]-1 of writer w exist
	// hot, if > 0, restricts GETs to that many of the written objects (a working set that
	// fits in the server's page cache, so warm reads are measured).
	hot int
}

func newDataset(prefix string, size int64, writers int) *dataset {
	d := &dataset{prefix: prefix, size: size, content: make([]byte, size+window), written: make([]int, writers)}
	rand.NewChaCha8([32]byte{'s', '3', 'b'}).Read(d.content)
	return d
}

// key appends the key of object idx of writer w to buf[:0].
func (d *dataset) key(buf *[]byte, w, idx int) []byte {
	b := append((*buf)[:0], d.prefix...)
	b = strconv.AppendInt(b, int64(w), 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(idx), 10)
	*buf = b
	return b
}

// body is the content of object idx of writer w.
func (d *dataset) body(w, idx int) []byte {
	x := uint64(w)<<32 | uint64(idx)
	x ^= x >> 33 // a splitmix64-style mix spreads neighbouring keys apart
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	off := x % window
	return d.content[off : off+uint64(d.size)]
}

func (d *dataset) count() int {
	n := 0
	for _, c := range d.written {
		n += c
	}
	return n
}

// pick chooses a written object uniformly; count must be > 0.
func (d *dataset) pick(r *rand.Rand) (w, idx int) {
	total := d.count()
	if d.hot > 0 && d.hot < total {
		total = d.hot
	}
	n := r.IntN(total)
	for w, c := range d.written {
		if n < c {
			return w, n
		}
		n -= c
	}
	panic("unreachable")
}

// phase is one measured workload: clients loop PUTting new objects or GETting random
// written ones until the deadline.
type phase struct {
	name      string
	tgt       *target
	clients   int
	data      *dataset
	put       bool
	anyKey    bool // GET one fixed key, check only the length (the bare server)
	verify    int  // GETs whose body is compared with the content PUT
	serverPID int

	checked  atomic.Int64
	mu       sync.Mutex
	firstErr string
}

// worker is one client's state, allocated before the measurement.
type worker struct {
	id     int
	rng    *rand.Rand
	next   int // index of the next object this worker PUTs
	keyBuf []byte
	urlBuf []byte
	buf    []byte // receives bodies being verified
	ops    int64
	errs   int64
	hist   benchlib.Histogram
}

func (p *phase) newWorkers() []*worker {
	ws := make([]*worker, p.clients)
	for i := range ws {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))),
			keyBuf: make([]byte, 0, 128), urlBuf: make([]byte, 0, 256)}
		if p.put && i < len(p.data.written) {
			w.next = p.data.written[i]
		}
		if !p.put && !p.anyKey && p.verify > 0 {
			w.buf = make([]byte, p.data.size+1)
		}
		ws[i] = w
	}
	return ws
}

// op does one request.
func (p *phase) op(ctx context.Context, w *worker) error {
	if p.put {
		key := p.data.key(&w.keyBuf, w.id, w.next)
		err := p.tgt.put(ctx, p.tgt.objectURL(&w.urlBuf, key), p.data.body(w.id, w.next))
		if err == nil {
			w.next++ // a failed PUT's key is tried again, so every key below next exists
		}
		return err
	}
	wi, idx := 0, 0
	if !p.anyKey {
		wi, idx = p.data.pick(w.rng)
	}
	url := p.tgt.objectURL(&w.urlBuf, p.data.key(&w.keyBuf, wi, idx))
	var want []byte
	if w.buf != nil && p.checked.Load() < int64(p.verify) && p.checked.Add(1) <= int64(p.verify) {
		want = p.data.body(wi, idx)
	}
	return p.tgt.get(ctx, url, p.data.size, want, w.buf)
}

func (p *phase) loop(ctx context.Context, w *worker, deadline time.Time) {
	for ctx.Err() == nil {
		start := time.Now()
		if !start.Before(deadline) {
			return
		}
		if err := p.op(ctx, w); err != nil {
			if ctx.Err() != nil {
				return // interrupted: not the server's failure
			}
			w.errs++
			p.noteError(err)
			continue
		}
		w.hist.Record(time.Since(start))
		w.ops++
	}
}

func (p *phase) noteError(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstErr == "" {
		p.firstErr = err.Error()
	}
}

// run measures the phase for dur.
func (p *phase) run(ctx context.Context, dur time.Duration) phaseResult {
	if !p.put && !p.anyKey && p.data.count() == 0 {
		r := p.emptyResult()
		r.Errors, r.FirstError = 1, "no objects to GET: the PUTs failed"
		return r
	}
	workers := p.newWorkers()
	runtime.GC()
	before := p.sampleCPU(true)
	deadline := before.at.Add(dur)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { p.loop(ctx, w, deadline) })
	}
	wg.Wait()
	after := p.sampleCPU(false)
	if p.put {
		p.recordWritten(workers)
	}
	return p.result(workers, before, after)
}

// cpuSample is the CPU time used until a moment by this process, the server, the machine
// and every process.
type cpuSample struct {
	at                      time.Time
	self, server, busy, irq time.Duration
	procs                   map[int]procTime
}

// sampleCPU takes a sample; the slow scan of all processes is kept out of the measured
// interval: first when starting, last when ending.
func (p *phase) sampleCPU(starting bool) cpuSample {
	var s cpuSample
	if starting {
		s.procs = procTimes()
	} else {
		s.at = time.Now()
	}
	s.self, s.server = selfCPU(), p.serverCPU()
	s.busy, s.irq = machineCPU()
	if starting {
		s.at = time.Now()
	} else {
		s.procs = procTimes()
	}
	return s
}

// delta is b-a, or -1 if either is unknown.
func delta(b, a time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

func (p *phase) serverCPU() time.Duration {
	if !strings.HasPrefix(p.tgt.name, "cairn") || p.serverPID == 0 {
		return -1
	}
	return procCPU(p.serverPID)
}

func (p *phase) recordWritten(workers []*worker) {
	if len(p.data.written) < len(workers) {
		p.data.written = append(p.data.written, make([]int, len(workers)-len(p.data.written))...)
	}
	for _, w := range workers {
		p.data.written[w.id] = w.next
	}
}

// seed PUTs perWorker objects per client, unmeasured, so that a GET phase has data when
// its PUT phase is not run.
func (p *phase) seed(ctx context.Context, perWorker int) error {
	workers := p.newWorkers()
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			for range perWorker {
				if errs[i] = p.op(ctx, w); errs[i] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	p.recordWritten(workers)
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("writing objects for %s: %w", p.name, err)
		}
	}
	return nil
}
