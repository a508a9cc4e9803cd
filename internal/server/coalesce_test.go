package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

// countingListener counts the writes of the connections it accepts (the syscalls a
// plain TCP connection makes) and lets a test break them.
type countingListener struct {
	net.Listener
	writes atomic.Int64
	fail   atomic.Bool // writes fail (a client gone)
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.writes.Add(1)
	if c.l.fail.Load() {
		return 0, fmt.Errorf("injected write failure")
	}
	return c.Conn.Write(p)
}

// startCoalescing serves h as the node's listeners do (serveLimited on a limitListener)
// on 127.0.0.1, with the writes of its connections counted.
func startCoalescing(t *testing.T, h http.Handler) (addr string, cl *countingListener, ll *limitListener) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl = &countingListener{Listener: raw}
	ll = newLimitListener(cl, Limits{})
	srv := serveLimited(h, Limits{HeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Serve(ll) }()
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return raw.Addr().String(), cl, ll
}

// pattern is n bytes that differ at every offset that matters (a lost or moved byte shows).
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// readAnswer reads one answer from br: status code and body.
func readAnswer(t *testing.T, br *bufio.Reader, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, body
}

// TestCoalescedAnswers: the answer to a small GET or HEAD leaves in one write, whole and
// in order, on a kept-alive connection; larger answers, answers on connections closed
// after them, and answers to requests with a body (100 Continue) are whole too.
func TestCoalescedAnswers(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("size"))
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
		}
		body := pattern(n)
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Header().Set("X-Test", strings.Repeat("h", 300)) // a header the size of an S3 one
		w.Write(body)
	})
	addr, cl, _ := startCoalescing(t, h)
	tests := []struct {
		name      string
		method    string
		size      int
		body      string
		close     bool
		maxWrites int64 // per answer; 0: not checked
	}{
		{"GET 4KiB", "GET", 4096, "", false, 1},
		{"GET 8KiB", "GET", 8192, "", false, 1},
		{"GET 12KiB", "GET", 12 << 10, "", false, 1},
		{"HEAD 4KiB", "HEAD", 4096, "", false, 1},
		{"GET empty", "GET", 0, "", false, 1},
		{"GET 1MiB", "GET", 1 << 20, "", false, 0},
		{"GET 4KiB, connection close", "GET", 4096, "", true, 1},
		{"PUT with 100-continue", "PUT", 4096, "payload", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(30 * time.Second)) // a bound on failure, not a wait
			br := bufio.NewReader(c)
			for i := range 3 { // kept alive: every answer whole, none mixed with the next
				last := i == 2
				req, _ := http.NewRequest(tt.method, fmt.Sprintf("http://%s/x?size=%d", addr, tt.size), nil)
				before := cl.writes.Load()
				hdr := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: h\r\n", tt.method, req.URL.RequestURI())
				if tt.close && last {
					hdr += "Connection: close\r\n"
				}
				if tt.body != "" {
					hdr += fmt.Sprintf("Content-Length: %d\r\nExpect: 100-continue\r\n", len(tt.body))
				}
				if _, err := io.WriteString(c, hdr+"\r\n"); err != nil {
					t.Fatal(err)
				}
				if tt.body != "" {
					// The 100 Continue comes before the body is sent: held, it would not.
					line, err := br.ReadString('\n')
					if err != nil || !strings.Contains(line, "100 Continue") {
						t.Fatalf("want 100 Continue before the body, got %q, %v", line, err)
					}
					br.ReadString('\n')
					io.WriteString(c, tt.body)
				}
				code, body := readAnswer(t, br, req)
				if code != 200 {
					t.Fatalf("status %d", code)
				}
				if tt.method == "HEAD" {
					if len(body) != 0 {
						t.Fatalf("HEAD answered %d body bytes", len(body))
					}
				} else if !bytes.Equal(body, pattern(tt.size)) {
					t.Fatalf("answer %d: body of %d bytes differs from the %d sent", i, len(body), tt.size)
				}
				if tt.maxWrites > 0 {
					if got := cl.writes.Load() - before; got > tt.maxWrites {
						t.Errorf("answer %d left in %d writes, want at most %d", i, got, tt.maxWrites)
					}
				}
				if tt.close && last {
					if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
						t.Fatalf("after Connection: close: %d bytes, %v; want EOF", n, err)
					}
					return
				}
			}
		})
	}
}

// TestCoalescedWriteFailure: when what an answer held cannot be written (the client is
// gone), the connection is closed (its slot given back), not kept for another answer.
func TestCoalescedWriteFailure(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(pattern(4096)) })
	addr, cl, ll := startCoalescing(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	cl.fail.Store(true)
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
	// The server closes the connection: the client reads EOF (or a reset), no answer.
	n, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection still open 30 s after its answer failed")
	}
	if n != 0 {
		t.Fatalf("read %d bytes of an answer whose write failed", n)
	}
	err = proc.Until(context.Background(), 30*time.Second, func() error {
		if n := ll.current.Load(); n != 0 {
			return fmt.Errorf("%d connections still counted open", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCoalescedHijack: a hijacked connection's own writes are not held.
func TestCoalescedHijack(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hc, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer hc.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
		rw.Flush()
		hc.Write([]byte("hello"))
		// Wait for the client to have read it before closing: a held answer would not arrive.
		hc.SetReadDeadline(time.Now().Add(30 * time.Second))
		rw.ReadByte()
	})
	addr, _, _ := startCoalescing(t, h)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
	req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
	code, body := readAnswer(t, bufio.NewReader(c), req)
	if code != 200 || string(body) != "hello" {
		t.Fatalf("got %d %q", code, body)
	}
	c.Write([]byte{1})
}
