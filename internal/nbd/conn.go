package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/cairnfs/cairn/internal/errors"
)

// transmission is the transmission phase of one connection: the connection's goroutine
// reads requests (and write payloads) in order and hands each to one of
// Server.MaxInflight workers, with at most Server.MaxInflightBytes of buffers; replies go
// out as requests finish, each written whole under wmu (those that finish together in one
// flush: see send). The protocol lets replies come in
// any order; clients do not send overlapping writes without waiting for the first.
type transmission struct {
	s          *Server
	c          net.Conn
	r          *bufio.Reader
	w          *bufio.Writer
	dev        Device
	info       ExportInfo
	structured bool
	log        *slog.Logger

	wmu     sync.Mutex
	waiting atomic.Int32 // replies ready to be written, not yet under wmu
	wg      sync.WaitGroup
	budget  *semaphore.Weighted
	budgetN int64
	broken  atomic.Bool // a reply could not be written: the connection is done
}

func (t *transmission) run(ctx context.Context) {
	slots := t.s.MaxInflight
	if slots <= 0 {
		slots = 64
	}
	t.budgetN = t.s.MaxInflightBytes
	if t.budgetN <= 0 {
		t.budgetN = 64 << 20
	}
	_, _, maxB := blockSizes(t.info)
	t.budgetN = max(t.budgetN, int64(maxB)) // one request of the largest size always fits
	t.budget = semaphore.NewWeighted(t.budgetN)
	// A fixed set of workers, not a goroutine per request: a worker's stack grows once to
	// what the device needs and stays grown (a new goroutine per request paid for that
	// growth every time: 12 % of the CPU of 4 KiB random reads).
	jobs := make(chan job)
	defer close(jobs)
	for range slots {
		go func() {
			for j := range jobs {
				t.handle(j.req, j.buf)
				if j.buf != nil {
					putBuf(j.buf)
				}
				t.budget.Release(j.size)
				t.wg.Done()
			}
		}()
	}
	payloadTimeout := t.s.PayloadTimeout
	if payloadTimeout <= 0 {
		payloadTimeout = time.Minute
	}
	defer t.wg.Wait()
	for !t.broken.Load() {
		var hb [requestSize]byte
		if _, err := io.ReadFull(t.r, hb[:]); err != nil {
			if err != io.EOF && !errors.Is(errors.Transient, err) && ctx.Err() == nil && !t.broken.Load() {
				t.log.Info("nbd: connection ended without NBD_CMD_DISC", "err", err)
			}
			return
		}
		req, ok := parseRequest(&hb)
		if !ok {
			t.log.Warn("nbd: request with a bad magic number: disconnecting")
			return
		}
		if req.typ == cmdDisc {
			t.wg.Wait()
			if err := t.dev.Flush(); err != nil {
				t.log.Warn("nbd: flush at disconnect failed", "err", err)
			}
			return
		}
		size := int64(0)
		switch req.typ {
		case cmdRead, cmdWrite:
			if req.length > maxB {
				// A write's payload is not read: the stream cannot go on after the answer.
				t.replyError(req, errOverflow, "request of "+itoa(int64(req.length))+" bytes is over the export's maximum block size of "+itoa(int64(maxB)))
				if req.typ == cmdWrite {
					t.log.Warn("nbd: write larger than the maximum block size: disconnecting", "bytes", req.length)
					t.wg.Wait()
					return
				}
				continue
			}
			size = int64(req.length)
		}
		if err := t.budget.Acquire(ctx, size); err != nil {
			return
		}
		var buf []byte
		if size > 0 {
			buf = getBuf(int(size))
		}
		if req.typ == cmdWrite {
			t.c.SetReadDeadline(time.Now().Add(payloadTimeout))
			_, err := io.ReadFull(t.r, buf)
			t.c.SetReadDeadline(time.Time{})
			if err != nil {
				// Nothing of this write reached the device.
				t.log.Info("nbd: connection ended in the middle of a write's payload: the write was not done", "offset", req.offset, "bytes", req.length, "err", err)
				putBuf(buf)
				t.budget.Release(size)
				return
			}
		}
		t.wg.Add(1)
		jobs <- job{req, buf, size} // waits for a free worker
	}
}

// job is a request handed to a worker, with its payload buffer and the budget it holds.
type job struct {
	req  request
	buf  []byte
	size int64
}

// commandFlags lists the commands served, each with the flags it may carry.
var commandFlags = map[uint16]uint16{
	cmdRead:        cmdFlagDF,
	cmdWrite:       cmdFlagFUA,
	cmdFlush:       0,
	cmdTrim:        cmdFlagFUA,
	cmdWriteZeroes: cmdFlagFUA | cmdFlagNoHole,
}

// handle runs one request and sends its reply.
func (t *transmission) handle(req request, buf []byte) {
	flags, known := commandFlags[req.typ]
	switch {
	case !known:
		t.replyError(req, errInvalid, "command "+itoa(int64(req.typ))+" is not supported")
		return
	case req.flags&^flags != 0:
		t.replyError(req, errInvalid, "command flags "+itoa(int64(req.flags))+" are not valid for this command")
		return
	case req.typ == cmdRead && req.flags&cmdFlagDF != 0 && !t.structured:
		t.replyError(req, errInvalid, "NBD_CMD_FLAG_DF needs structured replies")
		return
	}
	if req.typ == cmdFlush {
		t.replyResult(req, t.dev.Flush(), nil)
		return
	}
	size := uint64(t.info.Size)
	if req.offset > size || uint64(req.length) > size-req.offset {
		if req.typ == cmdRead {
			t.replyError(req, errInvalid, "read beyond the end of the export")
		} else {
			t.replyError(req, errNoSpace, "write beyond the end of the export")
		}
		return
	}
	if req.typ != cmdRead && t.info.ReadOnly {
		t.replyError(req, errPerm, "the export is read-only")
		return
	}
	off := int64(req.offset)
	var err error
	switch req.typ {
	case cmdRead:
		n, rerr := t.dev.ReadAt(buf, off)
		if rerr == io.EOF && n == len(buf) {
			rerr = nil
		}
		t.replyResult(req, rerr, buf)
		return
	case cmdWrite:
		_, err = t.dev.WriteAt(buf, off)
	case cmdTrim:
		err = t.dev.Trim(off, int64(req.length))
	case cmdWriteZeroes:
		err = writeZeroes(t.dev, off, int64(req.length))
	}
	if err == nil && req.flags&cmdFlagFUA != 0 {
		err = t.dev.Flush()
	}
	t.replyResult(req, err, nil)
}

// zeroes is what WRITE_ZEROES writes to a Device that is not a Zeroer, a piece at a time.
var zeroes = make([]byte, 1<<20)

func writeZeroes(d Device, off, n int64) error {
	if z, ok := d.(Zeroer); ok {
		return z.WriteZeroes(off, n)
	}
	for n > 0 {
		k := min(n, int64(len(zeroes)))
		if _, err := d.WriteAt(zeroes[:k], off); err != nil {
			return err
		}
		off, n = off+k, n-k
	}
	return nil
}

// replyResult answers req: the error err (logged), or success with data (a read's).
func (t *transmission) replyResult(req request, err error, data []byte) {
	if err != nil {
		t.log.Warn("nbd: request failed", "command", req.typ, "offset", req.offset, "bytes", req.length, "err", err)
		t.replyError(req, errnoOf(err), err.Error())
		return
	}
	var h []byte
	if req.typ == cmdRead && t.structured {
		if len(data) == 0 {
			h = appendChunkHeader(nil, replyFlagDone, replyNone, req.cookie, 0)
		} else {
			h = appendChunkHeader(nil, replyFlagDone, replyOffsetData, req.cookie, uint32(8+len(data)))
			h = binary.BigEndian.AppendUint64(h, req.offset)
		}
	} else {
		h = appendSimpleReply(nil, 0, req.cookie)
	}
	t.send(h, data)
}

// replyError answers req with an error: a structured error chunk (with the message) for
// a read when structured replies are on, a simple reply otherwise.
func (t *transmission) replyError(req request, errno uint32, msg string) {
	if req.typ == cmdRead && t.structured {
		if len(msg) > 4096 {
			msg = msg[:4096]
		}
		h := appendChunkHeader(nil, replyFlagDone, replyError, req.cookie, uint32(6+len(msg)))
		h = binary.BigEndian.AppendUint32(h, errno)
		h = binary.BigEndian.AppendUint16(h, uint16(len(msg)))
		t.send(append(h, msg...), nil)
		return
	}
	t.send(appendSimpleReply(nil, errno, req.cookie), nil)
}

// send writes one reply whole; a failure ends the connection. The buffered replies go
// to the socket when no other reply is waiting for wmu: the last of several replies ready
// at once flushes them all in one system call (the ones before it leave theirs in the
// buffer for it), and a lone reply is flushed at once.
func (t *transmission) send(h, data []byte) {
	t.waiting.Add(1)
	t.wmu.Lock()
	defer t.wmu.Unlock()
	last := t.waiting.Add(-1) == 0
	if t.broken.Load() {
		return
	}
	_, err := t.w.Write(h)
	if err == nil && len(data) > 0 {
		_, err = t.w.Write(data)
	}
	if err == nil && last {
		err = t.w.Flush()
	}
	if err != nil {
		t.broken.Store(true)
		t.c.Close()
	}
}

// errnoOf maps a Device error to the protocol's error values.
func errnoOf(err error) uint32 {
	switch errors.KindOf(err) {
	case errors.Invalid:
		return errInvalid
	case errors.Permission:
		return errPerm
	case errors.NoSpace, errors.TooLarge:
		return errNoSpace
	}
	return errIO
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Buffers of up to 4 MiB (the largest request a client sends with the default block
// size constraints) are pooled by power of two; larger ones are allocated per request.
// A 1 MiB write allocated and zeroed its buffer each time (9.5 % of a node's CPU in the
// 1 MiB write phase of tools/volbench).
const maxPooled = 4 << 20

var pools [23]sync.Pool // 1 B .. 4 MiB

func getBuf(n int) []byte {
	if n > maxPooled {
		return make([]byte, n)
	}
	c := 0
	for 1<<c < n {
		c++
	}
	if b, ok := pools[c].Get().(*[]byte); ok {
		return (*b)[:n]
	}
	return make([]byte, n, 1<<c)
}

func putBuf(b []byte) {
	c := cap(b)
	if c > maxPooled || c&(c-1) != 0 {
		return
	}
	k := 0
	for 1<<k < c {
		k++
	}
	b = b[:c]
	pools[k].Put(&b)
}
