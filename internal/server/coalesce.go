package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Write coalescing of small answers.
//
// net/http writes an answer through a 4 KiB connection buffer: the header goes in first,
// so a 4 KiB body does not fit beside it and the answer leaves in two writes (the full
// buffer, then the rest when the handler returns). On loopback each write costs a trip
// through the TCP stack and a wake-up of the reader: a fifth of a node's CPU per small
// GET. A connection of a limited listener can hold the writes of an answer to a GET or
// HEAD (no request body: nothing waits for a 100 Continue) and send them as one when the
// answer is complete, which net/http signals by the connection's state hook (idle,
// hijacked) or by closing it. What is held is bounded (holdMax): a larger answer sends
// what was held with its next write (one writev) and is written as before from then on.
// A handler that needs its bytes on the wire before it returns (a Flush to keep a client
// waiting) must not answer a GET through these listeners: nothing does today.

// holdMax bounds the bytes an answer holds: a 4 KiB to 12 KiB object with its header.
const holdMax = 16 << 10

// closeFlushTimeout bounds the write of what is held when the connection closes: it
// matters only when a connection is closed in the middle of an answer to a client that
// stopped reading (a shutdown), which must not hang.
const closeFlushTimeout = time.Second

var holdPool = sync.Pool{New: func() any { b := make([]byte, 0, holdMax); return &b }}

// connKey is the request context key of a request's *limitedConn (coalesceWrites sets it).
type connKey struct{}

// heldConn returns the limited connection under c (through TLS), or nil.
func heldConn(c net.Conn) *limitedConn {
	for range 4 {
		switch x := c.(type) {
		case *limitedConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// coalesceWrites makes s hold the writes of each answer to a GET or HEAD over HTTP/1 on
// a limited connection until the answer is complete, and wraps its handler to start the
// holding. It keeps s's ConnContext and ConnState hooks.
func coalesceWrites(s *http.Server) {
	next, prevCtx, prevState := s.Handler, s.ConnContext, s.ConnState
	s.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		if lc := heldConn(c); lc != nil {
			ctx = context.WithValue(ctx, connKey{}, lc)
		}
		return ctx
	}
	s.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateIdle || st == http.StateHijacked {
			if lc := heldConn(c); lc != nil {
				lc.release()
			}
		}
		if prevState != nil {
			prevState(c, st)
		}
	}
	s.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
			(r.Body == nil || r.Body == http.NoBody) {
			if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
				lc.startHold()
			}
		}
		next.ServeHTTP(w, r)
	})
}

// startHold makes c hold its writes until release, Close or holdMax bytes.
func (c *limitedConn) startHold() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// Write writes p, or holds it while an answer is being held (startHold).
func (c *limitedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.hold {
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return 0, net.ErrClosed
		}
		return c.Conn.Write(p)
	}
	if c.pend == nil {
		c.pend = holdPool.Get().(*[]byte)
	}
	if len(*c.pend)+len(p) <= holdMax {
		*c.pend = append(*c.pend, p...)
		c.mu.Unlock()
		return len(p), nil
	}
	// Too large to hold: what was held and p leave together, and the rest of this
	// answer is written as it comes.
	c.hold = false
	held := c.takeLocked()
	c.mu.Unlock()
	heldLen := int64(len(*held))
	bufs := net.Buffers{*held, p}
	n, err := bufs.WriteTo(c.Conn)
	c.putHeld(held) // another connection may take it at once: held is not read again
	n -= heldLen
	if err != nil {
		return int(max(n, 0)), err
	}
	return len(p), nil
}

// takeLocked removes and returns the held bytes (nil if none); c.mu is held.
func (c *limitedConn) takeLocked() *[]byte {
	held := c.pend
	c.pend = nil
	return held
}

func (c *limitedConn) putHeld(held *[]byte) {
	*held = (*held)[:0]
	holdPool.Put(held)
}

// release ends the holding of an answer and writes what was held. A failed write closes
// the connection: the client cannot have had the whole answer, and a kept-alive
// connection must not carry the next one after a part of this one.
func (c *limitedConn) release() {
	c.mu.Lock()
	c.hold = false
	held := c.takeLocked()
	closed := c.closed
	c.mu.Unlock()
	if held == nil {
		return
	}
	defer c.putHeld(held)
	if len(*held) == 0 || closed {
		return
	}
	if _, err := c.Conn.Write(*held); err != nil {
		c.Close()
	}
}
