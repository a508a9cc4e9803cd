package replica

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// RangeWriter is a holder that takes in-place writes of mutable objects (block volumes'
// data objects, docs/design/volumes.md): Local, Remote, and a Faults wrapper of either.
type RangeWriter interface {
	// WriteRange applies w if the holder's record of the object is at order w.Prev (a
	// Precondition error otherwise: the caller reads the holder's order with Stat) and
	// returns the record afterwards.
	WriteRange(ctx context.Context, w object.RangeWrite) (*object.Object, error)
}

// JournalSyncer is a holder with a volume journal (store.SyncJournal): Local, Remote, and
// a Faults wrapper of either.
type JournalSyncer interface {
	// SyncJournal returns once every range write the holder took unsynced
	// (RangeWrite.Unsynced) before the call is durable.
	SyncJournal(ctx context.Context) error
}

var (
	_ JournalSyncer = (*Local)(nil)
	_ JournalSyncer = (*Remote)(nil)
)

// SyncJournal implements JournalSyncer.
func (l *Local) SyncJournal(ctx context.Context) error { return l.Store.SyncJournal() }

// SyncJournal implements JournalSyncer.
func (r *Remote) SyncJournal(ctx context.Context) error {
	_, err := r.call(ctx, &rpc.Request{Method: http.MethodPost, Path: wire.PathJournalSync,
		Cap: &rpc.Cap{Op: rpc.CapWrite}})
	return err
}

// SyncJournal implements JournalSyncer: the faults apply as to every call.
func (x *faulty) SyncJournal(ctx context.Context) error {
	s, err := x.before(ctx)
	if err != nil {
		return err
	}
	js, ok := x.r.(JournalSyncer)
	if !ok {
		return errors.E(errors.Invalid, "the holder has no volume journal")
	}
	_, err = after[*object.Object](s, x.r.ID(), nil, js.SyncJournal(ctx))
	return err
}

// journalSync serves PathJournalSync.
func (h *Handler) journalSync(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		wire.WriteError(w, errors.E(errors.Invalid, "journal syncs are POSTs"))
		return
	}
	if _, _, err := h.capFor(r, rpc.CapWrite); err != nil {
		wire.WriteError(w, err)
		return
	}
	if err := h.local.SyncJournal(r.Context()); err != nil {
		wire.WriteError(w, err)
		return
	}
}

// MaxRangeWrite is the largest in-place write a holder takes in one request.
const MaxRangeWrite = 32 << 20

var (
	_ RangeWriter = (*Local)(nil)
	_ RangeWriter = (*Remote)(nil)
)

// WriteRange implements RangeWriter.
func (l *Local) WriteRange(ctx context.Context, w object.RangeWrite) (*object.Object, error) {
	if err := l.ensure(w.Bucket); err != nil {
		return nil, err
	}
	if l.Fence != nil {
		if err := l.Fence(w); err != nil {
			return nil, err
		}
	}
	return l.Store.WriteRange(ctx, w)
}

// WriteRange implements RangeWriter.
func (r *Remote) WriteRange(ctx context.Context, w object.RangeWrite) (*object.Object, error) {
	q := query(w.Bucket, w.Key, wire.QSize, i64(w.Size), wire.QOffset, i64(w.Off), wire.QPrev, u64(w.Prev), wire.QNext, u64(w.Next))
	req := &rpc.Request{Method: http.MethodPost, Path: wire.PathRange, Query: q, Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: w.Bucket, Key: w.Key}}
	q.Set(wire.QLength, i64(w.Length()))
	if w.Unsynced {
		q.Set(wire.QUnsynced, "1")
	}
	if w.Data == nil {
		q.Set(wire.QZero, "1")
	} else {
		req.Body, req.Size = bytes.NewReader(w.Data), int64(len(w.Data))
	}
	o, err := r.call(ctx, req)
	if err == nil && o == nil {
		err = errors.E(errors.Invalid, "malformed object metadata")
	}
	return o, err
}

// WriteRange implements RangeWriter: the faults apply as to every call; a wrapped holder
// that takes no range writes is an Invalid error.
func (x *faulty) WriteRange(ctx context.Context, w object.RangeWrite) (*object.Object, error) {
	s, err := x.before(ctx)
	if err != nil {
		return nil, err
	}
	rw, ok := x.r.(RangeWriter)
	if !ok {
		return nil, errors.E(errors.Invalid, "the holder takes no range writes")
	}
	if s.cutAfter >= 0 || s.hangAfter >= 0 {
		// Bodies that stop part way: nothing of the write reaches the holder.
		if int64(len(w.Data)) > max(s.cutAfter, s.hangAfter) {
			return nil, errors.E(errors.Transient, "body cut (injected fault)")
		}
	}
	o, err := rw.WriteRange(ctx, w)
	return after(s, x.r.ID(), o, err)
}

// rangeWrite serves PathRange.
func (h *Handler) rangeWrite(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		wire.WriteError(w, errors.E(errors.Invalid, "range writes are POSTs"))
		return
	}
	bucket, key, err := h.capFor(r, rpc.CapWrite)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	rw := object.RangeWrite{Bucket: bucket, Key: key, Size: intParam(r, wire.QSize), Off: intParam(r, wire.QOffset),
		Prev: uintParam(r, wire.QPrev), Next: uintParam(r, wire.QNext), Unsynced: q.Get(wire.QUnsynced) == "1"}
	n := intParam(r, wire.QLength)
	if q.Get(wire.QZero) == "1" {
		rw.Len = n
	} else {
		if n <= 0 || n > MaxRangeWrite {
			wire.WriteError(w, errors.E(errors.Invalid, "a range write needs a length of 1 byte to "+strconv.Itoa(MaxRangeWrite)+" bytes"))
			return
		}
		rw.Data = make([]byte, n)
		if _, err := io.ReadFull(r.Body, rw.Data); err != nil {
			wire.WriteError(w, errors.E(errors.Invalid, "range write body cut short: nothing was written"))
			return
		}
		// Reading to the end checks a streamed body against its signature (rpc).
		if m, err := io.ReadFull(r.Body, make([]byte, 1)); m != 0 || err != io.EOF {
			if err == nil || err == io.ErrUnexpectedEOF {
				err = errors.E(errors.Invalid, "range write body longer than its length: nothing was written")
			}
			wire.WriteError(w, err)
			return
		}
	}
	o, err := h.local.WriteRange(r.Context(), rw)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeMeta(w, o)
}
