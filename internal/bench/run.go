package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// ErrInterrupted is Run's error when ctx was cancelled before anything was measured.
var ErrInterrupted = errors.New("interrupted")

// preflightTimeout bounds the first requests, which find out whether the endpoint answers.
const preflightTimeout = 20 * time.Second

// Run runs cfg's workload against its endpoint and returns what it measured. Progress goes
// to progress (nil: none). Cancelling ctx ends the measured phase early: Run still
// returns the figures so far (Report.Interrupted is set) and cleans up. Errors are
// reserved for runs that could not measure: a bad Config, an unreachable endpoint,
// refused credentials, a missing bucket where data is expected, a failed prepare phase.
func Run(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	wl, _ := lookupWorkload(cfg.Workload)
	r, err := newRunner(&cfg, wl, progress)
	if err != nil {
		return nil, err
	}
	defer r.c.close()
	start := time.Now()
	if err := r.preflight(ctx); err != nil {
		return nil, err
	}
	r.prog.printf("cairn bench %s: %s, bucket %s, %s", cfg.Workload, cfg.Endpoint, cfg.Bucket, r.describeLoad())
	err = wl.run(r, ctx)
	if errors.Is(err, ErrInterrupted) && len(r.totals) > 0 {
		err = nil
	}
	r.cleanup(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	return r.report(start), nil
}

// runner is the state of one run.
type runner struct {
	cfg    *Config
	wl     *workload
	c      *client
	prog   *progress
	env    phaseEnv
	dist   cappedDist
	params map[string]any

	totals   []namedTotal // measured operations, in order of appearance
	prepare  []namedTotal
	levelAcc []*levelAcc
	timeline []Sample
	measured time.Duration
	cpu      time.Duration // this process's CPU time while measuring

	owned         []*keyspace  // key sets cleanup deletes
	freshKeys     atomic.Int64 // keys prefix+"new%08d" claimed so far
	versions      atomic.Uint32
	draws         atomic.Int64
	redraws       atomic.Int64
	bucketCreated bool
	interrupted   bool
	notes         []string
}

// namedTotal is an operation's figures over a run.
type namedTotal struct {
	op string
	opTotal
}

// levelAcc gathers the repetitions of one concurrency level.
type levelAcc struct {
	conc  int
	rates []float64
	hist  Histogram
}

func newRunner(cfg *Config, wl *workload, progress io.Writer) (*runner, error) {
	conns := max(cfg.Concurrency, slices.Max(append([]int{1}, cfg.Levels...)))
	c, err := newClient(cfg, max(conns, prepareConcurrency(cfg)), newPattern())
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, wl: wl, c: c, prog: newProgress(progress, cfg.Live, cfg.ProgressEvery),
		dist: cappedDist{d: cfg.dist, cap: cfg.MaxSize}}
	r.env.seed, r.env.progress = cfg.Seed, r.prog
	r.params = r.baseParams()
	return r, nil
}

// prepareConcurrency is the number of clients that write the prepared objects.
func prepareConcurrency(cfg *Config) int {
	conc := max(cfg.Concurrency, slices.Max(append([]int{1}, cfg.Levels...)))
	return min(max(conc, 8), 64)
}

// describeLoad is the run's shape in words, for the banner.
func (r *runner) describeLoad() string {
	var parts []string
	if r.wl.levels != nil {
		parts = append(parts, fmt.Sprintf("levels %s x %d reps", joinInts(r.cfg.Levels), r.cfg.Reps))
	} else {
		parts = append(parts, fmt.Sprintf("%d clients", r.cfg.Concurrency))
	}
	switch {
	case r.cfg.Ops > 0:
		parts = append(parts, fmt.Sprintf("%d ops per phase", r.cfg.Ops))
	case r.cfg.Duration > 0:
		parts = append(parts, fmt.Sprintf("%s per phase", r.cfg.Duration))
	}
	parts = append(parts, "size "+r.cfg.dist.Name, fmt.Sprintf("seed %d", r.cfg.Seed))
	return strings.Join(parts, ", ")
}

// baseParams are the workload parameters as run, for the report.
func (r *runner) baseParams() map[string]any {
	cfg := r.cfg
	p := map[string]any{"workload": cfg.Workload, "size": cfg.Size, "seed": cfg.Seed,
		"prefix": cfg.Prefix, "region": cfg.Region, "verify": !cfg.NoVerify}
	if r.wl.levels != nil {
		p["levels"], p["reps"] = cfg.Levels, cfg.Reps
	} else {
		p["concurrency"] = cfg.Concurrency
	}
	if cfg.Ops > 0 {
		p["ops"] = cfg.Ops
	} else if cfg.Duration > 0 {
		p["duration_sec"] = cfg.Duration.Seconds()
	}
	if r.wl.keys > 0 {
		p["keys"] = cfg.Keys
	}
	if cfg.MaxSize > 0 {
		p["max_size"] = cfg.MaxSize
	}
	if cfg.NoPrepare {
		p["no_prepare"] = true
	}
	if cfg.Workload == "list" {
		p["page_size"] = cfg.PageSize
	}
	return p
}

// preflight checks that the endpoint answers, accepts the credentials and has the bucket
// (creating it if the workload writes its own data).
func (r *runner) preflight(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, preflightTimeout)
	defer cancel()
	status, err := r.c.headBucket(pctx)
	if err != nil {
		if ctx.Err() != nil {
			return ErrInterrupted
		}
		return fmt.Errorf("cannot reach %s: %s", r.cfg.Endpoint, transportMessage(err))
	}
	switch status {
	case 200:
		return nil
	case 404:
		if r.cfg.NoPrepare {
			return fmt.Errorf("bucket %q does not exist at %s (--no-prepare reads the objects already in it)", r.cfg.Bucket, r.cfg.Endpoint)
		}
		if err := r.c.createBucket(pctx); err != nil {
			return fmt.Errorf("creating bucket %q: %s", r.cfg.Bucket, oneLine(err))
		}
		r.bucketCreated = true
		return nil
	case 301:
		return fmt.Errorf("bucket %q is in another region than %s: set --region", r.cfg.Bucket, r.cfg.Region)
	}
	err = r.c.bucketError(pctx)
	if se, ok := errors.AsType[*s3Error](err); ok && se.code != "" {
		switch se.code {
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
			return fmt.Errorf("%s rejected the credentials: %s (%s)", r.cfg.Endpoint, se.code, se.message)
		}
		return fmt.Errorf("bucket %q at %s: %s (%s)", r.cfg.Bucket, r.cfg.Endpoint, se.code, se.message)
	}
	return fmt.Errorf("bucket %q at %s: HEAD answered HTTP %d", r.cfg.Bucket, r.cfg.Endpoint, status)
}

// oneLine renders an error for a one-line message.
func oneLine(err error) string {
	if se, ok := errors.AsType[*s3Error](err); ok && se.code != "" {
		return fmt.Sprintf("%s (%s)", se.code, se.message)
	}
	if errorCode(err) == "connection" || errorCode(err) == "timeout" {
		return transportMessage(err)
	}
	return err.Error()
}

// drawSize draws an object size for w, counting redraws above the cap.
func (r *runner) drawSize(w *worker) int64 {
	n, redrawn := r.dist.draw(w.rng)
	r.draws.Add(int64(redrawn) + 1)
	if redrawn > 0 {
		r.redraws.Add(int64(redrawn))
	}
	return n
}

// prepared returns the object set the workload reads: written now, or (NoPrepare) listed.
func (r *runner) prepared(ctx context.Context) (*keyspace, error) {
	if r.cfg.NoPrepare {
		return r.existing(ctx)
	}
	n := r.cfg.Keys
	ks := newKeyspace(r.cfg.Prefix, "obj", n)
	r.owned = append(r.owned, ks)
	sizes := make([]int64, n) // drawn in key order, so that a seed gives the same set
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0))
	for i := range sizes {
		var redrawn int
		sizes[i], redrawn = r.dist.draw(rng)
		r.draws.Add(int64(redrawn) + 1)
		r.redraws.Add(int64(redrawn))
	}
	var next atomic.Int64
	p := &phase{label: "prepare", ops: []string{"PUT"}, concurrency: min(prepareConcurrency(r.cfg), n), work: int64(n),
		step: func(ctx context.Context, w *worker) bool {
			i := next.Add(1) - 1
			if i >= int64(n) {
				return false
			}
			o, ver := &ks.objs[i], r.versions.Add(1)
			start := time.Now()
			if err := r.c.put(ctx, o.key, ver, sizes[i]); err != nil {
				w.fail(ctx, 0, err)
				return true
			}
			o.size.Store(sizes[i])
			o.ver.Store(ver)
			w.ok(0, start, sizes[i])
			return true
		}}
	res := r.env.runPhase(ctx, p)
	r.prepare = addTotals(r.prepare, p, res)
	if res.interrupted {
		return nil, ErrInterrupted
	}
	if t := &res.ops[0]; t.errs > 0 {
		return nil, fmt.Errorf("prepare: %d of %d PUTs failed: %s", t.errs, n, errorSummary(t))
	}
	return ks, nil
}

// existing lists the objects under the prefix, for NoPrepare.
func (r *runner) existing(ctx context.Context) (*keyspace, error) {
	objs, err := r.c.listAll(ctx, r.cfg.Prefix)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ErrInterrupted
		}
		return nil, fmt.Errorf("listing bucket %q: %s", r.cfg.Bucket, oneLine(err))
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("bucket %q has no objects under prefix %q for --no-prepare to read", r.cfg.Bucket, r.cfg.Prefix)
	}
	ks := &keyspace{objs: make([]object, len(objs))}
	for i, o := range objs {
		ks.objs[i].key = o.Key
		ks.objs[i].size.Store(o.Size)
	}
	r.notes = append(r.notes, fmt.Sprintf("--no-prepare: read the %d objects already under prefix %q", len(objs), r.cfg.Prefix))
	return ks, nil
}

// measure runs p as a measured phase (bounded by Duration or Ops) and adds its figures to
// the results. It returns nil, ErrInterrupted if ctx is already cancelled.
func (r *runner) measure(ctx context.Context, p *phase) (*phaseResult, error) {
	if ctx.Err() != nil {
		r.interrupted = true
		return nil, ErrInterrupted
	}
	p.measured, p.duration, p.maxOps = true, r.cfg.Duration, r.cfg.Ops
	cpu0 := selfCPU()
	res := r.env.runPhase(ctx, p)
	r.cpu += selfCPU() - cpu0
	r.totals = addTotals(r.totals, p, res)
	r.measured += res.elapsed
	r.timeline = append(r.timeline, res.samples...)
	if res.interrupted {
		r.interrupted = true
	}
	return res, nil
}

// addTotals merges a phase's figures into list, by operation name.
func addTotals(list []namedTotal, p *phase, res *phaseResult) []namedTotal {
	for i, op := range p.ops {
		j := slices.IndexFunc(list, func(t namedTotal) bool { return t.op == op })
		if j < 0 {
			list = append(list, namedTotal{op: op})
			j = len(list) - 1
		}
		list[j].Merge(&res.ops[i])
		list[j].elapsed += res.ops[i].elapsed
	}
	return list
}

// addLevel records one repetition of a concurrency level.
func (r *runner) addLevel(conc int, res *phaseResult) {
	i := slices.IndexFunc(r.levelAcc, func(l *levelAcc) bool { return l.conc == conc })
	if i < 0 {
		r.levelAcc = append(r.levelAcc, &levelAcc{conc: conc})
		i = len(r.levelAcc) - 1
	}
	l := r.levelAcc[i]
	if secs := res.elapsed.Seconds(); secs > 0 {
		l.rates = append(l.rates, float64(res.ops[0].count)/secs)
	}
	l.hist.Merge(&res.ops[0].hist)
}

// cleanup deletes what the run created, unless Keep.
func (r *runner) cleanup(ctx context.Context) {
	var keys []string
	for _, ks := range r.owned {
		keys = append(keys, ks.keys()...)
	}
	for i := range r.freshKeys.Load() {
		keys = append(keys, indexKey(r.cfg.Prefix+"new", i))
	}
	if r.cfg.Keep {
		if len(keys) > 0 || r.bucketCreated {
			r.notes = append(r.notes, fmt.Sprintf("--keep: left up to %d objects under prefix %q in bucket %q", len(keys), r.cfg.Prefix, r.cfg.Bucket))
		}
		return
	}
	if len(keys) > 0 {
		r.deleteKeys(ctx, keys)
	}
	if r.bucketCreated {
		if err := r.c.deleteBucket(ctx); err != nil {
			msg := fmt.Sprintf("cleanup: could not delete bucket %q: %s", r.cfg.Bucket, oneLine(err))
			r.notes = append(r.notes, msg)
			r.prog.printf("%s", msg)
		}
	}
}

// deleteKeys deletes keys with DeleteObjects batches, falling back to single DELETEs for
// a batch the server refuses.
func (r *runner) deleteKeys(ctx context.Context, keys []string) {
	const batch = 1000
	nb := (len(keys) + batch - 1) / batch
	var next, failed atomic.Int64
	var firstErr atomic.Value
	p := &phase{label: "cleanup", ops: []string{"DELETE"}, concurrency: min(8, nb), work: int64(nb),
		step: func(ctx context.Context, w *worker) bool {
			i := int(next.Add(1) - 1)
			if i >= nb {
				return false
			}
			part := keys[i*batch : min((i+1)*batch, len(keys))]
			start := time.Now()
			n, err := r.c.deleteObjects(ctx, part)
			if err != nil {
				n = 0
				for _, k := range part {
					if err := r.c.del(ctx, k); err != nil {
						n++
						firstErr.CompareAndSwap(nil, oneLine(err))
					}
				}
			}
			failed.Add(int64(n))
			w.ok(0, start, 0)
			return true
		}}
	r.env.runPhase(ctx, p)
	if n := failed.Load(); n > 0 {
		why := "DeleteObjects reported errors"
		if e, ok := firstErr.Load().(string); ok {
			why = e
		}
		msg := fmt.Sprintf("cleanup: %d of %d objects could not be deleted (%s)", n, len(keys), why)
		r.notes = append(r.notes, msg)
		r.prog.printf("%s", msg)
	}
}

// report assembles the Report.
func (r *runner) report(start time.Time) *Report {
	rep := &Report{
		Workload: r.cfg.Workload, Endpoint: r.cfg.Endpoint, Bucket: r.cfg.Bucket,
		Version: r.cfg.Version, Machine: machine(), Start: start.UTC().Round(0),
		Elapsed: r.measured.Seconds(), Timeline: r.timeline, Interrupted: r.interrupted,
	}
	rep.Params = normalizeJSON(r.params)
	for _, t := range r.totals {
		rep.Results = append(rep.Results, t.result(t.op))
	}
	for _, t := range r.prepare {
		rep.Prepare = append(rep.Prepare, t.result(t.op))
	}
	for _, l := range r.levelAcc {
		rep.Levels = append(rep.Levels, l.level())
	}
	if secs := r.measured.Seconds(); secs > 0 {
		rep.BenchCPU = r.cpu.Seconds() / secs
	}
	rep.Notes = append(r.runNotes(rep), r.notes...)
	return rep
}

// runNotes are the notes the figures call for.
func (r *runner) runNotes(rep *Report) []string {
	var notes []string
	if r.interrupted {
		notes = append(notes, fmt.Sprintf("interrupted: the figures cover the %.1f s measured before", rep.Elapsed))
	}
	if r.cfg.MaxSize > 0 && r.cfg.dist.ShareAbove(r.cfg.MaxSize) > 0 {
		notes = append(notes, r.capNote())
	}
	for _, t := range r.totals {
		if t.errs > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d errors: %s", t.op, t.errs, errorSummary(&t.opTotal)))
		}
		if strings.HasPrefix(t.op, "GET") && !r.cfg.NoVerify && t.count > 0 && t.verified == 0 {
			notes = append(notes, t.op+": bodies were checked for length only: the server returned no "+verHeader)
		}
	}
	if cores := float64(rep.Machine.Cores); rep.BenchCPU > 0.5*cores {
		notes = append(notes, fmt.Sprintf("the bench client used %.2f of %d cores while measuring: the figures may be client-bound",
			rep.BenchCPU, rep.Machine.Cores))
	}
	return notes
}

// capNote says how --max-size changed the size distribution.
func (r *runner) capNote() string {
	d, capSize := r.cfg.dist, r.cfg.MaxSize
	draws, redraws := r.draws.Load(), r.redraws.Load()
	share := 0.0
	if draws > 0 {
		share = 100 * float64(redraws) / float64(draws)
	}
	if d.Name == "clawio" {
		return fmt.Sprintf("--max-size %s: the %.0f files of the ClawIO set above it are left out (drawn files above the cap are redrawn: %d of %d draws, %.2f %%)",
			FormatSize(capSize), 100*d.ShareAbove(capSize), redraws, draws, share)
	}
	return fmt.Sprintf("--max-size %s: sizes above it are redrawn, so sizes below keep their relative shares; %d of %d draws (%.2f %%) were redrawn (expected %.2f %% for %s)",
		FormatSize(capSize), redraws, draws, share, 100*d.ShareAbove(capSize), d.Name)
}

// errorSummary is "NoSuchKey 3, timeout 1 (first: ...)".
func errorSummary(t *opTotal) string {
	codes := slices.Collect(maps.Keys(t.errsBy))
	sort.Slice(codes, func(i, j int) bool {
		if t.errsBy[codes[i]] != t.errsBy[codes[j]] {
			return t.errsBy[codes[i]] > t.errsBy[codes[j]]
		}
		return codes[i] < codes[j]
	})
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%s %d", c, t.errsBy[c]))
	}
	s := strings.Join(parts, ", ")
	if len(codes) > 0 {
		s += " (first: " + t.firstErr[codes[0]] + ")"
	}
	return s
}

// result is the OpResult of a total.
func (t *opTotal) result(op string) OpResult {
	res := OpResult{Op: op, Count: t.count, Errors: t.errs, Bytes: t.bytes, Latency: t.hist.latency(),
		Seconds: t.elapsed.Seconds(), Keys: t.keys, Verified: t.verified}
	if len(t.errsBy) > 0 {
		res.ErrorsBy = maps.Clone(t.errsBy)
	}
	if secs := t.elapsed.Seconds(); secs > 0 {
		res.OpsPerSec = float64(t.count) / secs
		res.MiBPerSec = float64(t.bytes) / MiB / secs
		res.KeysPerSec = float64(t.keys) / secs
	}
	return res
}

// level summarises the repetitions of a level: mean, sample standard deviation, range.
func (l *levelAcc) level() Level {
	lv := Level{Concurrency: l.conc, Rates: l.rates, Latency: l.hist.latency()}
	if len(l.rates) == 0 {
		return lv
	}
	lv.Min, lv.Max = slices.Min(l.rates), slices.Max(l.rates)
	var sum float64
	for _, x := range l.rates {
		sum += x
	}
	lv.Mean = sum / float64(len(l.rates))
	if len(l.rates) > 1 {
		var ss float64
		for _, x := range l.rates {
			ss += (x - lv.Mean) * (x - lv.Mean)
		}
		lv.Stddev = math.Sqrt(ss / float64(len(l.rates)-1))
	}
	return lv
}

// normalizeJSON returns m as encoding/json decodes it (numbers as float64, slices as
// []any), so that a Report survives a JSON round trip unchanged.
func normalizeJSON(m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		return m
	}
	var out map[string]any
	if json.Unmarshal(b, &out) != nil {
		return m
	}
	return out
}

// joinInts renders 1,2,4.
func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
