// Package server runs a cairn node: it opens the store, loads the credentials, and serves
// the S3 API and the admin endpoints (/metrics, /health) until its context is cancelled,
// then shuts down gracefully (in-flight requests finish, the store is flushed and closed).
package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
)

// Config configures a node.
type Config struct {
	DataDir     string // default ./data
	Listen      string // S3 address, default 127.0.0.1:9000
	AdminListen string // metrics and health, default 127.0.0.1:9001; "off" disables
	// AccessKey and SecretKey, if both set, are the credentials; otherwise they are read
	// from DataDir/credentials.json, generated there on first start.
	AccessKey, SecretKey string
	Region               string
	Domains              []string
	Logger               *slog.Logger
	// Store tunables (zero = defaults).
	Store store.Config
	// ShutdownTimeout bounds the wait for in-flight requests (default 30s).
	ShutdownTimeout time.Duration
	// Ready, if set, is called once both listeners are open, with the S3 and admin addresses.
	Ready func(s3Addr, adminAddr string, creds Credentials)
}

// Credentials are an access key pair.
type Credentials struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:9000"
	}
	if c.AdminListen == "" {
		c.AdminListen = "127.0.0.1:9001"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
}

// LoadCredentials returns the configured credentials, or those stored in dataDir, creating
// and storing new random ones if there are none.
func LoadCredentials(dataDir, access, secret string) (Credentials, bool, error) {
	if access != "" && secret != "" {
		return Credentials{AccessKey: access, SecretKey: secret}, false, nil
	}
	if access != "" || secret != "" {
		return Credentials{}, false, errors.E(errors.Invalid, "set both CAIRN_ACCESS_KEY and CAIRN_SECRET_KEY, or neither")
	}
	path := filepath.Join(dataDir, "credentials.json")
	data, err := os.ReadFile(path)
	if err == nil {
		var c Credentials
		if err := json.Unmarshal(data, &c); err != nil || c.AccessKey == "" || c.SecretKey == "" {
			return Credentials{}, false, errors.Errorf("", errors.Corrupt, "%s is malformed; delete it to generate new credentials", path)
		}
		return c, false, nil
	}
	if !os.IsNotExist(err) {
		return Credentials{}, false, errors.E(errors.IO, err)
	}
	c := Credentials{AccessKey: "CAIRN" + randString(15, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
		SecretKey: randString(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")}
	data, _ = json.MarshalIndent(c, "", "  ")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return Credentials{}, false, errors.E(errors.IO, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return Credentials{}, false, errors.E(errors.IO, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return Credentials{}, false, errors.E(errors.IO, err)
	}
	return c, true, nil
}

func randString(n int, alphabet string) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// Run serves until ctx is cancelled, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	const op errors.Op = "server.Run"
	cfg.setDefaults()
	log := cfg.Logger
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return errors.E(op, errors.IO, err)
	}
	creds, _, err := LoadCredentials(cfg.DataDir, cfg.AccessKey, cfg.SecretKey)
	if err != nil {
		return errors.E(op, err)
	}
	m := metrics.New()
	scfg := cfg.Store
	scfg.Dir = cfg.DataDir
	scfg.Logger = log
	scfg.OnCommit = m.ObserveCommit
	scfg.OnSegmentSync = m.ObserveSegmentSync
	st, err := store.Open(scfg)
	if err != nil {
		return errors.E(op, err)
	}
	defer st.Close()
	m.WatchStore(st)

	api := s3api.New(s3api.Config{
		Store:    st,
		Lookup:   func(ak string) (string, bool) { return creds.SecretKey, ak == creds.AccessKey },
		Region:   cfg.Region,
		Domains:  cfg.Domains,
		Logger:   log,
		Observer: m,
	})
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()

	adminAddr := ""
	var admin *http.Server
	if cfg.AdminListen != "off" {
		aln, err := net.Listen("tcp", cfg.AdminListen)
		if err != nil {
			srv.Close()
			return errors.E(op, errors.IO, err)
		}
		adminAddr = aln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
			if ctx.Err() != nil {
				http.Error(w, "shutting down\n", http.StatusServiceUnavailable)
				return
			}
			st := st.Stats()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"status":"ok","free_bytes":%d,"garbage_bytes":%d}`+"\n", st.FreeBytes, st.GarbageBytes)
		})
		admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- admin.Serve(aln) }()
	}
	log.Info("cairn serving", "s3", ln.Addr().String(), "admin", adminAddr, "data", cfg.DataDir)
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String(), adminAddr, creds)
	}

	select {
	case <-ctx.Done():
	case err := <-errc:
		log.Error("listener failed", "err", err)
	}
	log.Info("shutting down: finishing in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if admin != nil {
		admin.Shutdown(sctx)
	}
	if cerr := st.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return errors.E(op, err)
	}
	log.Info("stopped cleanly")
	return nil
}
