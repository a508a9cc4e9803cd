package rpc

import (
	"bufio"
	"crypto/hmac"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// raftMagic starts every Raft connection; HTTP requests start with a method name.
const raftMagic = "CRFT"

// raftHello is magic, 8 bytes of unix time, 32 bytes of HMAC(raft key, time).
const raftHello = 4 + 8 + 32

// Mux splits one listener into HTTP connections and Raft connections. A Raft connection
// must open with a hello signed with the cluster secret; others are closed and logged.
type Mux struct {
	ln     net.Listener
	secret *Secret
	log    *slog.Logger
	httpCh chan net.Conn
	raftCh chan net.Conn
	done   chan struct{}
	once   sync.Once
}

// NewMux starts accepting on ln.
func NewMux(ln net.Listener, secret *Secret, log *slog.Logger) *Mux {
	if log == nil {
		log = slog.Default()
	}
	m := &Mux{ln: ln, secret: secret, log: log, httpCh: make(chan net.Conn), raftCh: make(chan net.Conn), done: make(chan struct{})}
	go m.accept()
	return m
}

func (m *Mux) accept() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			m.Close()
			return
		}
		go m.route(c)
	}
}

func (m *Mux) route(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	head, err := br.Peek(4)
	if err != nil {
		c.Close()
		return
	}
	if string(head) == raftMagic {
		hello := make([]byte, raftHello)
		if _, err := io.ReadFull(br, hello); err != nil {
			c.Close()
			return
		}
		ts := int64(binary.BigEndian.Uint64(hello[4:12]))
		d := time.Since(time.Unix(ts, 0))
		if !hmac.Equal(hello[12:], mac(m.secret.raft, strconv.FormatInt(ts, 10))) || d > MaxSkew || d < -MaxSkew {
			m.log.Warn("refused a raft connection with a bad signature", "remote", c.RemoteAddr().String())
			c.Close()
			return
		}
		c.SetReadDeadline(time.Time{})
		select {
		case m.raftCh <- &bufConn{Conn: c, r: br}:
		case <-m.done:
			c.Close()
		}
		return
	}
	c.SetReadDeadline(time.Time{})
	select {
	case m.httpCh <- &bufConn{Conn: c, r: br}:
	case <-m.done:
		c.Close()
	}
}

// HTTP returns the listener of HTTP connections.
func (m *Mux) HTTP() net.Listener { return &chanListener{m: m, ch: m.httpCh} }

// Raft returns the listener of authenticated Raft connections.
func (m *Mux) Raft() net.Listener { return &chanListener{m: m, ch: m.raftCh} }

// Close stops accepting.
func (m *Mux) Close() error {
	m.once.Do(func() {
		close(m.done)
		m.ln.Close()
	})
	return nil
}

// DialRaft opens a Raft connection to addr, sending the signed hello.
func (s *Secret) DialRaft(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	now := time.Now().Unix()
	hello := make([]byte, 0, raftHello)
	hello = append(hello, raftMagic...)
	hello = binary.BigEndian.AppendUint64(hello, uint64(now))
	hello = append(hello, mac(s.raft, strconv.FormatInt(now, 10))...)
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(hello); err != nil {
		c.Close()
		return nil, err
	}
	c.SetWriteDeadline(time.Time{})
	return c, nil
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type chanListener struct {
	m  *Mux
	ch chan net.Conn
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.m.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error   { return l.m.Close() }
func (l *chanListener) Addr() net.Addr { return l.m.ln.Addr() }
