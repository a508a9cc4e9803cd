package store

import (
	"context"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store/segment"
)

// Reader reads one object version as it was when OpenObject returned, even if the object is
// overwritten or deleted meanwhile. Close must be called. Close may be called while a
// WriteRange is still running (a caller that gives up on a copy streaming through a pipe
// closes the reader as it returns): the snapshot is then released when the last running
// WriteRange returns, and a WriteRange started after Close fails.
type Reader struct {
	Object *object.Object
	s      *Store
	snap   *pebble.Snapshot
	ticket uint64
	extSeq uint64 // the extent cache's sequence number before snap was taken

	mu     sync.Mutex
	active int  // running WriteRange calls
	closed bool // Close was called
}

// OpenObject returns a Reader of bucket/key's current version.
func (s *Store) OpenObject(bucket, key string) (*Reader, error) {
	if err := s.drain(bucket, key); err != nil {
		return nil, err
	}
	// A small object's record holds its body: one lookup, no snapshot needed.
	if o, err := getLive(s.db, objectKey(bucket, key)); err == nil && o.Embedded {
		return &Reader{Object: o, s: s}, nil
	}
	return s.open("store.OpenObject", bucket, func(g getter) (*object.Object, error) { return getLive(g, objectKey(bucket, key)) })
}

// open returns a Reader of the record get finds in a snapshot of the index (a NotExist
// error names the missing bucket if that is what is missing).
func (s *Store) open(op errors.Op, bucket string, get func(g getter) (*object.Object, error)) (*Reader, error) {
	ticket := s.readers.begin()
	extSeq := s.extents.begin()
	snap := s.snapshot()
	o, err := get(snap)
	if err != nil {
		snap.Close()
		s.readers.end(ticket)
		if errors.Is(errors.NotExist, err) {
			if _, berr := s.bucket(bucket); berr != nil {
				return nil, errors.E(op, berr)
			}
		}
		return nil, errors.E(op, err)
	}
	return &Reader{Object: o, s: s, snap: snap, ticket: ticket, extSeq: extSeq}, nil
}

// Close releases the reader's snapshot, at once or, if a WriteRange is running, when the
// last one returns.
func (r *Reader) Close() error {
	r.mu.Lock()
	release := !r.closed && r.active == 0
	r.closed = true
	r.mu.Unlock()
	if release {
		r.release()
	}
	return nil
}

func (r *Reader) release() {
	if r.snap != nil {
		r.snap.Close()
		r.s.readers.end(r.ticket)
	}
}

// acquire keeps the snapshot open until the matching done; it fails once Close was called.
func (r *Reader) acquire() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.E(errors.Invalid, "read of a closed object reader")
	}
	r.active++
	return nil
}

func (r *Reader) done() {
	r.mu.Lock()
	r.active--
	release := r.closed && r.active == 0
	r.mu.Unlock()
	if release {
		r.release()
	}
}

// WriteRange writes n bytes of the body starting at off to w. Every chunk is verified
// against its checksum before any of its bytes are written; a corrupt chunk is an error of
// kind Corrupt and nothing of it reaches w. The next chunk is read while the current one is
// written.
func (r *Reader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	const op errors.Op = "store.Reader.WriteRange"
	o := r.Object
	size := o.BodySize()                                // a striped object's bytes are not in this store
	if off < 0 || n < 0 || off > size || n > size-off { // no off+n: it can overflow
		return 0, errors.E(op, errors.Invalid, "range outside the object")
	}
	if n == 0 {
		return 0, nil
	}
	if err := r.acquire(); err != nil {
		return 0, errors.E(op, err)
	}
	defer r.done() // after drain (deferred below): the read-ahead uses the snapshot
	if o.Mutable {
		return r.writeMutable(ctx, w, off, n)
	}
	if o.Embedded {
		if int64(len(o.Body)) != size {
			return 0, errors.E(op, errors.Corrupt, "embedded body has the wrong size")
		}
		m, err := w.Write(o.Body[off : off+n])
		return int64(m), err
	}
	if o.Inline {
		v, c, err := r.snap.Get(inlineKey(o.VersionID))
		if err != nil {
			if err == pebble.ErrNotFound {
				return 0, errors.E(op, errors.Corrupt, "inline body missing from the index")
			}
			return 0, errors.E(op, errors.IO, err)
		}
		defer c.Close()
		if int64(len(v)) != size {
			return 0, errors.E(op, errors.Corrupt, "inline body has the wrong size")
		}
		m, err := w.Write(v[off : off+n])
		return int64(m), err
	}

	// Find the chunks covering [off, off+n).
	type piece struct {
		idx      int
		from, to int64 // within the chunk
	}
	var pieces []piece
	var pos int64
	for i, c := range o.Chunks {
		cs, ce := pos, pos+int64(c.Size)
		pos = ce
		if ce <= off || cs >= off+n {
			continue
		}
		pieces = append(pieces, piece{idx: i, from: max(off, cs) - cs, to: min(off+n, ce) - cs})
	}

	type result struct {
		bp      *[]byte
		payload []byte
		err     error
	}
	read := func(i int) result {
		c := o.Chunks[i]
		loc, err := r.s.chunkLoc(r.snap, segment.ID(c.ID))
		if err != nil {
			if errors.Is(errors.NotExist, err) {
				err = errors.E(errors.Corrupt, err)
			}
			return result{err: err}
		}
		bp := r.s.bufPool.Get().(*[]byte)
		payload, err := r.s.segs.Read(loc, segment.ID(c.ID), *bp)
		if err != nil {
			r.s.bufPool.Put(bp)
			if errors.Is(errors.Corrupt, err) {
				r.s.log.Error("corrupt chunk", "chunk", c.ID.String(), "segment", loc.Seg, "offset", loc.Off, "err", err)
			}
			return result{err: err}
		}
		return result{bp: bp, payload: payload}
	}
	// Read-ahead of one chunk: the next chunk is read and verified while this one is
	// written to w.
	next := make(chan result, 1)
	pending := false
	start := func(i int) {
		pending = true
		go func() { next <- read(pieces[i].idx) }()
	}
	drain := func() {
		if pending {
			if res := <-next; res.bp != nil {
				r.s.bufPool.Put(res.bp)
			}
			pending = false
		}
	}
	defer drain()
	start(0)
	var written int64
	for i, p := range pieces {
		res := <-next
		pending = false
		if res.err != nil {
			return written, errors.E(op, res.err)
		}
		if i+1 < len(pieces) && ctx.Err() == nil {
			start(i + 1)
		}
		m, err := w.Write(res.payload[p.from:p.to])
		r.s.bufPool.Put(res.bp)
		written += int64(m)
		if err != nil {
			return written, err
		}
		if err := ctx.Err(); err != nil {
			return written, err
		}
	}
	return written, nil
}

// readerTracker lets compaction wait until every read that might still use a segment's old
// locations (through an older snapshot) has finished.
type readerTracker struct {
	mu     sync.Mutex
	cond   *sync.Cond
	next   uint64
	active map[uint64]struct{}
}

func (t *readerTracker) init() {
	t.cond = sync.NewCond(&t.mu)
	t.active = map[uint64]struct{}{}
}

func (t *readerTracker) begin() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.active[t.next] = struct{}{}
	return t.next
}

func (t *readerTracker) end(id uint64) {
	t.mu.Lock()
	delete(t.active, id)
	t.mu.Unlock()
	t.cond.Broadcast()
}

// mark returns a ticket: waitBefore(ticket) waits for every reader begun before mark.
func (t *readerTracker) mark() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next + 1
}

func (t *readerTracker) waitBefore(ctx context.Context, ticket uint64) error {
	stop := context.AfterFunc(ctx, func() { t.cond.Broadcast() })
	defer stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		oldest := uint64(0)
		for id := range t.active {
			if id < ticket && (oldest == 0 || id < oldest) {
				oldest = id
			}
		}
		if oldest == 0 {
			return nil
		}
		t.cond.Wait()
	}
}
