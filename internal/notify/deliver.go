package notify

import (
	"cmp"
	"context"
	stderrors "errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Outbox is a node's durable outbox as the Deliverer sees it (package store implements
// it). ScanOutbox calls fn with the entries from seq from on in the order they were
// written, oldest first, until fn returns false; entries committed while it runs may be
// missed (the next scan sees them). OutboxFloor is a seq below which no new entry can
// appear. DoneOutbox removes delivered entries (a removal lost in a crash only sends them
// again); DeadOutbox moves entries to the dead letters, which are kept, counted and not
// sent.
type Outbox interface {
	ScanOutbox(from uint64, fn func(seq uint64, entry []byte) bool) error
	OutboxFloor() uint64
	DoneOutbox(seqs []uint64) error
	DeadOutbox(seqs []uint64) error
	OutboxLen() (pending, dead int64)
}

// ErrWait, wrapped by a Target's error, says that it does not take events now and
// that this is not a failure (a paused replication link): its entries wait, tried again
// a second later, without counting retries, attempts or backoff.
var ErrWait = stderrors.New("the target waits")

// Config configures a Deliverer.
type Config struct {
	// Outbox is the node's outbox. Required.
	Outbox Outbox
	// Target returns the target of that name (nil, false: there is none; its entries
	// wait, as for a target that is down). The Deliverer does not close what it returns.
	Target func(name string) (Target, bool)
	// Mine reports whether this node sends the events of bucket/key now (the first live
	// holder of its partition). Nil: every entry is this node's (a single node).
	Mine func(bucket, key string) bool
	// FirstHolds asks the node that sends bucket/key's events (the first live holder)
	// about version hlc of it (its store's OutboxHeld): sent, and this node drops its own
	// copy; held (written, not yet sent), and it asks again a Hold later; neither, or an
	// error, and it sends the entry itself (a duplicate at worst). Asked for entries that
	// are not Mine once they are Hold old.
	FirstHolds func(ctx context.Context, bucket, key string, hlc uint64) (held, sent bool, err error)
	// Hold is how long an entry that is not this node's waits before FirstHolds is asked
	// (default 30s): the first holder normally sends it well within that.
	Hold time.Duration
	// HeldFor is how long this node keeps the marks that answer the other holders'
	// FirstHolds (default 20 * Hold); a holder that asks later sends its copy itself.
	HeldFor time.Duration
	// Region is the awsRegion of the records (default "us-east-1").
	Region string
	// MaxAttempts is the number of failed sends of one entry after which it becomes a
	// dead letter (0: never; retried until the target takes it).
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the wait before a failed target is tried again
	// (defaults 100ms and 30s; doubled after each failure).
	MinBackoff, MaxBackoff time.Duration
	// Batch is the most events sent to one target in one call (default 256).
	Batch int
	// Interval is how often the outbox is scanned when nothing wakes the Deliverer
	// (default 1s).
	Interval time.Duration
	// Linger is how long the Deliverer waits after a wake before it scans, so that the
	// events of a burst of commits go in one batch (default 5ms; negative: none).
	Linger time.Duration
	// Logger, nil means slog.Default().
	Logger *slog.Logger
}

// Status is what a node's Deliverer has done since it started.
type Status struct {
	Pending    int64             `json:"pending"`               // entries in the outbox
	Dead       int64             `json:"dead"`                  // dead letters kept
	Delivered  int64             `json:"delivered"`             // events sent and acknowledged
	Dropped    int64             `json:"dropped"`               // entries dropped: their first holder has them
	Retries    int64             `json:"retries"`               // failed sends (each retried)
	DeadTotal  int64             `json:"dead_total"`            // entries made dead letters since start
	OldestAge  float64           `json:"oldest_age"`            // seconds since the oldest pending entry was written
	LastErrors map[string]string `json:"last_errors,omitempty"` // by target: its last failure, while it fails
	// Targets is the outbox's entries by target (looked at again after a second, or 20
	// times as long as the last look took).
	Targets map[string]Backlog `json:"targets,omitempty"`
}

// Backlog is what waits in a node's outbox for one target.
type Backlog struct {
	Entries   int64   `json:"entries"`
	Bytes     int64   `json:"bytes"`      // the sizes of the changes (their bodies)
	OldestAge float64 `json:"oldest_age"` // seconds since the oldest was written
	// Partial: the outbox was longer than one look reads (maxBacklogScan entries): the
	// figures are lower bounds.
	Partial bool `json:"partial,omitempty"`
}

// maxBacklogScan bounds the entries one look at the backlog decodes.
const maxBacklogScan = 2_000_000

// Deliverer sends a node's outbox. Run it once; Kick wakes it after a commit.
type Deliverer struct {
	cfg  Config
	log  *slog.Logger
	wake chan struct{}

	delivered, dropped, retries, deadTotal atomic.Int64
	oldest                                 atomic.Int64 // Stacked of the oldest entry seen by the last scan (0: none)

	start uint64 // the next scan starts here: no entry below it is pending (only Run uses it)
	// parked are entries that are not this node's, waiting (in memory, the scan moves
	// past them) until due: Hold after they were written, or a Hold after the first
	// holder said it holds them unsent. At most maxParked; beyond, they are scanned
	// again every round. Only Run uses it.
	parked     map[uint64]*parkedEntry
	lastParked time.Time // the last look at the parked entries

	mu      sync.Mutex
	targets map[string]*targetState

	blMu     sync.Mutex
	blAt     time.Time
	blTook   time.Duration // the last look's duration
	backlogs map[string]Backlog
}

type targetState struct {
	failures int       // consecutive
	until    time.Time // not tried before
	attempts map[uint64]int
	lastErr  string
}

// New returns a Deliverer.
func New(cfg Config) *Deliverer {
	if cfg.Hold <= 0 {
		cfg.Hold = 30 * time.Second
	}
	if cfg.HeldFor <= 0 {
		cfg.HeldFor = 20 * cfg.Hold
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 30 * time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Linger == 0 {
		cfg.Linger = 5 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Deliverer{cfg: cfg, log: cfg.Logger.With("component", "notify"), wake: make(chan struct{}, 1), targets: map[string]*targetState{},
		parked: map[uint64]*parkedEntry{}}
}

// Kick wakes the Deliverer: the outbox has new entries. It never blocks.
func (d *Deliverer) Kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Status returns the Deliverer's counters and the outbox's size.
func (d *Deliverer) Status() Status {
	p, dead := d.cfg.Outbox.OutboxLen()
	st := Status{Pending: p, Dead: dead, Delivered: d.delivered.Load(), Dropped: d.dropped.Load(),
		Retries: d.retries.Load(), DeadTotal: d.deadTotal.Load()}
	if o := d.oldest.Load(); o > 0 && p > 0 {
		st.OldestAge = time.Since(time.Unix(0, o)).Seconds()
	}
	d.mu.Lock()
	for name, ts := range d.targets {
		if ts.lastErr != "" {
			if st.LastErrors == nil {
				st.LastErrors = map[string]string{}
			}
			st.LastErrors[name] = ts.lastErr
		}
	}
	d.mu.Unlock()
	st.Targets = d.backlog()
	return st
}

// backlog returns the outbox's entries by target, looked at again when a second old.
func (d *Deliverer) backlog() map[string]Backlog {
	d.blMu.Lock()
	defer d.blMu.Unlock()
	if time.Since(d.blAt) < max(time.Second, 20*d.blTook) && d.backlogs != nil {
		return d.backlogs // a long outbox is looked at less often: at most 5 % of a core
	}
	now := time.Now()
	defer func() { d.blTook = time.Since(now) }()
	by := map[string]Backlog{}
	oldest := map[string]int64{}
	n := 0
	partial := false
	err := d.cfg.Outbox.ScanOutbox(0, func(_ uint64, b []byte) bool {
		if n++; n > maxBacklogScan {
			partial = true
			return false
		}
		e, err := UnmarshalEntry(b)
		if err != nil {
			return true
		}
		bl := by[e.Target]
		bl.Entries++
		bl.Bytes += e.Size
		by[e.Target] = bl
		if o, ok := oldest[e.Target]; !ok || e.Stacked < o {
			oldest[e.Target] = e.Stacked
		}
		return true
	})
	if err != nil {
		d.log.Warn("cannot read the outbox's backlog", "err", err)
	}
	for t, bl := range by {
		bl.OldestAge = now.Sub(time.Unix(0, oldest[t])).Seconds()
		bl.Partial = partial
		by[t] = bl
	}
	d.backlogs, d.blAt = by, now
	return by
}

// HeldPurger is implemented by outboxes that keep the marks FirstHolds asks about (package
// store): the Deliverer removes those older than HeldFor.
type HeldPurger interface {
	PurgeHeld(before time.Time) (int, error)
}

// Run sends the outbox until ctx ends; it returns nil then.
func (d *Deliverer) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	hp, _ := d.cfg.Outbox.(HeldPurger)
	lastPurge := time.Now()
	for {
		if hp != nil && time.Since(lastPurge) > d.cfg.Hold {
			lastPurge = time.Now()
			if _, err := hp.PurgeHeld(lastPurge.Add(-d.cfg.HeldFor)); err != nil {
				d.log.Warn("cannot purge the outbox's held marks", "err", err)
			}
		}
		more := d.round(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !more {
			select {
			case <-ctx.Done():
				return nil
			case <-d.wake:
			case <-t.C:
				continue
			}
		}
		if d.cfg.Linger > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(d.cfg.Linger):
			}
		}
	}
}

type pending struct {
	seq uint64
	e   *Entry
}

type parkedEntry struct {
	e   *Entry
	due time.Time
}

// maxParked bounds the entries a Deliverer keeps in memory while they wait.
const maxParked = 100_000

// round scans the outbox once and sends what it can. It reports whether it sent or
// dropped anything (another round may find more at once).
func (d *Deliverer) round(ctx context.Context) bool {
	now := time.Now()
	byTarget := map[string][]pending{}
	var order []string
	var corrupt, done []uint64
	var oldest int64
	limit := d.cfg.Batch * 16
	n := 0
	// Entries below the floor taken now are all visible to the scan: the next one can
	// start at the lowest of them still pending afterwards, or at the floor.
	floor := d.cfg.Outbox.OutboxFloor()
	low := floor
	keep := func(seq uint64) { low = min(low, seq) }
	var last uint64
	askFailed := false
	add := func(seq uint64, e *Entry) {
		if _, ok := byTarget[e.Target]; !ok {
			order = append(order, e.Target)
		}
		byTarget[e.Target] = append(byTarget[e.Target], pending{seq, e})
		n++
	}
	// notMine decides on an entry that is not this node's and is Hold old: it is
	// dropped (the first holder sent it), parked again (it holds it unsent), or sent.
	notMine := func(seq uint64, e *Entry) {
		if d.cfg.FirstHolds != nil && !askFailed {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			held, sent, err := d.cfg.FirstHolds(cctx, e.Bucket, e.Key, e.HLC)
			cancel()
			// One failed question, and the rest of this round's are not asked (an
			// unreachable holder would cost a timeout per entry): sent from here.
			askFailed = err != nil
			switch {
			case err == nil && sent:
				done = append(done, seq)
				return
			case err == nil && held:
				d.park(seq, e, now.Add(d.cfg.Hold), keep) // it will send it: ask again later
				return
			}
		}
		add(seq, e) // the first holder lacks this version (or cannot say): sent from here
	}
	visited := 0
	err := d.cfg.Outbox.ScanOutbox(d.start, func(seq uint64, b []byte) bool {
		last = seq
		if visited++; visited >= 16*limit {
			return false // a long outbox of entries that wait: the rest next round
		}
		if _, ok := d.parked[seq]; ok {
			return true // below the start again because of an earlier entry: still parked
		}
		e, err := UnmarshalEntry(b)
		if err != nil {
			corrupt = append(corrupt, seq)
			return true
		}
		if oldest == 0 || e.Stacked < oldest {
			oldest = e.Stacked
		}
		if d.cfg.Mine != nil && !d.cfg.Mine(e.Bucket, e.Key) {
			if due := time.Unix(0, e.Stacked).Add(d.cfg.Hold); now.Before(due) {
				d.park(seq, e, due, keep)
				return true
			}
			notMine(seq, e)
			return n < limit
		}
		add(seq, e)
		return n < limit
	})
	// The parked entries that are due, oldest first, a few times a Hold.
	if len(d.parked) > 0 && err == nil && now.Sub(d.lastParked) >= d.cfg.Hold/8 {
		d.lastParked = now
		var due []uint64
		for seq, p := range d.parked {
			if oldest == 0 || p.e.Stacked < oldest {
				oldest = p.e.Stacked
			}
			if !now.Before(p.due) {
				due = append(due, seq)
			}
		}
		slices.Sort(due)
		for _, seq := range due {
			p := d.parked[seq]
			delete(d.parked, seq)
			if d.cfg.Mine(p.e.Bucket, p.e.Key) {
				add(seq, p.e)
			} else {
				notMine(seq, p.e)
			}
		}
		for _, ps := range byTarget {
			slices.SortFunc(ps, func(a, b pending) int { return cmp.Compare(a.seq, b.seq) })
		}
	} else {
		for _, p := range d.parked {
			if oldest == 0 || p.e.Stacked < oldest {
				oldest = p.e.Stacked
			}
		}
	}
	d.oldest.Store(oldest)
	if err != nil {
		d.log.Warn("cannot read the notification outbox", "err", err)
		return false
	}
	if n >= limit || visited >= 16*limit {
		keep(last) // not seen from it on
	}
	if len(corrupt) > 0 {
		d.log.Error("notification outbox entries that do not decode were made dead letters", "entries", len(corrupt))
		d.dead(corrupt)
	}
	lowDone := low
	if len(done) > 0 {
		if err := d.cfg.Outbox.DoneOutbox(done); err != nil {
			d.log.Warn("cannot remove outbox entries", "err", err)
			lowDone = min(lowDone, done[0])
		} else {
			d.dropped.Add(int64(len(done)))
		}
	}
	low = lowDone
	progress := len(done) > 0
	for _, name := range order {
		ps := byTarget[name]
		if ctx.Err() != nil {
			keep(ps[0].seq)
			continue
		}
		sent := d.sendTarget(ctx, name, ps)
		if sent > 0 {
			progress = true
		}
		if sent < len(ps) {
			keep(ps[sent].seq)
		}
	}
	if ctx.Err() == nil {
		d.start = low
	}
	return progress
}

// park keeps an entry that is not this node's in memory until due, or, with too many
// parked, leaves it in the outbox to be scanned again (keep).
func (d *Deliverer) park(seq uint64, e *Entry, due time.Time, keep func(uint64)) {
	if len(d.parked) >= maxParked {
		keep(seq)
		return
	}
	d.parked[seq] = &parkedEntry{e: e, due: due}
}

func (d *Deliverer) state(name string) *targetState {
	d.mu.Lock()
	defer d.mu.Unlock()
	ts := d.targets[name]
	if ts == nil {
		ts = &targetState{attempts: map[uint64]int{}}
		d.targets[name] = ts
	}
	return ts
}

// sendTarget sends a target's entries in order, a batch at a time, stopping at the first
// failure (what follows waits: events of one key stay in order). It returns how many of
// ps (a prefix) were sent and removed.
func (d *Deliverer) sendTarget(ctx context.Context, name string, ps []pending) int {
	ts := d.state(name)
	d.mu.Lock()
	wait := time.Now().Before(ts.until)
	d.mu.Unlock()
	if wait {
		return 0
	}
	t, ok := d.cfg.Target(name)
	if !ok {
		// Not defined (removed, or not yet in this node's map): the events wait like
		// those of a target that is down, and count their attempts.
		d.failed(name, ts, ps, fmt.Errorf("no notification target %q in the cluster map", name))
		return 0
	}
	sent := 0
	for len(ps) > 0 {
		n := min(len(ps), d.cfg.Batch)
		batch := ps[:n]
		seqs := make([]uint64, n)
		for i, p := range batch {
			seqs[i] = p.seq
		}
		var err error
		if et, ok := t.(EntryTarget); ok {
			es := make([]*Entry, n)
			for i, p := range batch {
				es[i] = p.e
			}
			err = et.SendEntries(ctx, es)
		} else {
			msgs := make([][]byte, n)
			for i, p := range batch {
				msgs[i] = p.e.Message(d.cfg.Region)
			}
			err = t.Send(ctx, msgs)
		}
		if err != nil {
			if ctx.Err() != nil {
				return sent
			}
			if stderrors.Is(err, ErrWait) {
				// Not a failure (a paused link): looked at again in a second.
				d.mu.Lock()
				ts.until, ts.lastErr = time.Now().Add(time.Second), err.Error()
				d.mu.Unlock()
				return sent
			}
			d.failed(name, ts, batch, err)
			return sent
		}
		if err := d.cfg.Outbox.DoneOutbox(seqs); err != nil {
			// Sent but not removed: they go again (a duplicate, never a loss).
			d.log.Warn("cannot remove delivered outbox entries", "err", err)
			return sent
		}
		d.delivered.Add(int64(n))
		d.mu.Lock()
		if ts.failures > 0 {
			d.log.Info("notification target reachable again", "target", name)
		}
		ts.failures, ts.lastErr = 0, ""
		for _, s := range seqs {
			delete(ts.attempts, s)
		}
		d.mu.Unlock()
		sent += n
		ps = ps[n:]
	}
	return sent
}

func (d *Deliverer) failed(name string, ts *targetState, batch []pending, err error) {
	d.retries.Add(1)
	d.mu.Lock()
	ts.failures++
	ts.lastErr = err.Error()
	back := d.cfg.MinBackoff << min(ts.failures-1, 20)
	if back > d.cfg.MaxBackoff || back <= 0 {
		back = d.cfg.MaxBackoff
	}
	ts.until = time.Now().Add(back)
	// The head entry is the one that failed (a batch fails as a whole: count it on the
	// first, which is tried again first).
	head := batch[0].seq
	ts.attempts[head]++
	dead := d.cfg.MaxAttempts > 0 && ts.attempts[head] >= d.cfg.MaxAttempts
	if dead {
		delete(ts.attempts, head)
	}
	failures := ts.failures
	d.mu.Unlock()
	if failures == 1 || failures%20 == 0 {
		d.log.Warn("notification target failing; events kept and retried", "target", name, "failures", failures, "err", err)
	}
	if dead {
		d.log.Error("notification event made a dead letter after its attempts", "target", name, "event", batch[0].e.ID(), "attempts", d.cfg.MaxAttempts)
		d.dead([]uint64{head})
	}
}

func (d *Deliverer) dead(seqs []uint64) {
	if err := d.cfg.Outbox.DeadOutbox(seqs); err != nil {
		d.log.Warn("cannot move outbox entries to the dead letters", "err", err)
		return
	}
	d.deadTotal.Add(int64(len(seqs)))
}
