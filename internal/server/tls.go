package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// TLSFiles configures HTTPS on the S3 and admin listeners. The zero value is plain HTTP.
type TLSFiles struct {
	// CertFile and KeyFile are a PEM certificate (chain) and its private key: both or
	// neither. They are read at start and again whenever they change (see PollInterval)
	// or Reload delivers; a pair that does not load keeps the one in use.
	CertFile, KeyFile string
	// PollInterval is how often the files' modification time and size are compared with
	// the last load (0: 5s; negative: never, only Reload).
	PollInterval time.Duration
	// Reload, if set, reloads the pair at each receive (cmd/cairn sends on SIGHUP).
	Reload <-chan struct{}
}

// Enabled says whether the listeners serve HTTPS.
func (t TLSFiles) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

func (t TLSFiles) validate() error {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return errors.E(errors.Invalid, "--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
	}
	return nil
}

// certReloader holds the certificate the TLS listeners present: tls.Config.GetCertificate
// reads it at each handshake, so a reload changes what new connections get, while
// connections already open keep going with the one they got.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	cur               atomic.Pointer[tls.Certificate]

	mu       sync.Mutex
	loaded   fileStamp // files as last loaded
	failed   fileStamp // files as last failed to load (reported once)
	lastSeen fileStamp // files at the previous poll
}

// fileStamp is what polling compares: the modification times and sizes of both files.
type fileStamp struct {
	certMod, keyMod   time.Time
	certSize, keySize int64
}

func stampFiles(certFile, keyFile string) fileStamp {
	var s fileStamp
	if fi, err := os.Stat(certFile); err == nil {
		s.certMod, s.certSize = fi.ModTime(), fi.Size()
	}
	if fi, err := os.Stat(keyFile); err == nil {
		s.keyMod, s.keySize = fi.ModTime(), fi.Size()
	}
	return s
}

// newCertReloader loads the pair; it fails if the pair does not load.
func newCertReloader(t TLSFiles, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: t.CertFile, keyFile: t.KeyFile, log: log.With("component", "tls")}
	st := stampFiles(t.CertFile, t.KeyFile)
	c, err := loadPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, err
	}
	r.cur.Store(c)
	r.loaded, r.lastSeen = st, st
	r.logLoaded("start", c)
	return r, nil
}

// logLoaded says which certificate is now served, and warns if it is not valid now.
func (r *certReloader) logLoaded(why string, c *tls.Certificate) {
	args := []any{"why", why, "cert_file", r.certFile}
	if l := c.Leaf; l != nil {
		args = append(args, "serial", l.SerialNumber.String(), "subject", l.Subject.String(),
			"names", strings.Join(append(slices.Clone(l.DNSNames), ipStrings(l)...), ","), "not_after", l.NotAfter.UTC().Format(time.RFC3339))
		if now := time.Now(); now.After(l.NotAfter) || now.Before(l.NotBefore) {
			r.log.Warn("the TLS certificate is not valid now: clients will refuse it", args...)
			return
		}
	}
	r.log.Info("TLS certificate loaded", args...)
}

// loadPair reads a certificate and its key and checks that they match.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, errors.Errorf("", errors.Invalid, "TLS certificate %s with key %s: %v", certFile, keyFile, err)
	}
	return &c, nil
}

// GetCertificate is tls.Config.GetCertificate: the pair loaded last.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load(), nil
}

// reload loads the pair again. A pair that fails to load keeps the current one and is
// logged as an error (once per state of the files when report is false: a pair caught
// half-written is tried again at the next poll before it is reported).
func (r *certReloader) reload(why string, report bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := stampFiles(r.certFile, r.keyFile)
	c, err := loadPair(r.certFile, r.keyFile)
	if err != nil {
		stable := st == r.lastSeen // unchanged since the last poll: not being written
		r.lastSeen = st
		if report || (stable && st != r.failed) {
			r.failed = st
			r.log.Error("TLS certificate not reloaded: keeping the one in use", "why", why, "err", err)
		}
		return
	}
	r.lastSeen, r.loaded, r.failed = st, st, fileStamp{}
	r.cur.Store(c)
	r.logLoaded(why, c)
}

// changed says whether the files differ from what was last loaded (or last failed).
func (r *certReloader) changed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := stampFiles(r.certFile, r.keyFile)
	if st == r.loaded {
		r.lastSeen = st
		return false
	}
	if st == r.failed && st == r.lastSeen {
		return false // reported already; nothing new
	}
	return true
}

// run reloads the pair when its files change (polled every poll; negative: never) and
// at each receive from hup, until ctx ends.
func (r *certReloader) run(ctx context.Context, poll time.Duration, hup <-chan struct{}) {
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload("reload signal", true)
		case <-tick:
			if r.changed() {
				r.reload("files changed", false)
			}
		}
	}
}

// ipStrings are the IP addresses a certificate names.
func ipStrings(c *x509.Certificate) []string {
	var out []string
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// serverTLSConfig is the TLS configuration of the S3 and admin listeners: TLS 1.2 or
// later, Go's default cipher suites, the certificate from r.
func serverTLSConfig(r *certReloader) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}

// useTLS makes s serve HTTPS with r's certificate, HTTP/1.1 only. net/http bounds the
// handshake by the server's shortest timeout (ReadHeaderTimeout here), so a client that
// connects and never finishes its handshake is cut off like one that never sends its
// header. HTTP/2 is not offered: the listeners' limits are per connection and the header
// timeout per request, which HTTP/2's streams would bypass, and S3 clients speak
// HTTP/1.1.
func useTLS(s *http.Server, r *certReloader) {
	s.TLSConfig = serverTLSConfig(r)
	s.Protocols = new(http.Protocols)
	s.Protocols.SetHTTP1(true)
}
