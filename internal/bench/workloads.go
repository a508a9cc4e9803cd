package bench

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// workload is one thing `cairn bench` can run, with its defaults.
type workload struct {
	name        string
	about       string
	concurrency int
	keys        int
	size        string
	maxSize     int64
	levels      []int // concurrency levels (nil: one measured phase at Concurrency)
	reps        int
	duration    time.Duration // default measured time (0: until the work is done)
	readsData   bool          // reads a prepared object set, which NoPrepare takes from the bucket
	// run is a method expression of runner (so the receiver comes first).
	run func(r *runner, ctx context.Context) error
}

// clawioLevels are ClawIO's concurrency levels.
func clawioLevels() []int { return []int{1, 2, 4, 8, 16, 32, 64} }

// workloads is the table of workloads.
func workloads() []workload {
	const d = 30 * time.Second
	return []workload{
		{name: "leofs-r9w1", about: "LeoFS mix: 90 % GETs, 10 % overwrites of random keys, LeoFS value sizes",
			concurrency: 64, keys: 100000, size: "leofs", duration: d, readsData: true,
			run: func(r *runner, ctx context.Context) error { return r.runMixed(ctx, 0.9) }},
		{name: "leofs-r8w2", about: "LeoFS mix: 80 % GETs, 20 % overwrites of random keys, LeoFS value sizes",
			concurrency: 64, keys: 100000, size: "leofs", duration: d, readsData: true,
			run: func(r *runner, ctx context.Context) error { return r.runMixed(ctx, 0.8) }},
		{name: "spreadshirt-4k", about: "random GETs of 4 KiB objects at 4 and 16 clients (results GET@4, GET@16)",
			keys: 1000, size: "4KiB", levels: []int{4, 16}, reps: 1, duration: d, readsData: true,
			run: func(r *runner, ctx context.Context) error { return r.runReadLevels(ctx, "GET") }},
		{name: "clawio-stat", about: "HEAD rate at rising concurrency (results HEAD@1 ... HEAD@64, and levels)",
			keys: 1000, size: "1KiB", levels: clawioLevels(), reps: 5, duration: 2 * time.Second, readsData: true,
			run: func(r *runner, ctx context.Context) error { return r.runReadLevels(ctx, "HEAD") }},
		{name: "clawio-upload", about: "uploads of ClawIO's 100-file set to random keys at rising concurrency (PUT@1 ...)",
			keys: 1000, size: "clawio", levels: clawioLevels(), reps: 5, duration: 2 * time.Second,
			run: (*runner).runUploadLevels},
		{name: "afs-sizes", about: "PUT, then GET, objects drawn from the AFS/OSD size distribution",
			concurrency: 16, size: "afs", maxSize: 64 * MiB, duration: d,
			run: (*runner).runPutThenGet},
		{name: "put", about: "PUT objects under new keys", concurrency: 16, size: "4KiB", duration: d,
			run: (*runner).runPut},
		{name: "get", about: "GET random objects of a prepared set", concurrency: 16, keys: 1000, size: "4KiB",
			duration: d, readsData: true, run: func(r *runner, ctx context.Context) error { return r.runRead(ctx, "GET") }},
		{name: "head", about: "HEAD random objects of a prepared set", concurrency: 16, keys: 1000, size: "4KiB",
			duration: d, readsData: true, run: func(r *runner, ctx context.Context) error { return r.runRead(ctx, "HEAD") }},
		{name: "mixed", about: "GETs (--read-ratio) and overwrites of random objects of a prepared set",
			concurrency: 16, keys: 1000, size: "4KiB", duration: d, readsData: true,
			run: func(r *runner, ctx context.Context) error { return r.runMixed(ctx, r.cfg.ReadRatio) }},
		{name: "list", about: "ListObjectsV2 pages over a prepared set (keys/s too)", concurrency: 4, keys: 10000,
			size: "1KiB", duration: d, readsData: true, run: func(r *runner, ctx context.Context) error { return r.runRead(ctx, "LIST") }},
		{name: "delete", about: "DELETE each object of a prepared set once (until all are gone)", concurrency: 16, keys: 1000,
			size: "4KiB", readsData: true, run: (*runner).runDelete},
	}
}

// lookupWorkload finds a workload by name.
func lookupWorkload(name string) (*workload, bool) {
	for _, wl := range workloads() {
		if wl.name == name {
			return &wl, true
		}
	}
	return nil, false
}

// WorkloadNames lists the workloads.
func WorkloadNames() []string {
	var out []string
	for _, wl := range workloads() {
		out = append(out, wl.name)
	}
	return out
}

// WorkloadHelp describes each workload and its defaults, one line each.
func WorkloadHelp() string {
	var b bytes.Buffer
	for _, wl := range workloads() {
		fmt.Fprintf(&b, "  %-15s %s\n  %-15s   defaults: --size %s", wl.name, wl.about, "", wl.size)
		if wl.keys > 0 {
			fmt.Fprintf(&b, " --keys %d", wl.keys)
		}
		if wl.levels != nil {
			fmt.Fprintf(&b, " --levels %s --reps %d", joinInts(wl.levels), wl.reps)
		} else {
			fmt.Fprintf(&b, " --concurrency %d", wl.concurrency)
		}
		if wl.duration > 0 {
			fmt.Fprintf(&b, " --duration %s", wl.duration)
		}
		if wl.maxSize > 0 {
			fmt.Fprintf(&b, " --max-size %s", strings.ReplaceAll(FormatSize(wl.maxSize), " ", ""))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// runRead measures GET, HEAD or LIST on a prepared set at Concurrency.
func (r *runner) runRead(ctx context.Context, op string) error {
	ks, err := r.prepared(ctx)
	if err != nil {
		return err
	}
	_, err = r.measure(ctx, r.readPhase(op, ks, r.cfg.Concurrency))
	return err
}

// runReadLevels measures GET or HEAD on a prepared set at each level, Reps times.
func (r *runner) runReadLevels(ctx context.Context, op string) error {
	ks, err := r.prepared(ctx)
	if err != nil {
		return err
	}
	return r.levels(ctx, op, func(conc int) *phase { return r.readPhase(op, ks, conc) })
}

// runUploadLevels measures PUTs to random keys of a set of Keys target keys, at each level.
func (r *runner) runUploadLevels(ctx context.Context) error {
	ks := newKeyspace(r.cfg.Prefix, "up", r.cfg.Keys)
	r.owned = append(r.owned, ks)
	return r.levels(ctx, "PUT", func(conc int) *phase {
		return &phase{ops: []string{"PUT"}, concurrency: conc, step: func(ctx context.Context, w *worker) bool {
			r.overwrite(ctx, w, 0, ks.pick(w.rng))
			return true
		}}
	})
}

// levels runs the phases mk makes for each level and repetition; their operation is
// named "OP@level", e.g. "HEAD@16".
func (r *runner) levels(ctx context.Context, op string, mk func(conc int) *phase) error {
	for _, conc := range r.cfg.Levels {
		for rep := 1; rep <= r.cfg.Reps; rep++ {
			name := fmt.Sprintf("%s@%d", op, conc)
			p := mk(conc)
			p.ops, p.label = []string{name}, fmt.Sprintf("%s %d/%d", name, rep, r.cfg.Reps)
			res, err := r.measure(ctx, p)
			if err != nil || res == nil {
				return err
			}
			r.addLevel(conc, res)
			if res.interrupted {
				return nil
			}
		}
	}
	return nil
}

// readPhase is a measured phase of GET, HEAD or LIST on ks.
func (r *runner) readPhase(op string, ks *keyspace, conc int) *phase {
	p := &phase{label: op, ops: []string{op}, concurrency: conc}
	switch op {
	case "GET":
		p.step = func(ctx context.Context, w *worker) bool { r.get(ctx, w, 0, ks.pick(w.rng), true); return true }
	case "HEAD":
		p.step = func(ctx context.Context, w *worker) bool { r.head(ctx, w, 0, ks.pick(w.rng)); return true }
	case "LIST":
		p.step = func(ctx context.Context, w *worker) bool { r.list(ctx, w, 0); return true }
	}
	return p
}

// runMixed measures GETs (a share ratio) and overwrites of random objects of a prepared set.
func (r *runner) runMixed(ctx context.Context, ratio float64) error {
	ks, err := r.prepared(ctx)
	if err != nil {
		return err
	}
	r.params["read_ratio"] = ratio
	p := &phase{label: r.cfg.Workload, ops: []string{"GET", "PUT"}, concurrency: r.cfg.Concurrency,
		step: func(ctx context.Context, w *worker) bool {
			if w.rng.Float64() < ratio {
				r.get(ctx, w, 0, ks.pick(w.rng), false)
			} else {
				r.overwrite(ctx, w, 1, ks.pick(w.rng))
			}
			return true
		}}
	_, err = r.measure(ctx, p)
	return err
}

// runPut measures PUTs under new keys.
func (r *runner) runPut(ctx context.Context) error {
	_, err := r.measure(ctx, r.freshPutPhase())
	return err
}

// runPutThenGet measures PUTs under new keys, then GETs of the objects written.
func (r *runner) runPutThenGet(ctx context.Context) error {
	res, err := r.measure(ctx, r.freshPutPhase())
	if err != nil || res == nil || res.interrupted {
		return err
	}
	var fresh []freshObject
	for _, w := range res.workers {
		fresh = append(fresh, w.fresh...)
	}
	ks := keyspaceOf(fresh)
	if len(ks.objs) == 0 {
		return fmt.Errorf("no PUT succeeded, so there is nothing to GET")
	}
	_, err = r.measure(ctx, r.readPhase("GET", ks, r.cfg.Concurrency))
	return err
}

// freshPutPhase PUTs objects under new keys prefix+"new00000000", ...
func (r *runner) freshPutPhase() *phase {
	return &phase{label: "PUT", ops: []string{"PUT"}, concurrency: r.cfg.Concurrency,
		step: func(ctx context.Context, w *worker) bool {
			key := indexKey(r.cfg.Prefix+"new", r.freshKeys.Add(1)-1)
			size := r.drawSize(w)
			ver := r.versions.Add(1)
			start := time.Now()
			err := r.c.put(ctx, key, ver, size)
			w.fresh = append(w.fresh, freshObject{key: key, size: size, ver: ver, ok: err == nil})
			if err != nil {
				w.fail(ctx, 0, err)
			} else {
				w.ok(0, start, size)
			}
			return true
		}}
}

// runDelete measures deleting each object of a prepared set once.
func (r *runner) runDelete(ctx context.Context) error {
	ks, err := r.prepared(ctx)
	if err != nil {
		return err
	}
	var next atomic.Int64
	p := &phase{label: "DELETE", ops: []string{"DELETE"}, concurrency: r.cfg.Concurrency, work: int64(len(ks.objs)),
		step: func(ctx context.Context, w *worker) bool {
			i := next.Add(1) - 1
			if i >= int64(len(ks.objs)) {
				return false
			}
			o := &ks.objs[i]
			start := time.Now()
			if err := r.c.del(ctx, o.key); err != nil {
				w.fail(ctx, 0, err)
			} else {
				o.ver.Store(0)
				w.ok(0, start, 0)
			}
			return true
		}}
	_, err = r.measure(ctx, p)
	return err
}

// get GETs o and records it as op. With stable set, no one writes o meanwhile, so its
// size must be the one last written or listed.
func (r *runner) get(ctx context.Context, w *worker, op int, o *object, stable bool) {
	want := int64(-1)
	if stable {
		want = o.size.Load()
	}
	start := time.Now()
	res, err := r.c.get(ctx, o.key, want, !r.cfg.NoVerify, w.buf)
	if err != nil {
		w.fail(ctx, op, err)
		return
	}
	w.ok(op, start, res.n)
	if res.verified {
		w.note(op, 0, true)
	}
}

// head HEADs o (whose size no one changes meanwhile) and records it as op.
func (r *runner) head(ctx context.Context, w *worker, op int, o *object) {
	start := time.Now()
	n, err := r.c.head(ctx, o.key)
	if err == nil && n != o.size.Load() && o.size.Load() >= 0 {
		err = &checkError{"SizeMismatch", fmt.Sprintf("HEAD %s: Content-Length %d, want %d", o.key, n, o.size.Load())}
	}
	if err != nil {
		w.fail(ctx, op, err)
		return
	}
	w.ok(op, start, 0)
}

// list reads the worker's next listing page and records it as op; after the last page
// the worker starts again from the first.
func (r *runner) list(ctx context.Context, w *worker, op int) {
	if w.list == nil {
		w.list = new(bytes.Buffer)
	}
	start := time.Now()
	keys, next, err := r.c.listPage(ctx, r.cfg.Prefix, w.token, r.cfg.PageSize, w.list)
	if err != nil {
		w.token = ""
		w.fail(ctx, op, err)
		return
	}
	w.token = next
	w.ok(op, start, int64(w.list.Len()))
	w.note(op, int64(keys), false)
}

// overwrite PUTs a new version of o, of a newly drawn size, and records it as op.
func (r *runner) overwrite(ctx context.Context, w *worker, op int, o *object) {
	size := r.drawSize(w)
	ver := r.versions.Add(1)
	start := time.Now()
	if err := r.c.put(ctx, o.key, ver, size); err != nil {
		w.fail(ctx, op, err)
		return
	}
	w.ok(op, start, size)
	o.size.Store(size)
	o.ver.Store(ver)
}
