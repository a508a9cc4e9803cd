package rpc

import (
	"bufio"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/wire"
)

// raftMagic starts every Raft connection; HTTP requests start with a method name.
const raftMagic = "CRFT"

// tlsRecord is the first byte of a TLS connection (a handshake record); no HTTP method
// and not raftMagic start with it.
const tlsRecord = 0x16

// handshakeTimeout bounds what a connection may take to say what it is: its first bytes,
// its TLS handshake, the Raft challenge-response.
const handshakeTimeout = 10 * time.Second

// TLSSource is a node's internode TLS as it stands: the Mux and the Dialer ask it at
// each connection, so a certificate obtained or renewed, or TLS becoming required,
// applies to the next connection. Its methods are called concurrently.
type TLSSource interface {
	// ServerConfig is the configuration of an incoming TLS connection (it must verify a
	// client certificate if one is given, and offer wire.ALPNRaft and wire.ALPNHTTP); nil
	// while this node has no certificate: TLS connections are closed.
	ServerConfig() *tls.Config
	// ClientConfig is the configuration for dialling another node (its server name is
	// set per connection); nil while this node has no certificate: it dials plain, or not
	// at all once TLS is required.
	ClientConfig() *tls.Config
	// Required says whether plain connections are refused (and never dialled).
	Required() bool
}

// Mux splits one listener into HTTP connections and Raft connections. A connection may
// be plain or TLS (told apart by its first byte); under TLS, the protocol negotiated
// (ALPN) says Raft or HTTP, and a Raft connection must have presented a client
// certificate the TLS configuration verified. A Raft connection must then open with the
// challenge-response of raftconn.go and is framed, under TLS too. Plain connections are
// closed once the TLSSource says TLS is required (ClosePlain closes those accepted
// before). An HTTP connection under TLS is handed over as the *tls.Conn, so the HTTP
// server sees the peer's certificate (or its absence) in Request.TLS.
type Mux struct {
	ln     net.Listener
	secret *Secret
	tls    TLSSource // nil: plain only
	log    *slog.Logger
	httpCh chan net.Conn
	raftCh chan net.Conn
	done   chan struct{}
	once   sync.Once

	mu    sync.Mutex
	plain map[*plainConn]struct{} // plain connections open, for ClosePlain
}

// NewMux starts accepting plain connections on ln.
func NewMux(ln net.Listener, secret *Secret, log *slog.Logger) *Mux {
	return NewMuxTLS(ln, secret, nil, log)
}

// NewMuxTLS starts accepting on ln, plain and TLS connections as src says (nil: plain
// only).
func NewMuxTLS(ln net.Listener, secret *Secret, src TLSSource, log *slog.Logger) *Mux {
	if log == nil {
		log = slog.Default()
	}
	m := &Mux{ln: ln, secret: secret, tls: src, log: log, httpCh: make(chan net.Conn), raftCh: make(chan net.Conn), done: make(chan struct{}),
		plain: map[*plainConn]struct{}{}}
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

func (m *Mux) required() bool { return m.tls != nil && m.tls.Required() }

func (m *Mux) route(c net.Conn) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	if first[0] == tlsRecord {
		m.routeTLS(&bufConn{Conn: c, r: br})
		return
	}
	if m.required() {
		m.log.Warn("refused a plain internode connection: this cluster requires TLS", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	pc := m.track(c)
	if pc == nil {
		return
	}
	head, err := br.Peek(4)
	if err != nil {
		pc.Close()
		return
	}
	if string(head) == raftMagic {
		br.Discard(len(raftMagic))
		rc, err := m.secret.acceptRaft(pc, br)
		if err != nil {
			m.log.Warn("refused a raft connection: it did not prove the cluster secret", "remote", c.RemoteAddr().String(), "err", err)
			pc.Close()
			return
		}
		c.SetDeadline(time.Time{})
		m.hand(m.raftCh, rc)
		return
	}
	c.SetDeadline(time.Time{})
	m.hand(m.httpCh, &bufConn{Conn: pc, r: br})
}

// routeTLS runs the server handshake on c (deadline set) and routes the connection by
// its ALPN protocol.
func (m *Mux) routeTLS(c net.Conn) {
	var cfg *tls.Config
	if m.tls != nil {
		cfg = m.tls.ServerConfig()
	}
	if cfg == nil {
		m.log.Debug("closed a TLS internode connection: this node has no certificate yet", "remote", c.RemoteAddr().String())
		c.Close()
		return
	}
	tc := tls.Server(c, cfg)
	if err := tc.Handshake(); err != nil {
		m.log.Warn("refused an internode TLS connection: handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	st := tc.ConnectionState()
	if st.NegotiatedProtocol == wire.ALPNRaft {
		if len(st.VerifiedChains) == 0 {
			m.log.Warn("refused a raft connection over TLS without a client certificate", "remote", c.RemoteAddr().String())
			tc.Close()
			return
		}
		var magic [len(raftMagic)]byte
		if _, err := io.ReadFull(tc, magic[:]); err != nil || string(magic[:]) != raftMagic {
			tc.Close()
			return
		}
		rc, err := m.secret.acceptRaft(tc, tc)
		if err != nil {
			m.log.Warn("refused a raft connection: it did not prove the cluster secret", "remote", c.RemoteAddr().String(), "err", err)
			tc.Close()
			return
		}
		tc.SetDeadline(time.Time{})
		m.hand(m.raftCh, rc)
		return
	}
	tc.SetDeadline(time.Time{})
	m.hand(m.httpCh, tc)
}

// hand passes c to the listener of ch, or closes it if the mux is closed.
func (m *Mux) hand(ch chan net.Conn, c net.Conn) {
	select {
	case ch <- c:
	case <-m.done:
		c.Close()
	}
}

// plainConn is a plain connection the mux accepted: closed by ClosePlain.
type plainConn struct {
	net.Conn
	m    *Mux
	once sync.Once
}

func (c *plainConn) Close() error {
	c.once.Do(func() {
		c.m.mu.Lock()
		delete(c.m.plain, c)
		c.m.mu.Unlock()
	})
	return c.Conn.Close()
}

// track registers a plain connection; nil (and c closed) if TLS became required meanwhile.
func (m *Mux) track(c net.Conn) *plainConn {
	pc := &plainConn{Conn: c, m: m}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.required() {
		c.Close()
		return nil
	}
	m.plain[pc] = struct{}{}
	return pc
}

// ClosePlain closes every plain connection accepted so far: call it when TLS becomes
// required, so that none accepted before goes on. It returns how many it closed.
func (m *Mux) ClosePlain() int {
	m.mu.Lock()
	var open []*plainConn
	for c := range m.plain {
		open = append(open, c)
	}
	m.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
	return len(open)
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
