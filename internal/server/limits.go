package server

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what a client can hold of a listener before it is authenticated: its
// connections (in all and per client address), the size of a request's header, how long
// its header may take and how long its body may stall. A connection over a limit is
// closed at once and counted (the listener's *_connections_refused_total metric).
type Limits struct {
	MaxConns      int           // open connections in all (0: no limit)
	MaxConnsPerIP int           // open connections from one client address (0: no limit)
	MaxHeader     int           // bytes of request line and headers (http.Server.MaxHeaderBytes)
	HeaderTimeout time.Duration // to read a request's header
	BodyIdle      time.Duration // a request body that sends nothing this long is cut off
	IdleTimeout   time.Duration // a kept-alive connection with no request is closed
}

// withDefaults fills l's zero fields from d.
func (l Limits) withDefaults(d Limits) Limits {
	if l.MaxConns == 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerIP == 0 {
		l.MaxConnsPerIP = d.MaxConnsPerIP
	}
	if l.MaxHeader == 0 {
		l.MaxHeader = d.MaxHeader
	}
	if l.HeaderTimeout == 0 {
		l.HeaderTimeout = d.HeaderTimeout
	}
	if l.BodyIdle == 0 {
		l.BodyIdle = d.BodyIdle
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return l
}

// openFileLimit is the process's limit of open files (a large number if unknown).
func openFileLimit() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<20 {
		return 1 << 20
	}
	return int(rl.Cur)
}

// limitListener enforces Limits' connection counts on a listener.
type limitListener struct {
	net.Listener
	lim     Limits
	mu      sync.Mutex
	open    int
	perIP   map[string]int
	refused atomic.Int64
	current atomic.Int64
}

func newLimitListener(ln net.Listener, lim Limits) *limitListener {
	return &limitListener{Listener: ln, lim: lim, perIP: map[string]int{}}
}

// Accept returns the next connection within the limits; the others are closed as they
// arrive.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		over := (l.lim.MaxConns > 0 && l.open >= l.lim.MaxConns) || (l.lim.MaxConnsPerIP > 0 && l.perIP[ip] >= l.lim.MaxConnsPerIP)
		if !over {
			l.open++
			l.perIP[ip]++
		}
		l.mu.Unlock()
		if over {
			l.refused.Add(1)
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, not a lingering close: nothing to send
			}
			c.Close()
			continue
		}
		l.current.Add(1)
		return &limitedConn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	l.open--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
	l.current.Add(-1)
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	if err != nil {
		return c.RemoteAddr().String()
	}
	return host
}

// limitedConn gives its slot back when closed. It also holds the writes of a small
// answer until the answer is complete (coalesce.go).
type limitedConn struct {
	net.Conn
	l    *limitListener
	ip   string
	once sync.Once

	mu     sync.Mutex
	hold   bool    // writes are held (startHold) until release
	pend   *[]byte // what is held, from holdPool
	closed bool
}

// Close writes what an answer held (net/http closes a connection it does not keep
// alive right after the answer's last write), then closes the connection. Writes after
// Close fail.
func (c *limitedConn) Close() error {
	c.mu.Lock()
	held := c.takeLocked()
	c.hold, c.closed = false, true
	c.mu.Unlock()
	if held != nil {
		if len(*held) > 0 {
			c.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
			c.Conn.Write(*held) // the connection closes next: a failure has nobody to tell
		}
		c.putHeld(held)
	}
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// guardBodies makes a handler safe against bodies sent slowly or not at all: every read
// of a request body extends the connection's read deadline by idle (so a stalled body is
// cut off, however large a moving one is), and a body the handler did not read to its end
// (an early error) is not waited for: the connection is closed after the answer, instead
// of net/http reading what is left of the body with no deadline.
func guardBodies(next http.Handler, idle time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		b := &idleBody{ReadCloser: r.Body, rc: rc, idle: idle}
		r.Body = b
		next.ServeHTTP(w, r)
		if !b.eof {
			rc.SetReadDeadline(time.Now()) // what is left of the body is not read: close
		}
	})
}

type idleBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	idle time.Duration
	eof  bool
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.idle > 0 {
		b.rc.SetReadDeadline(time.Now().Add(b.idle))
	}
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// serveLimited is an http.Server for handler with lim's header and idle limits.
func serveLimited(handler http.Handler, lim Limits, errLog func(*http.Server)) *http.Server {
	s := &http.Server{Handler: guardBodies(handler, lim.BodyIdle), ReadHeaderTimeout: lim.HeaderTimeout,
		IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeader}
	if errLog != nil {
		errLog(s)
	}
	coalesceWrites(s)
	return s
}
