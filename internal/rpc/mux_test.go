package rpc

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// logBuffer collects a Mux's log lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type muxEnv struct {
	secret *Secret
	mux    *Mux
	addr   string
	log    *logBuffer
	http   *http.Client
	raft   chan net.Conn // connections accepted from mux.Raft()
}

// startMux serves HTTP on mux.HTTP() of a loopback listener and collects the connections
// accepted from mux.Raft().
func startMux(t *testing.T) *muxEnv {
	t.Helper()
	secret, err := NewSecret("cluster-secret-for-mux-tests-0123")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &muxEnv{secret: secret, addr: ln.Addr().String(), log: &logBuffer{}, raft: make(chan net.Conn, 16)}
	e.mux = NewMux(ln, secret, slog.New(slog.NewTextHandler(e.log, nil)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(e.mux.HTTP())
	}()
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := e.mux.Raft().Accept()
			if err != nil {
				return
			}
			e.raft <- c
		}
	}()
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	e.http = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		e.mux.Close()
		<-served
		<-accepted
		for {
			select {
			case c := <-e.raft:
				c.Close()
			default:
				return
			}
		}
	})
	return e
}

func (e *muxEnv) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := e.http.Get("http://" + e.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	return string(b)
}

// nextRaft returns the next connection accepted from mux.Raft().
func (e *muxEnv) nextRaft(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-e.raft:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no raft connection accepted")
		return nil
	}
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	c.SetReadDeadline(time.Time{})
	return b
}

func TestMuxHTTP(t *testing.T) {
	e := startMux(t)
	for _, p := range []string{"/", "/internal/v1/o", "/CRFT"} {
		if got, want := e.get(t, p), "hello "+p; got != want {
			t.Errorf("GET %s = %q, want %q", p, got, want)
		}
	}
	// Several connections at once, each served.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := "/c" + strconv.Itoa(i)
			resp, err := e.http.Get("http://" + e.addr + p)
			if err != nil {
				t.Errorf("GET %s: %v", p, err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "hello "+p {
				t.Errorf("GET %s = %q", p, b)
			}
		}()
	}
	wg.Wait()
}

func TestMuxRaft(t *testing.T) {
	e := startMux(t)
	c, err := e.secret.DialRaft(e.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Bytes that look like the start of an HTTP request or of another hello must arrive
	// as they are.
	payload := append([]byte("GET / HTTP/1.1\r\n"+raftMagic), make([]byte, 100_000)...)
	rand.Read(payload[20:])
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		werr <- err
	}()
	rc := e.nextRaft(t)
	if got := readN(t, rc, len(payload)); !bytes.Equal(got, payload) {
		t.Fatal("bytes written after the hello arrived altered")
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	// And the other way.
	if _, err := rc.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, c, 4); string(got) != "pong" {
		t.Fatalf("client read %q", got)
	}
	if rc.LocalAddr().String() != e.addr {
		t.Errorf("raft conn local address %s, want %s", rc.LocalAddr(), e.addr)
	}
	// HTTP still works next to it.
	if got := e.get(t, "/x"); got != "hello /x" {
		t.Errorf("GET /x = %q", got)
	}
	if a := e.mux.Raft().Addr().String(); a != e.addr {
		t.Errorf("Raft().Addr() = %s, want %s", a, e.addr)
	}
}

// TestMuxRefusesBadRaftHandshake: a Raft connection must prove the cluster secret over
// the server's fresh nonce; wrong proofs, proofs of another secret or key, a proof
// replayed from an earlier good handshake, and cut handshakes are closed, logged and
// never reach Raft().
func TestMuxRefusesBadRaftHandshake(t *testing.T) {
	e := startMux(t)
	other, err := NewSecret("another-cluster-secret-for-mux-01")
	if err != nil {
		t.Fatal(err)
	}
	// A good handshake, recorded as an attacker on the path would.
	var recorded []byte
	{
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		nc := make([]byte, raftNonce)
		rand.Read(nc)
		c.Write(append([]byte(raftMagic), nc...))
		resp := readN(t, c, raftNonce+raftMACSize)
		recorded = raftProof(e.secret.raft, "client", nc, resp[:raftNonce])
		c.Write(recorded)
		c.Close()
		(<-e.raft).Close()
	}
	for _, tc := range []struct {
		name  string
		proof func(nc, ns []byte) []byte // nil: stop after the magic
		dial  func() (net.Conn, error)
	}{
		{name: "random proof", proof: func(nc, ns []byte) []byte { b := make([]byte, raftMACSize); rand.Read(b); return b }},
		{name: "zero proof", proof: func(nc, ns []byte) []byte { return make([]byte, raftMACSize) }},
		{name: "other secret", proof: func(nc, ns []byte) []byte { return raftProof(other.raft, "client", nc, ns) }},
		{name: "request key", proof: func(nc, ns []byte) []byte { return raftProof(e.secret.req.key, "client", nc, ns) }},
		{name: "server's own proof", proof: func(nc, ns []byte) []byte { return raftProof(e.secret.raft, "server", nc, ns) }},
		{name: "replayed proof", proof: func(nc, ns []byte) []byte { return recorded }},
		{name: "short proof", proof: func(nc, ns []byte) []byte { return raftProof(e.secret.raft, "client", nc, ns)[:raftMACSize-1] }},
		{name: "magic only"},
		{name: "other secret dialer", dial: func() (net.Conn, error) { return other.DialRaft(e.addr, 2*time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c net.Conn
			if tc.dial != nil {
				if c, err := tc.dial(); err == nil {
					c.Close()
					t.Fatal("a dialer with another secret completed the handshake")
				}
				select {
				case rc := <-e.raft:
					rc.Close()
					t.Fatal("a dialer with another secret reached Raft()")
				case <-time.After(200 * time.Millisecond):
				}
				return
			}
			c, err := net.Dial("tcp", e.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			nc := make([]byte, raftNonce)
			rand.Read(nc)
			if tc.proof == nil {
				c.Write([]byte(raftMagic))
				c.(*net.TCPConn).CloseWrite()
			} else {
				c.Write(append([]byte(raftMagic), nc...))
				resp := readN(t, c, raftNonce+raftMACSize)
				c.Write(tc.proof(nc, resp[:raftNonce]))
				c.(*net.TCPConn).CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(make([]byte, 1))
			if n != 0 || err == nil {
				t.Fatalf("read %d bytes, %v: the connection was not closed", n, err)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection was left open")
			}
			select {
			case rc := <-e.raft:
				rc.Close()
				t.Fatal("a connection with a bad handshake reached Raft()")
			default:
			}
		})
	}
	if !strings.Contains(e.log.String(), "refused a raft connection") {
		t.Errorf("refusals not logged; log:\n%s", e.log.String())
	}
	if got := e.get(t, "/after"); got != "hello /after" {
		t.Errorf("GET /after = %q", got)
	}
}

// TestRaftFramesAuthenticated: after the handshake, a changed byte, an injected frame or
// a replayed frame fails the receiver's check, which closes the connection; nothing of
// it is delivered.
func TestRaftFramesAuthenticated(t *testing.T) {
	e := startMux(t)
	for _, tc := range []struct {
		name   string
		tamper func(raw net.Conn, frame []byte)
	}{
		{"flipped payload byte", func(raw net.Conn, frame []byte) { frame[6] ^= 1; raw.Write(frame) }},
		{"flipped mac byte", func(raw net.Conn, frame []byte) { frame[len(frame)-1] ^= 1; raw.Write(frame) }},
		{"replayed frame", func(raw net.Conn, frame []byte) { raw.Write(frame); raw.Write(frame) }},
		{"injected frame", func(raw net.Conn, frame []byte) {
			bad := binary.BigEndian.AppendUint32(nil, 5)
			bad = append(bad, "evil!"...)
			raw.Write(append(bad, make([]byte, raftMACSize)...))
		}},
		{"oversized length", func(raw net.Conn, frame []byte) { raw.Write([]byte{0xff, 0xff, 0xff, 0xff}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.secret.DialRaft(e.addr, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fc := c.(*framedConn)
			rc := e.nextRaft(t)
			defer rc.Close()
			// One good frame first.
			if _, err := c.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
			if got := readN(t, rc, 5); string(got) != "hello" {
				t.Fatalf("read %q", got)
			}
			// The next frame, as the sender would make it, then tampered with on the wire.
			frame := binary.BigEndian.AppendUint32(nil, 5)
			frame = append(frame, "world"...)
			fc.wmac.Reset()
			var seq [8]byte
			binary.BigEndian.PutUint64(seq[:], fc.wseq)
			fc.wmac.Write(seq[:])
			fc.wmac.Write([]byte("world"))
			frame = fc.wmac.Sum(frame)
			fc.wseq++
			tc.tamper(fc.Conn, frame)
			rc.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			total := ""
			for {
				n, err := rc.Read(buf)
				total += string(buf[:n])
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						t.Fatal("a tampered stream was neither refused nor closed")
					}
					break
				}
			}
			if tc.name == "replayed frame" {
				if total != "world" {
					t.Fatalf("delivered %q, want the first copy only", total)
				}
			} else if total != "" {
				t.Fatalf("delivered %q from a tampered frame", total)
			}
		})
	}
}

func TestMuxCloseUnblocksAccept(t *testing.T) {
	secret, err := NewSecret("cluster-secret-for-mux-tests-0123")
	if err != nil {
		t.Fatal(err)
	}
	for _, closer := range []string{"mux", "http listener", "raft listener", "underlying listener"} {
		t.Run(closer, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := ln.Addr().String()
			m := NewMux(ln, secret, slog.New(slog.NewTextHandler(io.Discard, nil)))
			httpL, raftL := m.HTTP(), m.Raft()
			errs := make(chan error, 2)
			for _, l := range []net.Listener{httpL, raftL} {
				go func() {
					c, err := l.Accept()
					if c != nil {
						c.Close()
					}
					errs <- err
				}()
			}
			// Both goroutines blocked in Accept (their stacks say so) before the close.
			proctest.WaitFor(t, 5*time.Second, func() error {
				buf := make([]byte, 1<<20)
				if n := strings.Count(string(buf[:runtime.Stack(buf, true)]), "(*chanListener).Accept"); n < 2 {
					return fmt.Errorf("%d goroutines blocked in Accept", n)
				}
				return nil
			})
			switch closer {
			case "mux":
				m.Close()
			case "http listener":
				httpL.Close()
			case "raft listener":
				raftL.Close()
			case "underlying listener":
				ln.Close()
			}
			for i := 0; i < 2; i++ {
				select {
				case err := <-errs:
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("Accept returned %v, want net.ErrClosed", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Accept still blocked after Close")
				}
			}
			// Closed for good: Accept returns at once, Close again is harmless, and the
			// address no longer accepts connections.
			if _, err := httpL.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close: %v", err)
			}
			if err := m.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Error("the listener still accepts connections")
			} else if !errors.Is(err, syscall.ECONNREFUSED) && !os.IsTimeout(err) {
				t.Logf("dial after Close: %v", err)
			}
		})
	}
}
