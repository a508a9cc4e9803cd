// Package console is the web console every node serves on its admin listener (under
// /console/): a small static application embedded in the binary (ui/: HTML, CSS and
// JavaScript, no external resources) and the JSON endpoints it calls. It shows what the
// admin status computes and offers the node actions and the recovery rate the admin API
// already has, through functions the server gives it (Config): it computes nothing of its
// own and imports nothing of the cluster.
//
// Security: an operator logs in with the cluster secret, or with an access key of the root
// user and its secret key (Config.Key);
// a session is a random 256-bit id in an HttpOnly, SameSite=Strict cookie (Secure on a TLS
// listener) that names an entry of a server-side table with an idle and an absolute
// expiry; every action (and logout) must carry the session's CSRF token in a header;
// failed logins are limited per client address and in all; every answer carries a
// Content-Security-Policy of default-src 'self', X-Frame-Options DENY and no-store.
//
// It is not a user store or an identity provider, and its sessions are per node: a
// session opened on one node does not log in on another.
package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	stderrors "errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

//go:embed ui
var uiFiles embed.FS

// Prefix is the path under which the console is served.
const Prefix = "/console/"

// Config configures a console. Data, Password and Node are required.
type Config struct {
	// Password is what an operator logs in with (the cluster secret).
	Password string
	// Key, if set, checks an access key and secret key pair: an operator may log in
	// with a key of a user allowed to administer the cluster (the root user). It
	// returns the user's name.
	Key func(accessKey, secretKey string) (user string, ok bool)
	// Data returns what the page shows, encoded as JSON as it is (the admin status).
	Data func(ctx context.Context) any
	// Node applies action (drain, out or up) to node id, as the admin API does.
	Node func(ctx context.Context, id, action string) error
	// RecoveryRate sets every storage node's recovery rate (bytes per second, 0:
	// unlimited), as the admin API does; nil: the page offers no such action.
	RecoveryRate func(ctx context.Context, bytesPerSec int64) error
	// TLS says the listener serves HTTPS: the session cookie is then Secure.
	TLS bool
	// IdleTimeout ends a session unused that long (default 30 minutes); MaxAge ends
	// any session that old (default 12 hours).
	IdleTimeout, MaxAge time.Duration
	// MaxSessions bounds the session table (default 256): a login beyond it ends the
	// session used least recently.
	MaxSessions int
	// FailLimit failed logins from one address within FailWindow refuse its further
	// attempts until the window ends (default 5 per minute); 10 times FailLimit in all
	// refuse everyone's.
	FailLimit  int
	FailWindow time.Duration
	// Logger receives logins, refusals and actions (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time
}

// Validate reports whether the configuration is usable.
func (c *Config) Validate() error {
	if c.Password == "" || c.Data == nil || c.Node == nil {
		return errors.E(errors.Op("console.New"), errors.Invalid, "a console needs a password, a data source and node actions")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Minute
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 12 * time.Hour
	}
	if c.MaxSessions <= 0 {
		c.MaxSessions = 256
	}
	if c.FailLimit <= 0 {
		c.FailLimit = 5
	}
	if c.FailWindow <= 0 {
		c.FailWindow = time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// CookieName is the session cookie's name.
const CookieName = "cairn_console"

// CSRFHeader carries the session's CSRF token on every action.
const CSRFHeader = "X-CSRF-Token"

// Console is the console's HTTP handler; mount it at Prefix.
type Console struct {
	cfg    Config
	log    *slog.Logger
	static http.Handler
	pw     [32]byte // SHA-256 of the password: compared in constant time with a hash of the same length

	mu       sync.Mutex
	sessions map[[32]byte]*session // by SHA-256 of the session id
	fails    map[string]*failures  // by client address
	allFails failures
}

type session struct {
	csrf    string
	created time.Time
	used    time.Time
}

type failures struct {
	since time.Time
	n     int
}

// New returns a console.
func New(cfg Config) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		return nil, errors.E(errors.Op("console.New"), err)
	}
	return &Console{cfg: cfg, log: cfg.Logger.With("component", "console"), static: http.FileServerFS(sub),
		pw: sha256.Sum256([]byte(cfg.Password)), sessions: map[[32]byte]*session{}, fails: map[string]*failures{}}, nil
}

// ServeHTTP serves the page, its files and the API under Prefix.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	path := strings.TrimPrefix(r.URL.Path, Prefix)
	if api, ok := strings.CutPrefix(path, "api/"); ok {
		if err := c.api(w, r, api); err != nil {
			writeError(w, err)
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + path
	c.static.ServeHTTP(w, r2)
}

// httpError is an error with the status the API answers it with.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func fail(status int, msg string) error { return &httpError{status, msg} }

// writeError answers err as {"error": message} with its status: an httpError's, or the
// one its kind maps to (errors of the admin code paths).
func writeError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	switch {
	case stderrors.As(err, &he):
		status = he.status
	case errors.Is(errors.Invalid, err):
		status = http.StatusBadRequest
	case errors.Is(errors.NotExist, err):
		status = http.StatusNotFound
	case errors.Is(errors.Precondition, err):
		status = http.StatusConflict
	case errors.Is(errors.Transient, err):
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// api serves the JSON endpoints: login (POST, password), session (GET: the CSRF token of
// the session), data (GET), and the actions logout, node (id, action) and recovery (rate).
func (c *Console) api(w http.ResponseWriter, r *http.Request, name string) error {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if r.Method == http.MethodPost {
		if err := sameOrigin(r); err != nil {
			return err
		}
	}
	if name == "login" {
		return c.login(w, r)
	}
	id, s := c.session(r)
	if s == nil {
		return fail(http.StatusUnauthorized, "not logged in")
	}
	switch {
	case name == "session" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"csrf": s.csrf})
		return nil
	case name == "data" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]any{"now": c.cfg.Now().UTC(), "status": c.cfg.Data(r.Context())})
		return nil
	case r.Method != http.MethodPost:
		return fail(http.StatusMethodNotAllowed, "method not allowed")
	}
	// Every action carries the session's CSRF token.
	if tok := r.Header.Get(CSRFHeader); tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(s.csrf)) != 1 {
		c.log.Warn("refused a console action without its session's CSRF token", "remote", r.RemoteAddr, "action", name)
		return fail(http.StatusForbidden, "missing or wrong CSRF token")
	}
	switch name {
	case "logout":
		c.mu.Lock()
		delete(c.sessions, id)
		c.mu.Unlock()
		http.SetCookie(w, c.cookie("", -1))
		writeJSON(w, http.StatusOK, map[string]string{})
		return nil
	case "node":
		node, action := r.FormValue("id"), r.FormValue("action")
		switch action {
		case "drain", "out", "up":
		default:
			return fail(http.StatusBadRequest, "unknown node action "+strconv.Quote(action)+" (want drain, out or up)")
		}
		c.log.Info("console action", "remote", r.RemoteAddr, "action", action, "node", node)
		if err := c.cfg.Node(r.Context(), node, action); err != nil {
			return err
		}
	case "recovery":
		if c.cfg.RecoveryRate == nil {
			return fail(http.StatusNotFound, "no such action")
		}
		rate, err := strconv.ParseInt(r.FormValue("rate"), 10, 64)
		if err != nil || rate < 0 {
			return fail(http.StatusBadRequest, "bad rate "+strconv.Quote(r.FormValue("rate"))+": want bytes per second, 0 for unlimited")
		}
		c.log.Info("console action", "remote", r.RemoteAddr, "action", "recovery rate", "bytes_per_sec", rate)
		if err := c.cfg.RecoveryRate(r.Context(), rate); err != nil {
			return err
		}
	default:
		return fail(http.StatusNotFound, "no such action")
	}
	writeJSON(w, http.StatusOK, map[string]string{"result": "done"})
	return nil
}

// sameOrigin refuses a POST that a browser says comes from another site or origin (the
// CSRF token is the defence; this is a second one that costs nothing).
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fail(http.StatusForbidden, "cross-site request refused")
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return fail(http.StatusForbidden, "cross-origin request refused")
		}
	}
	return nil
}

// login checks the password and opens a session: the cookie, and the CSRF token in the
// answer. Failed attempts are counted per client address and in all.
func (c *Console) login(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		return fail(http.StatusMethodNotAllowed, "method not allowed")
	}
	addr := clientAddr(r)
	now := c.cfg.Now()
	if wait := c.limited(addr, now); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+1)))
		return fail(http.StatusTooManyRequests, "too many failed logins: try again later")
	}
	who := "cluster secret"
	if ak := r.FormValue("access_key"); ak != "" && c.cfg.Key != nil {
		user, ok := c.cfg.Key(ak, r.FormValue("password"))
		if !ok {
			c.failed(addr, now)
			c.log.Warn("console login refused: wrong key, or not a key of the root user", "remote", r.RemoteAddr, "access_key", ak)
			return fail(http.StatusUnauthorized, "wrong access key or secret key (only the root user's keys log in)")
		}
		who = "user " + user + " (key " + ak + ")"
	} else {
		got := sha256.Sum256([]byte(r.FormValue("password")))
		if subtle.ConstantTimeCompare(got[:], c.pw[:]) != 1 {
			c.failed(addr, now)
			c.log.Warn("console login refused: wrong password", "remote", r.RemoteAddr)
			return fail(http.StatusUnauthorized, "wrong password")
		}
	}
	var raw [32]byte
	rand.Read(raw[:])
	id := base64.RawURLEncoding.EncodeToString(raw[:])
	csrf := newToken()
	c.mu.Lock()
	c.sweep(now)
	if len(c.sessions) >= c.cfg.MaxSessions {
		var oldest [32]byte
		var at time.Time
		for k, s := range c.sessions {
			if at.IsZero() || s.used.Before(at) {
				oldest, at = k, s.used
			}
		}
		delete(c.sessions, oldest)
	}
	c.sessions[sha256.Sum256([]byte(id))] = &session{csrf: csrf, created: now, used: now}
	delete(c.fails, addr)
	c.mu.Unlock()
	c.log.Info("console login", "remote", r.RemoteAddr, "as", who)
	http.SetCookie(w, c.cookie(id, int(c.cfg.MaxAge.Seconds())))
	writeJSON(w, http.StatusOK, map[string]string{"csrf": csrf})
	return nil
}

func newToken() string {
	var b [32]byte
	rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (c *Console) cookie(value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true, Secure: c.cfg.TLS, SameSite: http.SameSiteStrictMode}
}

// session returns the request's live session and its key (nil if none), and marks it used.
func (c *Console) session(r *http.Request) ([32]byte, *session) {
	ck, err := r.Cookie(CookieName)
	if err != nil || ck.Value == "" {
		return [32]byte{}, nil
	}
	// The table is keyed by a hash of the id: a lookup's timing says nothing of the ids.
	key := sha256.Sum256([]byte(ck.Value))
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[key]
	if s == nil {
		return key, nil
	}
	if c.expired(s, now) {
		delete(c.sessions, key)
		return key, nil
	}
	s.used = now
	return key, s
}

func (c *Console) expired(s *session, now time.Time) bool {
	return now.Sub(s.used) > c.cfg.IdleTimeout || now.Sub(s.created) > c.cfg.MaxAge
}

// sweep drops expired sessions and old failure counts; c.mu is held.
func (c *Console) sweep(now time.Time) {
	for k, s := range c.sessions {
		if c.expired(s, now) {
			delete(c.sessions, k)
		}
	}
	for a, f := range c.fails {
		if now.Sub(f.since) > c.cfg.FailWindow {
			delete(c.fails, a)
		}
	}
}

// limited returns how long addr must wait before its next attempt (0: it may try now).
func (c *Console) limited(addr string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var wait time.Duration
	for _, f := range []*failures{c.fails[addr], &c.allFails} {
		if f == nil || now.Sub(f.since) > c.cfg.FailWindow {
			continue
		}
		limit := c.cfg.FailLimit
		if f == &c.allFails {
			limit *= 10
		}
		if f.n >= limit {
			wait = max(wait, c.cfg.FailWindow-now.Sub(f.since))
		}
	}
	return wait
}

// failed counts a failed login from addr.
func (c *Console) failed(addr string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.fails) > 10000 {
		c.sweep(now)
	}
	f := c.fails[addr]
	if f == nil {
		f = &failures{}
		c.fails[addr] = f
	}
	for _, f := range []*failures{f, &c.allFails} {
		if now.Sub(f.since) > c.cfg.FailWindow {
			f.since, f.n = now, 0
		}
		f.n++
	}
}

// clientAddr is the request's client IP address (without the port).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
