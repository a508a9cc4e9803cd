// Package testutil starts real cairn servers for tests, in-process on a real loopback
// socket. Package proctest (testutil/proctest) starts them as processes.
package testutil

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
)

// Test credentials.
const (
	AccessKey = "CAIRNTESTACCESSKEY01"
	SecretKey = "cairnTestSecretKey0123456789abcdefghijklm"
)

// Server is an in-process S3 server on 127.0.0.1.
type Server struct {
	URL   string
	Store *store.Store
	Dir   string
	http  *httptest.Server
}

// NewLogger returns a logger that writes to t.Log.
func NewLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Helper()
	w.tb.Log(string(p))
	return len(p), nil
}

// StartServer starts a store in a temporary directory and serves the S3 API on loopback.
// cfg.Dir is set by StartServer; other store settings are kept.
func StartServer(tb testing.TB, cfg store.Config, mod func(*s3api.Config)) *Server {
	tb.Helper()
	return start(tb, cfg, mod, false)
}

// StartTLSServer is StartServer serving HTTPS (httptest's certificate: Client trusts it),
// for what S3 allows only over TLS (SSE-C).
func StartTLSServer(tb testing.TB, cfg store.Config, mod func(*s3api.Config)) *Server {
	tb.Helper()
	return start(tb, cfg, mod, true)
}

func start(tb testing.TB, cfg store.Config, mod func(*s3api.Config), tlsOn bool) *Server {
	tb.Helper()
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	cfg.Logger = NewLogger(tb)
	st, err := store.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	acfg := s3api.Config{
		Store:  gateway.Local(st, cfg.Logger),
		Lookup: func(ak string) (string, bool) { return SecretKey, ak == AccessKey },
		Logger: cfg.Logger,
	}
	if mod != nil {
		mod(&acfg)
	}
	hs := httptest.NewUnstartedServer(s3api.New(acfg))
	if tlsOn {
		hs.StartTLS()
	} else {
		hs.Start()
	}
	s := &Server{URL: hs.URL, Store: st, Dir: cfg.Dir, http: hs}
	tb.Cleanup(func() {
		hs.Close()
		st.Close()
	})
	return s
}

// Client returns an HTTP client for raw requests (trusting the server's certificate).
func (s *Server) Client() *http.Client { return s.http.Client() }

var _ = context.Background
