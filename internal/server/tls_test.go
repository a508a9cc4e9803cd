package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/testutil/testcert"
)

// startTLSNode runs a single node in-process whose S3 and admin listeners serve HTTPS
// with the pair at certFile and keyFile, polled for changes every 50ms; its log goes to
// logs.
func startTLSNode(t *testing.T, certFile, keyFile string, lim Limits, logs io.Writer) Ready {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Ready, 1)
	done := make(chan error, 1)
	cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", NodeAddr: "127.0.0.1:0",
		AccessKey: "TLSTESTKEY0000000001", SecretKey: "tlsTestSecret0123456789abcdefghijklmnopq",
		Logger: slog.New(slog.NewTextHandler(logs, nil)), S3Limits: lim, AdminLimits: lim,
		TLS:   TLSFiles{CertFile: certFile, KeyFile: keyFile, PollInterval: 50 * time.Millisecond},
		Ready: func(r Ready) { ready <- r }}
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node: %v", err)
		}
	})
	select {
	case r := <-ready:
		return r
	case err := <-done:
		t.Fatalf("node exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("node not ready in 60s")
	}
	return Ready{}
}

// servedSerial is the serial number of the certificate a new connection to addr gets.
func servedSerial(addr string, tc *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, tc)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestTLSListeners: with a certificate, the S3 and admin listeners serve HTTPS only
// (TLS 1.2 or later, HTTP/1.1) and refuse plain HTTP; a client that does not trust the CA
// fails; a request whose body never comes is answered and closed; the connection limits
// count TCP connections before the handshake and a client
// that never finishes its handshake is cut off; a new pair written over
// the files is served to new connections while open ones keep going, and a broken pair
// keeps the old one and is logged.
func TestTLSListeners(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca, err := testcert.NewCA("cairn test CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64) testcert.Pair {
		p, err := ca.Issue(serial, "127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if err := issue(100).Write(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	logs := new(lockedBuffer)
	r := startTLSNode(t, certFile, keyFile, Limits{HeaderTimeout: time.Second, BodyIdle: 2 * time.Second, MaxConnsPerIP: 8}, logs)
	if !r.TLS {
		t.Fatal("Ready.TLS is false")
	}
	tc := ca.ClientConfig()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}

	t.Run("https", func(t *testing.T) {
		req, _ := http.NewRequest("GET", "https://"+r.S3Addr+"/", nil)
		sigv4.SignRequest(req, "TLSTESTKEY0000000001", "tlsTestSecret0123456789abcdefghijklmnopq", "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 1 || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Errorf("S3 ListBuckets over HTTPS: %s %s, TLS %v", resp.Status, resp.Proto, resp.TLS != nil)
		}
		// HTTP/2 is not offered, even to a client that asks for it first.
		h2 := tc.Clone()
		h2.NextProtos = []string{"h2", "http/1.1"}
		for _, addr := range []string{r.S3Addr, r.AdminAddr} {
			c, err := tls.Dial("tcp", addr, h2)
			if err != nil {
				t.Fatal(err)
			}
			if p := c.ConnectionState().NegotiatedProtocol; p == "h2" {
				t.Errorf("%s negotiated %q, want HTTP/1.1 only", addr, p)
			}
			c.Close()
		}
		resp, err = hc.Get("https://" + r.AdminAddr + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("admin /health over HTTPS: %s", resp.Status)
		}
		// The console's session cookie is Secure on an HTTPS listener.
		resp, err = hc.PostForm("https://"+r.AdminAddr+"/console/api/login", url.Values{"password": {r.Secret}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if c := resp.Cookies(); resp.StatusCode != 200 || len(c) != 1 || !c[0].Secure || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
			t.Errorf("console login over HTTPS: %s, cookies %+v", resp.Status, c)
		}
	})
	t.Run("refused", func(t *testing.T) {
		for _, addr := range []string{r.S3Addr, r.AdminAddr} {
			resp, err := http.Get("http://" + addr + "/health")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
					t.Errorf("plain HTTP to %s: %s %q, want 400 (an HTTP request to an HTTPS server)", addr, resp.Status, b)
				}
			}
			untrusted := &http.Client{Timeout: 10 * time.Second} // the system's CAs
			if resp, err := untrusted.Get("https://" + addr + "/health"); err == nil {
				resp.Body.Close()
				t.Errorf("client without the CA: %s, want a certificate error", resp.Status)
			} else if !strings.Contains(err.Error(), "certificate") {
				t.Errorf("client without the CA: %v, want a certificate error", err)
			}
			old := tc.Clone()
			old.MaxVersion = tls.VersionTLS11
			if _, err := servedSerial(addr, old); err == nil {
				t.Errorf("TLS 1.1 to %s: handshake succeeded", addr)
			}
		}
	})
	t.Run("half-open handshake", func(t *testing.T) {
		for _, addr := range []string{r.S3Addr, r.AdminAddr} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			// The first bytes of a ClientHello, then nothing.
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01})
			start := time.Now()
			c.SetReadDeadline(start.Add(20 * time.Second))
			_, err = io.Copy(io.Discard, bufio.NewReader(c))
			c.Close()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("%s: a handshake never finished still open after 20s", addr)
			} else if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s: a handshake never finished cut off after %s, want about the header timeout (1s)", addr, d)
			}
		}
	})
	t.Run("unsent body", func(t *testing.T) {
		// As over HTTP (TestUnsentBodyIsNotWaitedFor): a request whose body never comes
		// is answered and its connection closed, through the TLS connection's deadlines.
		for _, addr := range []string{r.S3Addr, r.AdminAddr} {
			c, err := tls.Dial("tcp", addr, tc)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			c.SetDeadline(start.Add(20 * time.Second))
			fmt.Fprintf(c, "PUT /b/x HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n\r\n", addr)
			br := bufio.NewReader(c)
			status, _ := br.ReadString('\n')
			_, err = io.Copy(io.Discard, br)
			c.Close()
			if ne, ok := err.(net.Error); (ok && ne.Timeout()) || status == "" {
				t.Errorf("%s: answer %q, connection still open after 20s", addr, status)
			}
		}
	})
	t.Run("connection limits", func(t *testing.T) {
		// The limits count TCP connections, before any handshake: 8 silent connections
		// from 127.0.0.2 fill its share, a 9th is closed at once, 127.0.0.1 is served,
		// and the slots come back once the handshake deadline cuts the silent ones off.
		tlsFrom := func(local string) error {
			c, err := dialFrom(local, r.S3Addr)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			cc := tc.Clone()
			cc.ServerName = "127.0.0.1"
			return tls.Client(c, cc).Handshake()
		}
		// The client configuration works (from another address: a connection closed
		// here is given back asynchronously, and would count against 127.0.0.2 for a while).
		if err := tlsFrom("127.0.0.3"); err != nil {
			t.Fatalf("before the flood: %v", err)
		}
		var silent []net.Conn
		for range 8 {
			c, err := dialFrom("127.0.0.2", r.S3Addr)
			if err != nil {
				t.Fatal(err)
			}
			silent = append(silent, c)
		}
		defer func() {
			for _, c := range silent {
				c.Close()
			}
		}()
		proctest.WaitFor(t, 5*time.Second, func() error {
			if err := tlsFrom("127.0.0.2"); err == nil {
				return fmt.Errorf("a 9th connection from 127.0.0.2 was served")
			}
			return nil
		})
		if err := tlsFrom("127.0.0.1"); err != nil {
			t.Errorf("127.0.0.1 while 127.0.0.2 is at its limit: %v", err)
		}
		proctest.WaitFor(t, 10*time.Second, func() error { return tlsFrom("127.0.0.2") })
	})
	t.Run("reload", func(t *testing.T) {
		// A connection opened before the reload keeps its certificate and goes on.
		keep, err := tls.Dial("tcp", r.AdminAddr, tc)
		if err != nil {
			t.Fatal(err)
		}
		defer keep.Close()
		br := bufio.NewReader(keep)
		health := func() error {
			fmt.Fprintf(keep, "GET /health HTTP/1.1\r\nHost: %s\r\n\r\n", r.AdminAddr)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s", resp.Status)
			}
			return nil
		}
		if err := health(); err != nil {
			t.Fatal(err)
		}
		if err := issue(200).Write(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{r.S3Addr, r.AdminAddr} {
			proctest.WaitFor(t, 10*time.Second, func() error {
				s, err := servedSerial(addr, tc)
				if err == nil && s != "200" {
					err = fmt.Errorf("%s serves serial %s, want 200", addr, s)
				}
				return err
			})
		}
		if err := health(); err != nil {
			t.Errorf("connection opened before the reload: %v", err)
		}
		if s := keep.ConnectionState().PeerCertificates[0].SerialNumber.String(); s != "100" {
			t.Errorf("connection opened before the reload has serial %s, want 100", s)
		}

		// A new certificate without its key (the key file keeps serial 200's): refused,
		// the old pair stays, one error says why. (A poll that caught a pair above
		// between its two renames for two polls in a row may have reported it too.)
		const refused = "TLS certificate not reloaded"
		before := strings.Count(logs.String(), refused)
		if err := os.WriteFile(certFile+".new", issue(300).CertPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(certFile+".new", certFile); err != nil {
			t.Fatal(err)
		}
		proctest.WaitFor(t, 10*time.Second, func() error {
			if out := logs.String(); strings.Count(out, refused) == before || !strings.Contains(out, "level=ERROR") ||
				!strings.Contains(out, "private key does not match public key") {
				return fmt.Errorf("no error logged for a mismatched pair")
			}
			return nil
		})
		if s, err := servedSerial(r.S3Addr, tc); err != nil || s != "200" {
			t.Errorf("after a broken pair: serial %s (%v), want 200 kept", s, err)
		}
		proctest.Holds(t, 300*time.Millisecond, func() error { // six more polls of the same broken pair
			if n := strings.Count(logs.String(), refused) - before; n != 1 {
				return fmt.Errorf("the broken pair was reported %d times, want once", n)
			}
			return nil
		})
		// Fixed: served again.
		if err := issue(400).Write(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		proctest.WaitFor(t, 10*time.Second, func() error {
			s, err := servedSerial(r.S3Addr, tc)
			if err == nil && s != "400" {
				err = fmt.Errorf("serves serial %s, want 400", s)
			}
			return err
		})
	})
}

// TestTLSConfigErrors: a certificate without a key (or the reverse) and a pair that
// does not load stop the node before it serves.
func TestTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.NewCA("cairn test CA")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(1, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := p.Write(cert, key); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		files TLSFiles
		want  string
	}{
		"cert only":   {TLSFiles{CertFile: cert}, "go together"},
		"key only":    {TLSFiles{KeyFile: key}, "go together"},
		"swapped":     {TLSFiles{CertFile: key, KeyFile: cert}, "TLS certificate"},
		"no such key": {TLSFiles{CertFile: cert, KeyFile: filepath.Join(dir, "none.pem")}, "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", NodeAddr: "127.0.0.1:0",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), TLS: tc.files,
				Ready: func(Ready) { t.Error("node served") }}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := Run(ctx, cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error about %q", err, tc.want)
			}
		})
	}
}

// BenchmarkLoopbackStream is the ceiling TLS sets on this machine, without cairn: one
// connection over loopback streaming 1 MiB writes to a reader in the same process, plain
// TCP and then TLS 1.3 with the listeners' configuration (serverTLSConfig, an ECDSA
// certificate; AES-128-GCM where the CPU has AES instructions). docs/benchmarks.md
// compares cairn's HTTPS/HTTP ratios with this one.
func BenchmarkLoopbackStream(b *testing.B) {
	dir := b.TempDir()
	ca, err := testcert.NewCA("bench CA")
	if err != nil {
		b.Fatal(err)
	}
	p, err := ca.Issue(1, "127.0.0.1")
	if err == nil {
		err = p.Write(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	}
	if err != nil {
		b.Fatal(err)
	}
	certs, err := newCertReloader(TLSFiles{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	for _, useTLS := range []bool{false, true} {
		name := "tcp"
		if useTLS {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			buf := make([]byte, 1<<20)
			done := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				if useTLS {
					c = tls.Server(c, serverTLSConfig(certs))
				}
				defer c.Close()
				for i := 0; i < b.N; i++ {
					if _, err := c.Write(buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if useTLS {
				cc := ca.ClientConfig()
				cc.ServerName = "127.0.0.1"
				c = tls.Client(c, cc)
			}
			defer c.Close()
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{c}, make([]byte, 64<<10)); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
