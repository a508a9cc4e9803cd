package rpc

import (
	"bufio"
	"log/slog"
	"net"
	"sync"
	"time"
)

// raftMagic starts every Raft connection; HTTP requests start with a method name.
const raftMagic = "CRFT"

// Mux splits one listener into HTTP connections and Raft connections. A Raft connection
// must open with the challenge-response of raftconn.go and is then framed; others are
// closed and logged.
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
		br.Discard(len(raftMagic))
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		rc, err := m.secret.acceptRaft(c, br)
		if err != nil {
			m.log.Warn("refused a raft connection: it did not prove the cluster secret", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
		c.SetDeadline(time.Time{})
		select {
		case m.raftCh <- rc:
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
