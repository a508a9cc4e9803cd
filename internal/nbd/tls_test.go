package nbd

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/nodetls"
)

// testLogger sends the server's log to t.Log (info and above).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(&tlogWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tlogWriter struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *tlogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// pki is a cluster CA with a node certificate for 127.0.0.1 (what the NBD listener
// presents), and a way to issue client certificates into directories laid out as
// qemu's tls-creds-x509 and libnbd's tls-certificates read them.
type pki struct {
	t    testing.TB
	ca   *nodetls.CA
	node *tls.Certificate
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	ca, err := nodetls.NewCA("test cluster", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := nodetls.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	der, err := nodetls.NewCSR(key, "node1", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	csr, err := nodetls.ParseCSR(der, "node1")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.Sign(csr, "node1", time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM(t, key))
	if err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, ca: ca, node: &c}
}

func keyPEM(t testing.TB, key any) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// serverConfig is the listener's TLS configuration, as package server builds it.
func (p *pki) serverConfig() *tls.Config {
	return nodetls.NBDServerConfig(func() (*tls.Certificate, error) { return p.node, nil }, p.ca.Pool(), nil)
}

// clientCert issues an NBD client certificate for name opening volumes.
func (p *pki) clientCert(name string, volumes ...string) tls.Certificate {
	p.t.Helper()
	key, err := nodetls.NewKey()
	if err != nil {
		p.t.Fatal(err)
	}
	csr, err := nodetls.NewNBDClientCSR(key, name)
	if err != nil {
		p.t.Fatal(err)
	}
	certPEM, err := p.ca.SignNBDClient(csr, name, volumes, time.Now(), 0)
	if err != nil {
		p.t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM(p.t, key))
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// dir writes ca-cert.pem and, if c is not nil, client-cert.pem and client-key.pem.
func (p *pki) dir(c *tls.Certificate) string {
	p.t.Helper()
	d := p.t.TempDir()
	writeFile(p.t, filepath.Join(d, "ca-cert.pem"), p.ca.CertPEM)
	if c != nil {
		writeFile(p.t, filepath.Join(d, "client-cert.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
		writeFile(p.t, filepath.Join(d, "client-key.pem"), keyPEM(p.t, c.PrivateKey))
	}
	return d
}

// startTLSServer serves the files of a new directory with TLS (required or not); a
// client certificate opens the exports it names.
func startTLSServer(t *testing.T, p *pki, required bool, mk func(dir string)) (string, string) {
	addr, dir, _ := startServerWith(t, mk, func(s *Server) {
		s.TLS, s.TLSRequired = p.serverConfig(), required
		s.Authorize = func(cs *tls.ConnectionState, export string) bool {
			if cs == nil {
				return !required
			}
			cl, err := nodetls.NBDClientOf(cs.PeerCertificates[0])
			return err == nil && cl.Allows(export)
		}
	})
	return addr, dir
}

// startTLS sends NBD_OPT_STARTTLS and, once acknowledged, runs the client's handshake.
func (r *rawClient) startTLS(cfg *tls.Config) error {
	r.t.Helper()
	r.option(optStartTLS, nil)
	if _, typ, msg := r.optReply(); typ != repAck {
		r.t.Fatalf("NBD_OPT_STARTTLS: reply %#x %q", typ, msg)
	}
	tc := tls.Client(r.c, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	r.c = tc
	return nil
}

func (p *pki) clientConfig(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", Certificates: certs, MinVersion: tls.VersionTLS13}
}

// The protocol states of a listener that requires TLS, driven byte by byte.
func TestTLSProtocol(t *testing.T) {
	p := newPKI(t)
	orig := bytes.Repeat([]byte("tls!"), 1<<18)
	addr, dir := startTLSServer(t, p, true, func(dir string) {
		writeFile(t, filepath.Join(dir, "disk"), orig)
		writeFile(t, filepath.Join(dir, "secret"), orig[:4096])
	})
	unchanged := func() {
		t.Helper()
		for name, want := range map[string][]byte{"disk": orig, "secret": orig[:4096]} {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, want) {
				t.Errorf("%s changed", name)
			}
		}
	}
	good := p.clientCert("hv1", "disk")

	t.Run("before TLS", func(t *testing.T) {
		r := dial(t, addr)
		r.t = t
		r.greet(clientFixedNewstyle | clientNoZeroes)
		for _, o := range []struct {
			code uint32
			data []byte
		}{{optList, nil}, {optInfo, goData("disk")}, {optGo, goData("disk")}, {optStructuredReply, nil}, {optListMetaContext, nil}, {99, nil}} {
			r.option(o.code, o.data)
			if opt, typ, _ := r.optReply(); opt != o.code || typ != repErrTLSReqd {
				t.Errorf("option %d before TLS: reply %#x to %d, want NBD_REP_ERR_TLS_REQD", o.code, typ, opt)
			}
		}
		r.option(optStartTLS, []byte("x"))
		if _, typ, _ := r.optReply(); typ != repErrInvalid {
			t.Errorf("NBD_OPT_STARTTLS with data: reply %#x", typ)
		}
		if err := r.startTLS(p.clientConfig(good)); err != nil {
			t.Fatal(err)
		}
		if v := r.c.(*tls.Conn).ConnectionState().Version; v != tls.VersionTLS13 {
			t.Errorf("TLS version %#x", v)
		}
		r.option(optStartTLS, nil)
		if _, typ, _ := r.optReply(); typ != repErrInvalid {
			t.Errorf("a second NBD_OPT_STARTTLS: reply %#x", typ)
		}
		// Inside TLS: only the exports the certificate names.
		r.option(optList, nil)
		var names []string
		for {
			_, typ, data := r.optReply()
			if typ != repServer {
				break
			}
			names = append(names, string(data[4:]))
		}
		if len(names) != 1 || !strings.HasPrefix(names[0], "disk") {
			t.Errorf("NBD_OPT_LIST inside TLS: %q", names)
		}
		r.option(optInfo, goData("secret"))
		if _, typ, _ := r.optReply(); typ != repErrPolicy {
			t.Errorf("NBD_OPT_INFO of an export the certificate does not name: reply %#x", typ)
		}
		if size, _ := r.goExport("disk"); size != uint64(len(orig)) {
			t.Fatalf("size %d", size)
		}
		r.request(cmdWrite, cmdFlagFUA, 1, 4096, 5, []byte("hello"))
		if errno, _ := r.simpleReply(1, 0); errno != 0 {
			t.Fatalf("write over TLS: %d", errno)
		}
		r.request(cmdRead, 0, 2, 4094, 9, nil)
		if errno, data := r.simpleReply(2, 9); errno != 0 || string(data) != "s!hellols" {
			t.Errorf("read over TLS: %d %q", errno, data)
		}
		r.request(cmdDisc, 0, 3, 0, 0, nil)
		if !r.closed() {
			t.Error("not closed after NBD_CMD_DISC")
		}
		copy(orig[4096:], "hello")
		unchanged()
	})
	refused := []struct {
		name string
		run  func(r *rawClient)
	}{
		{"export name before TLS", func(r *rawClient) { r.option(optExportName, []byte("disk")) }},
		{"abort before TLS", func(r *rawClient) {
			r.option(optAbort, nil)
			if _, typ, _ := r.optReply(); typ != repAck {
				t.Errorf("NBD_OPT_ABORT: reply %#x", typ)
			}
		}},
		{"no client certificate", func(r *rawClient) {
			if err := r.startTLS(p.clientConfig()); err == nil {
				r.goExportRefused("disk")
			}
		}},
		{"certificate of another CA", func(r *rawClient) {
			other := newPKI(t)
			if err := r.startTLS(p.clientConfig(other.clientCert("hv1", "*"))); err == nil {
				r.goExportRefused("disk")
			}
		}},
		{"node certificate", func(r *rawClient) {
			if err := r.startTLS(p.clientConfig(*p.node)); err == nil {
				r.goExportRefused("disk")
			}
		}},
		{"export name not in the certificate", func(r *rawClient) {
			if err := r.startTLS(p.clientConfig(good)); err != nil {
				t.Fatal(err)
			}
			r.option(optExportName, []byte("secret"))
		}},
		{"data sent after STARTTLS before its answer", func(r *rawClient) {
			b := append(optBytes(optStartTLS, nil), optBytes(optList, nil)...)
			r.write(b)
			if _, typ, _ := r.optReply(); typ != repAck {
				t.Errorf("NBD_OPT_STARTTLS: reply %#x", typ)
			}
		}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			r := dial(t, addr)
			r.t = t
			r.greet(clientFixedNewstyle | clientNoZeroes)
			tc.run(r)
			if !r.closed() {
				t.Error("the server kept the connection open")
			}
			unchanged()
		})
	}
}

// goExportRefused checks that NBD_OPT_GO over an established TLS connection fails (the
// server ends a connection whose client certificate it refused; TLS 1.3 clients learn it
// only at their first read).
func (r *rawClient) goExportRefused(name string) {
	r.t.Helper()
	r.option(optGo, goData(name))
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var h [20]byte
	if _, err := r.c.Read(h[:]); err == nil {
		r.t.Errorf("NBD_OPT_GO answered over a connection whose certificate should be refused")
	}
}

func optBytes(code uint32, data []byte) []byte {
	b := []byte{0x49, 0x48, 0x41, 0x56, 0x45, 0x4f, 0x50, 0x54} // IHAVEOPT
	b = append(b, byte(code>>24), byte(code>>16), byte(code>>8), byte(code))
	n := len(data)
	b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	return append(b, data...)
}

// TLS that is offered but not required: what was negotiated before it is forgotten
// (structured replies, CVE-2021-3716 against another server), and a plain client still
// works.
func TestTLSOptional(t *testing.T) {
	p := newPKI(t)
	addr, _ := startTLSServer(t, p, false, func(dir string) { writeFile(t, filepath.Join(dir, "disk"), make([]byte, 8192)) })
	r := dial(t, addr)
	r.greet(clientFixedNewstyle | clientNoZeroes)
	r.option(optStructuredReply, nil)
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Fatalf("NBD_OPT_STRUCTURED_REPLY: %#x", typ)
	}
	if err := r.startTLS(p.clientConfig(p.clientCert("hv1", "d*"))); err != nil {
		t.Fatal(err)
	}
	r.goExport("disk")
	r.request(cmdRead, 0, 1, 0, 8, nil)
	if errno, data := r.simpleReply(1, 8); errno != 0 || len(data) != 8 { // a simple reply: structured replies were forgotten
		t.Errorf("read: %d %x", errno, data)
	}
	plain := dial(t, addr)
	plain.greet(clientFixedNewstyle | clientNoZeroes)
	if size, _ := plain.goExport("disk"); size != 8192 {
		t.Errorf("plain client: size %d", size)
	}
}

// A client that asks for TLS and never starts its handshake is disconnected by the
// handshake deadline.
func TestTLSHandshakeTimeout(t *testing.T) {
	p := newPKI(t)
	addr, _, _ := startServerWith(t, func(string) {}, func(s *Server) {
		s.TLS, s.TLSRequired, s.HandshakeTimeout = p.serverConfig(), true, 300*time.Millisecond
	})
	r := dial(t, addr)
	r.greet(clientFixedNewstyle | clientNoZeroes)
	r.option(optStartTLS, nil)
	if _, typ, _ := r.optReply(); typ != repAck {
		t.Fatalf("NBD_OPT_STARTTLS: %#x", typ)
	}
	if !r.closed() {
		t.Error("a client that never started its TLS handshake kept its connection")
	}
}

func TestTLSConfigChecked(t *testing.T) {
	for _, s := range []*Server{{TLSRequired: true}, {TLS: &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven}}} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: accepted", s)
		}
	}
}

// qemu-img, qemu-io, nbdinfo and nbdcopy over TLS with certificates of the cluster CA;
// without a certificate, with one of another CA, with one that does not name the
// export, or without TLS, they read and write nothing.
func TestTLSClients(t *testing.T) {
	const size = 4 << 20
	p := newPKI(t)
	img := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	orig := bytes.Repeat([]byte{0x5a}, size)
	addr, dir := startTLSServer(t, p, true, func(dir string) {
		writeFile(t, filepath.Join(dir, "disk"), orig)
		writeFile(t, filepath.Join(dir, "other"), orig)
	})
	host, port, _ := net.SplitHostPort(addr)
	goodCert := p.clientCert("hv1", "disk")
	good := p.dir(&goodCert)
	wrongExport := p.clientCert("hv2", "disk2", "oth")
	other := newPKI(t)
	otherCert := other.clientCert("hv1", "*")
	dirs := map[string]string{
		"no client certificate": p.dir(nil),
		// Both CAs in ca-cert.pem: qemu checks its own certificate against it before it
		// connects, and the server's must verify too; the server must refuse.
		"certificate of another CA": func() string {
			d := other.dir(&otherCert)
			writeFile(t, filepath.Join(d, "ca-cert.pem"), append(append([]byte(nil), p.ca.CertPEM...), other.ca.CertPEM...))
			return d
		}(),
		"export not in the certificate": p.dir(&wrongExport),
	}
	src := filepath.Join(t.TempDir(), "src.img")
	writeFile(t, src, img)
	qemuObj := func(d string) string { return "tls-creds-x509,id=tls0,dir=" + d + ",endpoint=client" }
	qemuNBD := func(export string) string {
		return "driver=nbd,host=" + host + ",port=" + port + ",export=" + export + ",tls-creds=tls0"
	}
	nbdsURI := func(export, d string) string { return "nbds://" + addr + "/" + export + "?tls-certificates=" + d }
	unchanged := func(name string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(b, orig) {
			t.Errorf("%s changed", name)
		}
	}

	t.Run("refused", func(t *testing.T) {
		cases := map[string][][]string{}
		for name, d := range dirs {
			export := "disk"
			if strings.HasPrefix(name, "export") {
				export = "other"
			}
			cases[name] = [][]string{
				{"nbdinfo", nbdsURI(export, d)},
				{"qemu-io", "--object", qemuObj(d), "--image-opts", qemuNBD(export), "-c", "write -P 0x11 0 4096"},
				{"qemu-img", "convert", "--object", qemuObj(d), "--image-opts", qemuNBD(export), "-O", "raw", filepath.Join(t.TempDir(), "out.img")},
			}
		}
		cases["plain client"] = [][]string{
			{"nbdinfo", "nbd://" + addr + "/disk"},
			{"qemu-io", "-f", "raw", "-c", "write -P 0x11 0 4096", "nbd://" + addr + "/disk"},
			{"qemu-img", "convert", "-f", "raw", "-O", "raw", "nbd://" + addr + "/disk", filepath.Join(t.TempDir(), "out.img")},
		}
		for name, cmds := range cases {
			for _, c := range cmds {
				t.Run(name+"/"+c[0], func(t *testing.T) {
					out, err := exec.Command(tool(t, c[0]), c[1:]...).CombinedOutput()
					t.Logf("%s: %v\n%s", c[0], err, out)
					if err == nil {
						t.Errorf("%s succeeded:\n%s", strings.Join(c, " "), out)
					}
					if c[0] == "qemu-img" {
						if b, _ := os.ReadFile(c[len(c)-1]); bytes.Contains(b, orig[:512]) {
							t.Error("qemu-img read the export")
						}
					}
				})
			}
		}
		unchanged("disk")
		unchanged("other")
	})
	t.Run("qemu-img", func(t *testing.T) {
		run(t, "qemu-img", "convert", "-n", "--object", qemuObj(good), "-f", "raw", src, "--target-image-opts", qemuNBD("disk"))
		run(t, "qemu-img", "compare", "--object", qemuObj(good), "--image-opts", "driver=file,filename="+src, qemuNBD("disk"))
		if b, err := os.ReadFile(filepath.Join(dir, "disk")); err != nil || !bytes.Equal(b, img) {
			t.Fatal("the export's file differs from the image qemu-img wrote over TLS")
		}
	})
	t.Run("qemu-io", func(t *testing.T) {
		out := run(t, "qemu-io", "--object", qemuObj(good), "--image-opts", qemuNBD("disk"),
			"-c", "write -P 0xab 8192 65536", "-c", "flush", "-c", "read -P 0xab 8192 65536")
		if strings.Contains(out, "error") || strings.Contains(out, "Pattern verification failed") {
			t.Errorf("qemu-io:\n%s", out)
		}
		copy(img[8192:8192+65536], bytes.Repeat([]byte{0xab}, 65536))
	})
	t.Run("nbdinfo", func(t *testing.T) {
		out := run(t, "nbdinfo", nbdsURI("disk", good))
		if !strings.Contains(out, "export-size: "+strconv.Itoa(size)) {
			t.Errorf("nbdinfo:\n%s", out)
		}
		out = run(t, "nbdinfo", "--list", nbdsURI("", good))
		if !strings.Contains(out, "disk") || strings.Contains(out, "other") {
			t.Errorf("nbdinfo --list shows what the certificate does not name:\n%s", out)
		}
	})
	t.Run("nbdcopy", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "copy.img")
		run(t, "nbdcopy", nbdsURI("disk", good), dst)
		if b, err := os.ReadFile(dst); err != nil || !bytes.Equal(b, img) {
			t.Fatal("nbdcopy's copy over TLS differs")
		}
	})
	unchanged("other")
}

// Drop closes the connections whose client certificate its check refuses (a revocation
// after they were authenticated), leaves the others serving, and closes a connection
// that finishes its handshake after it, as soon as the transmission phase starts.
func TestTLSDrop(t *testing.T) {
	p := newPKI(t)
	orig := bytes.Repeat([]byte("drop"), 1<<16)
	addr, _, srv := startServerWith(t, func(dir string) { writeFile(t, filepath.Join(dir, "disk"), orig) }, func(s *Server) {
		s.TLS, s.TLSRequired = p.serverConfig(), true
		s.Authorize = func(cs *tls.ConnectionState, export string) bool { return cs != nil }
	})
	hv1, hv2 := p.clientCert("hv1", "disk"), p.clientCert("hv2", "disk")
	open := func(c tls.Certificate) *rawClient {
		r := dial(t, addr)
		r.greet(clientFixedNewstyle | clientNoZeroes)
		if err := r.startTLS(p.clientConfig(c)); err != nil {
			t.Fatal(err)
		}
		r.goExport("disk")
		return r
	}
	read := func(r *rawClient, cookie uint64) {
		t.Helper()
		r.request(cmdRead, 0, cookie, 0, 4096, nil)
		if errno, b := r.simpleReply(cookie, 4096); errno != 0 || !bytes.Equal(b, orig[:4096]) {
			t.Fatalf("read: errno %d", errno)
		}
	}
	c1, c2 := open(hv1), open(hv2)
	read(c1, 1)
	read(c2, 1)
	revoked := func(c *x509.Certificate) error {
		if c.Subject.CommonName == "hv1" {
			return os.ErrPermission
		}
		return nil
	}
	if n := srv.Drop(revoked); n != 1 {
		t.Fatalf("Drop closed %d connections, want 1", n)
	}
	if !c1.closed() {
		t.Error("the connection of the refused certificate is still open")
	}
	read(c2, 2)
	if n := srv.Drop(revoked); n != 0 {
		t.Errorf("a second Drop closed %d connections", n)
	}
	if !open(hv1).closed() {
		t.Error("a connection of the refused certificate opened after Drop is still open")
	}
	read(c2, 3)
}
