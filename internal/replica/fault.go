package replica

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Faults is a set of faults injected into the calls made through the replicas it wraps
// (Wrap), for tests: a slow, failing, hung or partitioned holder without stopping a
// process. The faults can be changed at any time; Heal clears them and releases what
// hangs.
type Faults struct {
	mu          sync.Mutex
	delay       time.Duration // before each call
	err         error         // each call fails with it after the delay; the holder is not asked
	partitioned bool          // each call fails as if the holder could not be reached
	hang        bool          // each call blocks until its context ends or Heal
	hangAfter   int64         // bodies (sent and read) stop after this many bytes until Heal or the context ends; -1: off
	cutAfter    int64         // bodies fail after this many bytes; -1: off
	loseAnswers bool          // calls reach the holder, then fail: it applied what the caller sees fail
	healed      chan struct{}
}

// NewFaults returns Faults that inject nothing yet.
func NewFaults() *Faults {
	return &Faults{hangAfter: -1, cutAfter: -1, healed: make(chan struct{})}
}

// Delay makes each call wait d first.
func (f *Faults) Delay(d time.Duration) { f.set(func() { f.delay = d }) }

// Fail makes each call fail with err (after the delay) without asking the holder.
func (f *Faults) Fail(err error) { f.set(func() { f.err = err }) }

// Partition makes each call fail as if the holder could not be reached.
func (f *Faults) Partition() { f.set(func() { f.partitioned = true }) }

// Hang makes each call block until its context ends or Heal.
func (f *Faults) Hang() { f.set(func() { f.hang = true }) }

// HangBodyAfter makes bodies sent to or read from the holder stop after n bytes, until
// Heal or the call's context ends.
func (f *Faults) HangBodyAfter(n int64) { f.set(func() { f.hangAfter = n }) }

// CutBodyAfter makes bodies sent to or read from the holder fail after n bytes.
func (f *Faults) CutBodyAfter(n int64) { f.set(func() { f.cutAfter = n }) }

// LoseAnswers lets calls reach the holder and then fail, as when the answer is lost.
func (f *Faults) LoseAnswers() { f.set(func() { f.loseAnswers = true }) }

// Heal clears every fault and releases the calls and bodies that hang.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.healed)
	f.delay, f.err, f.partitioned, f.hang, f.loseAnswers = 0, nil, false, false, false
	f.hangAfter, f.cutAfter, f.healed = -1, -1, make(chan struct{})
}

// Unreachable reports whether calls fail without reaching the holder (a partition or an
// injected error): tests use it for calls made the other way (a holder revoking a lease
// of the caller).
func (f *Faults) Unreachable() bool {
	s := f.state()
	return s.partitioned || s.err != nil
}

func (f *Faults) set(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn()
}

type faultState struct {
	delay               time.Duration
	err                 error
	partitioned, hang   bool
	hangAfter, cutAfter int64
	loseAnswers         bool
	healed              chan struct{}
}

func (f *Faults) state() faultState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return faultState{f.delay, f.err, f.partitioned, f.hang, f.hangAfter, f.cutAfter, f.loseAnswers, f.healed}
}

// Wrap returns r with these faults injected.
func (f *Faults) Wrap(r Replica) Replica { return &faulty{r: r, f: f} }

type faulty struct {
	r Replica
	f *Faults
}

func (x *faulty) ID() string { return x.r.ID() }

// before applies the faults that come before a call reaches the holder.
func (x *faulty) before(ctx context.Context) (faultState, error) {
	s := x.f.state()
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return s, errors.E(ctx.Err())
		case <-t.C:
		}
	}
	if s.hang {
		select {
		case <-ctx.Done():
			return s, errors.E(ctx.Err())
		case <-s.healed:
		}
	}
	if s.partitioned {
		return s, errors.E(errors.Transient, fmt.Errorf("node %s: unreachable (injected partition)", x.r.ID()))
	}
	if s.err != nil {
		return s, s.err
	}
	return s, nil
}

// after turns a holder's answer into a lost one if asked to.
func after[T any](s faultState, id string, v T, err error) (T, error) {
	if err == nil && s.loseAnswers {
		var zero T
		return zero, errors.E(errors.Transient, fmt.Errorf("node %s: the answer was lost (injected)", id))
	}
	return v, err
}

// body applies the body faults to r.
func (s faultState) body(ctx context.Context, r io.Reader) io.Reader {
	if r == nil || (s.hangAfter < 0 && s.cutAfter < 0) {
		return r
	}
	return &faultyBody{ctx: ctx, r: r, s: s}
}

type faultyBody struct {
	ctx context.Context
	r   io.Reader
	s   faultState
	n   int64
}

func (b *faultyBody) Read(p []byte) (int, error) {
	limit := int64(-1)
	for _, l := range []int64{b.s.hangAfter, b.s.cutAfter} {
		if l >= 0 && (limit < 0 || l < limit) {
			limit = l
		}
	}
	if limit >= 0 && b.n >= limit {
		if b.s.cutAfter >= 0 && b.n >= b.s.cutAfter {
			return 0, errors.E(errors.IO, "body cut (injected)")
		}
		select {
		case <-b.ctx.Done():
			return 0, errors.E(b.ctx.Err())
		case <-b.s.healed:
			b.s.hangAfter, b.s.cutAfter = -1, -1
		}
	}
	if limit >= 0 && int64(len(p)) > limit-b.n {
		p = p[:limit-b.n]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

func (x *faulty) Put(ctx context.Context, w Write) (*object.Object, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	w.Body = s.body(ctx, w.Body)
	o, err := x.r.Put(ctx, w)
	return after(s, x.r.ID(), o, err)
}

func (x *faulty) Open(ctx context.Context, bucket, key string, o OpenOptions) (Reader, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	rd, err := x.r.Open(ctx, bucket, key, o)
	if err == nil {
		rd = &faultyReader{Reader: rd, s: s}
	}
	return after(s, x.r.ID(), rd, err)
}

type faultyReader struct {
	Reader
	s faultState
}

func (r *faultyReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	if r.s.hangAfter < 0 && r.s.cutAfter < 0 {
		return r.Reader.WriteRange(ctx, w, off, n)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := r.Reader.WriteRange(ctx, pw, off, n)
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	got, err := io.Copy(w, r.s.body(ctx, pr))
	if err == nil && got < n {
		err = errors.E(errors.IO, io.ErrUnexpectedEOF)
	}
	return got, err
}

func (x *faulty) Stat(ctx context.Context, bucket, key string) (*object.Object, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	o, err := x.r.Stat(ctx, bucket, key)
	return after(s, x.r.ID(), o, err)
}

// StatLease passes a lease ask on, with the faults of a Stat, to a replica that grants
// leases; others answer a plain Stat without one.
func (x *faulty) StatLease(ctx context.Context, bucket, key string, ttl time.Duration) (*object.Object, time.Duration, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, 0, err
	}
	var o *object.Object
	var d time.Duration
	if ls, ok := x.r.(LeaseStatter); ok {
		o, d, err = ls.StatLease(ctx, bucket, key, ttl)
	} else {
		o, err = x.r.Stat(ctx, bucket, key)
	}
	o, err = after(s, x.r.ID(), o, err)
	if err != nil {
		d = 0
	}
	return o, d, err
}

func (x *faulty) Delete(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	o, err := x.r.Delete(ctx, bucket, key, d)
	return after(s, x.r.ID(), o, err)
}

func (x *faulty) UpdateMeta(ctx context.Context, u object.MetaUpdate) (*object.Object, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	o, err := x.r.UpdateMeta(ctx, u)
	return after(s, x.r.ID(), o, err)
}

func (x *faulty) List(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	res, err := x.r.List(ctx, bucket, opts)
	return after(s, x.r.ID(), res, err)
}

func (x *faulty) ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	res, err := x.r.ListVersions(ctx, bucket, opts)
	return after(s, x.r.ID(), res, err)
}

func (x *faulty) CreateUpload(ctx context.Context, bucket, key, uploadID string, meta *object.Object) error {
	s, err := x.before(ctx)
	if err != nil {
		return err
	}
	_, err = after(s, x.r.ID(), struct{}{}, x.r.CreateUpload(ctx, bucket, key, uploadID, meta))
	return err
}

func (x *faulty) Parts(ctx context.Context, bucket, key, uploadID string, after_, max int) (*object.PartsPage, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	p, err := x.r.Parts(ctx, bucket, key, uploadID, after_, max)
	return after(s, x.r.ID(), p, err)
}

func (x *faulty) Complete(ctx context.Context, c Completion) (*object.Object, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	o, err := x.r.Complete(ctx, c)
	return after(s, x.r.ID(), o, err)
}

func (x *faulty) EndUpload(ctx context.Context, e *object.UploadEnd) error {
	s, err := x.before(ctx)
	if err != nil {
		return err
	}
	_, err = after(s, x.r.ID(), struct{}{}, x.r.EndUpload(ctx, e))
	return err
}

func (x *faulty) ListUploads(ctx context.Context, bucket string, opts object.UploadListOptions) (*object.UploadList, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	l, err := x.r.ListUploads(ctx, bucket, opts)
	return after(s, x.r.ID(), l, err)
}

func (x *faulty) Digests(ctx context.Context, partitions int, parts []int) ([]uint64, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	d, err := x.r.Digests(ctx, partitions, parts)
	return after(s, x.r.ID(), d, err)
}

func (x *faulty) Scan(ctx context.Context, partitions int, parts []int, fn func(object.VersionEntry)) error {
	s, err := x.before(ctx)
	if err != nil {
		return err
	}
	_, err = after(s, x.r.ID(), struct{}{}, x.r.Scan(ctx, partitions, parts, fn))
	return err
}
