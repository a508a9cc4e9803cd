package rpc

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cerrors "github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/wire"
)

// staticTLS is a TLSSource with a fixed certificate (nil: none) and a switch for Required.
type staticTLS struct {
	cert     *tls.Certificate
	pool     *x509.CertPool
	required atomic.Bool
}

func (s *staticTLS) get() *tls.Certificate { return s.cert }

func (s *staticTLS) ServerConfig() *tls.Config {
	if s.cert == nil {
		return nil
	}
	return nodetls.ServerConfig(s.get, s.pool)
}

func (s *staticTLS) ClientConfig() *tls.Config {
	if s.cert == nil {
		return nil
	}
	return nodetls.ClientConfig(s.get, s.pool)
}

func (s *staticTLS) Required() bool { return s.required.Load() }

// issue makes a certificate of ca for node id on 127.0.0.1.
func issue(t *testing.T, ca *nodetls.CA, id string) *tls.Certificate {
	t.Helper()
	key, err := nodetls.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := nodetls.NewCSR(key, id, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	csr, err := nodetls.ParseCSR(der, id)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Sign(csr, id, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := nodetls.CheckAnswer(wire.EnrolAnswer{Cert: string(p), CA: string(ca.CertPEM)}, key, id, ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type tlsEnv struct {
	addr   string
	src    *staticTLS
	mux    *Mux
	secret *Secret
	log    *logBuffer
	raft   chan net.Conn
	ca     *nodetls.CA
}

// startTLSMux serves, on a loopback mux with a TLS source, HTTP that answers who the peer
// is ("tls=BOOL peer=ID") and collects Raft connections.
func startTLSMux(t *testing.T) *tlsEnv {
	t.Helper()
	ca, err := nodetls.NewCA("rpc test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := NewSecret("cluster-secret-for-mux-tests-0123")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &tlsEnv{addr: ln.Addr().String(), src: &staticTLS{cert: issue(t, ca, "srv"), pool: ca.Pool()}, secret: secret,
		log: &logBuffer{}, raft: make(chan net.Conn, 16), ca: ca}
	e.mux = NewMuxTLS(ln, secret, e.src, slog.New(slog.NewTextHandler(e.log, nil)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := ""
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			peer, _ = nodetls.NodeID(r.TLS.PeerCertificates[0])
		}
		fmt.Fprintf(w, "tls=%v peer=%s", r.TLS != nil, peer)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(e.mux.HTTP())
	go func() {
		for {
			c, err := e.mux.Raft().Accept()
			if err != nil {
				return
			}
			e.raft <- c
		}
	}()
	t.Cleanup(func() {
		srv.Close()
		e.mux.Close()
	})
	return e
}

func get(t *testing.T, tr *http.Transport, addr string) (string, error) {
	t.Helper()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	resp, err := c.Get("http://" + addr + "/x")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// What each kind of dialler gets from a node whose listener takes TLS: a node of the
// cluster's CA reaches HTTP and Raft with its id verified; one without a certificate
// reaches HTTP unverified (the HTTP layer lets it enrol only) and no Raft; one of another
// CA is refused at the handshake; plain connections work until TLS is required.
func TestMuxTLS(t *testing.T) {
	e := startTLSMux(t)
	member := &Dialer{Secret: e.secret, TLS: &staticTLS{cert: issue(t, e.ca, "cli"), pool: e.ca.Pool()}}
	other, _ := nodetls.NewCA("another CA", time.Now())
	stranger := &Dialer{Secret: e.secret, TLS: &staticTLS{cert: issue(t, other, "cli"), pool: e.ca.Pool()}}
	plain := &Dialer{Secret: e.secret}
	noCert := &staticTLS{pool: e.ca.Pool()}
	noCert.required.Store(true)

	t.Run("member HTTP", func(t *testing.T) {
		got, err := get(t, member.Transport(), e.addr)
		if err != nil || got != "tls=true peer=cli" {
			t.Fatalf("%q %v", got, err)
		}
	})
	t.Run("member raft", func(t *testing.T) {
		c, err := member.DialRaft(e.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("ping"))
		select {
		case sc := <-e.raft:
			defer sc.Close()
			buf := make([]byte, 4)
			if _, err := io.ReadFull(sc, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("%q %v", buf, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no raft connection accepted")
		}
	})
	t.Run("enrolment transport reaches HTTP unverified", func(t *testing.T) {
		var seen *x509.Certificate
		got, err := get(t, NewEnrolTransport(func(c *x509.Certificate) { seen = c }), e.addr)
		if err != nil || got != "tls=true peer=" {
			t.Fatalf("%q %v", got, err)
		}
		if seen == nil || seen.Subject.CommonName != "srv" {
			t.Fatalf("server certificate seen: %v", seen)
		}
	})
	t.Run("raft without a client certificate", func(t *testing.T) {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{wire.ALPNRaft}, MinVersion: tls.VersionTLS13})
		defer tc.Close()
		if _, err := e.secret.raftClient(tc, 2*time.Second); err == nil {
			t.Fatal("raft accepted without a client certificate")
		}
		waitLog(t, e.log, "raft connection over TLS without a client certificate")
	})
	t.Run("another CA's certificate", func(t *testing.T) {
		// Under TLS 1.3 the client's side of the handshake ends before the server has
		// checked its certificate: the refusal is the connection closed, and the log.
		if _, err := stranger.DialRaft(e.addr, 2*time.Second); err == nil {
			t.Fatal("a certificate of another CA was accepted")
		}
		waitLog(t, e.log, "handshake failed")
		if _, err := get(t, stranger.Transport(), e.addr); err == nil {
			t.Fatal("HTTP with a certificate of another CA was accepted")
		}
		select {
		case <-e.raft:
			t.Fatal("a raft connection was accepted")
		default:
		}
	})
	t.Run("no certificate, TLS required: nothing dialled", func(t *testing.T) {
		d := &Dialer{Secret: e.secret, TLS: noCert}
		if _, err := d.DialRaft(e.addr, time.Second); !errors.Is(err, ErrNoCertificate) {
			t.Fatalf("err %v", err)
		}
	})

	// Plain works while TLS is not required; a kept-alive plain connection is closed when
	// it becomes required, and new ones are refused.
	pc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	br := bufio.NewReader(pc)
	plainGet := func() error {
		pc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(pc, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "tls=false peer=" {
			return fmt.Errorf("answer %q", b)
		}
		return nil
	}
	if err := plainGet(); err != nil {
		t.Fatalf("plain while not required: %v", err)
	}
	if got, err := get(t, plain.Transport(), e.addr); err != nil || got != "tls=false peer=" {
		t.Fatalf("plain dialler: %q %v", got, err)
	}
	e.src.required.Store(true)
	if n := e.mux.ClosePlain(); n < 1 {
		t.Fatalf("ClosePlain closed %d connections", n)
	}
	if err := plainGet(); err == nil {
		t.Fatal("a plain connection accepted before TLS was required still serves")
	}
	if _, err := get(t, plain.Transport(), e.addr); err == nil {
		t.Fatal("a plain connection was accepted with TLS required")
	}
	if _, err := e.secret.DialRaft(e.addr, 2*time.Second); err == nil {
		t.Fatal("a plain raft connection was accepted with TLS required")
	}
	if got, err := get(t, member.Transport(), e.addr); err != nil || got != "tls=true peer=cli" {
		t.Fatalf("member with TLS required: %q %v", got, err)
	}
}

// A connection that opens TLS and stops (a slowloris of the handshake) is closed by the
// listener's handshake deadline, not held.
func TestMuxTLSHandshakeStall(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 10 s for the handshake deadline: runs in make test's race lane, which has no -short")
	}
	t.Parallel() // mostly waiting
	e := startTLSMux(t)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{tlsRecord, 3, 1}) // a record header, then nothing
	// The listener must close it; the client gives up only long after the deadline
	// (no timing is asserted: a loaded machine may close it late, never not at all).
	c.SetReadDeadline(time.Now().Add(handshakeTimeout + 50*time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the connection was not closed by the listener: %v", err)
	}
}

func waitLog(t *testing.T, l *logBuffer, want string) {
	t.Helper()
	proctest.WaitFor(t, 5*time.Second, func() error {
		if !strings.Contains(l.String(), want) {
			return fmt.Errorf("log does not say %q:\n%s", want, l.String())
		}
		return nil
	})
}

// An answer written with WriteSignedBody reads back; one whose body was changed, or that
// has no body signature, is refused.
func TestSignedBody(t *testing.T) {
	s, _ := NewSecret("cluster-secret-for-mux-tests-0123")
	var tamper atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := s.Authenticate(w, r)
		if !ok {
			return
		}
		body, _ := json.Marshal(wire.EnrolAnswer{Cert: "c", CA: "a"})
		if r.URL.Query().Get("unsigned") != "" {
			w.WriteHeader(http.StatusOK)
			w.Write(body)
			return
		}
		if tamper.Load() {
			// What a man in the middle would do: the signed headers of one answer, another body.
			sw := &bodySwap{ResponseWriter: w}
			WriteSignedBody(sw, "application/json", body)
			return
		}
		WriteSignedBody(w, "application/json", body)
	}))
	defer srv.Close()
	c := &Client{Secret: s, Node: "n", HTTP: srv.Client()}
	addr := strings.TrimPrefix(srv.URL, "http://")
	read := func(q string) error {
		resp, err := c.Do(context.Background(), &Request{Method: http.MethodGet, Addr: addr, Path: "/x", Query: map[string][]string{q: {"1"}}})
		if err != nil {
			return err
		}
		_, err = ReadSignedBody(resp, 1<<10)
		return err
	}
	if err := read("ok"); err != nil {
		t.Fatal(err)
	}
	if err := read("unsigned"); !cerrors.Is(cerrors.Permission, err) {
		t.Fatalf("unsigned body: %v", err)
	}
	tamper.Store(true)
	if err := read("ok"); !cerrors.Is(cerrors.Permission, err) {
		t.Fatalf("changed body: %v", err)
	}
}

// bodySwap flips one byte of what is written.
type bodySwap struct{ http.ResponseWriter }

func (b *bodySwap) Write(p []byte) (int, error) {
	q := append([]byte(nil), p...)
	q[len(q)/2] ^= 1
	return b.ResponseWriter.Write(q)
}
