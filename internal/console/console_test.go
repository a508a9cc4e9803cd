package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

const testPassword = "the-cluster-secret-0123456789"

// fixture is a console behind a test server, with a clock the test moves and the actions
// it was asked for.
type fixture struct {
	srv     *httptest.Server
	mu      sync.Mutex
	now     time.Time
	actions []string
}

func newFixture(t *testing.T, tls bool) *fixture {
	f := &fixture{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	c, err := New(Config{Password: testPassword, TLS: tls,
		Data: func(context.Context) any { return map[string]int{"epoch": 7} },
		Node: func(_ context.Context, id, action string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.actions = append(f.actions, action+" "+id)
			return nil
		},
		RecoveryRate: func(_ context.Context, rate int64) error { return nil },
		Key:          func(ak, sk string) (string, bool) { return "root", ak == "ROOTKEY" && sk == "root-secret" },
		Now: func() time.Time {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.now
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(c)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// do sends a request with the cookie (if any) and the CSRF token (if any).
func (f *fixture) do(t *testing.T, method, path string, form url.Values, cookie *http.Cookie, csrf string) *http.Response {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, f.srv.URL+Prefix+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if csrf != "" {
		req.Header.Set(CSRFHeader, csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (f *fixture) login(t *testing.T, password string) (*http.Response, *http.Cookie, string) {
	t.Helper()
	resp := f.do(t, "POST", "api/login", url.Values{"password": {password}}, nil, "")
	var ans struct{ CSRF string }
	json.NewDecoder(resp.Body).Decode(&ans)
	for _, c := range resp.Cookies() {
		if c.Name == CookieName {
			return resp, c, ans.CSRF
		}
	}
	return resp, nil, ans.CSRF
}

func TestLoginSessionCSRF(t *testing.T) {
	f := newFixture(t, false)
	if resp, ck, _ := f.login(t, "wrong"); resp.StatusCode != 401 || ck != nil {
		t.Fatalf("wrong password: %d, cookie %v", resp.StatusCode, ck)
	}
	if resp := f.do(t, "GET", "api/data", nil, nil, ""); resp.StatusCode != 401 {
		t.Fatalf("data without a session: %d", resp.StatusCode)
	}
	resp, ck, csrf := f.login(t, testPassword)
	if resp.StatusCode != 200 || ck == nil || len(csrf) < 40 {
		t.Fatalf("login: %d, cookie %v, csrf %q", resp.StatusCode, ck, csrf)
	}
	set := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/console/"} {
		if !strings.Contains(set, want) {
			t.Errorf("cookie %q lacks %s", set, want)
		}
	}
	if strings.Contains(set, "Secure") {
		t.Errorf("cookie %q is Secure on a plain HTTP listener", set)
	}
	if len(ck.Value) != 43 { // 256 bits, base64url without padding
		t.Errorf("session id %q: want 43 characters", ck.Value)
	}
	resp = f.do(t, "GET", "api/data", nil, ck, "")
	if resp.StatusCode != 200 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("data: %d, Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
	for _, tc := range []struct {
		name, csrf string
		cookie     *http.Cookie
		want       int
	}{
		{"no token", "", ck, 403},
		{"wrong token", csrf[:len(csrf)-1] + "x", ck, 403},
		{"no session", csrf, nil, 401},
		{"token and session", csrf, ck, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.do(t, "POST", "api/node", url.Values{"id": {"n1"}, "action": {"drain"}}, tc.cookie, tc.csrf)
			if resp.StatusCode != tc.want {
				t.Fatalf("drain: %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	if len(f.actions) != 1 || f.actions[0] != "drain n1" {
		t.Fatalf("actions done: %q, want only the one with its token", f.actions)
	}
	if resp := f.do(t, "POST", "api/node", url.Values{"id": {"n1"}, "action": {"remove"}}, ck, csrf); resp.StatusCode != 400 {
		t.Fatalf("an action the console does not offer: %d", resp.StatusCode)
	}
	// A request from another origin is refused even with the token.
	req, _ := http.NewRequest("POST", f.srv.URL+Prefix+"api/recovery", strings.NewReader("rate=0"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set(CSRFHeader, csrf)
	req.AddCookie(ck)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Fatalf("cross-origin action: %v %v", resp, err)
	}
	// Idle sessions end; logout ends a session.
	f.advance(31 * time.Minute)
	if resp := f.do(t, "GET", "api/session", nil, ck, ""); resp.StatusCode != 401 {
		t.Fatalf("idle session: %d", resp.StatusCode)
	}
	_, ck, csrf = f.login(t, testPassword)
	if resp := f.do(t, "POST", "api/logout", nil, ck, csrf); resp.StatusCode != 200 {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp := f.do(t, "GET", "api/data", nil, ck, ""); resp.StatusCode != 401 {
		t.Fatalf("data after logout: %d", resp.StatusCode)
	}
}

func TestLoginRateLimit(t *testing.T) {
	f := newFixture(t, true)
	for i := 0; i < 5; i++ {
		if resp, _, _ := f.login(t, "guess"); resp.StatusCode != 401 {
			t.Fatalf("attempt %d: %d", i, resp.StatusCode)
		}
	}
	resp, _, _ := f.login(t, testPassword)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after 5 failures: %d (Retry-After %q), want 429 even with the right password", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	f.advance(61 * time.Second)
	resp, ck, _ := f.login(t, testPassword)
	if resp.StatusCode != 200 || ck == nil || !ck.Secure {
		t.Fatalf("after the window: %d, cookie %+v (want Secure on a TLS listener)", resp.StatusCode, ck)
	}
}

func TestHeaders(t *testing.T) {
	f := newFixture(t, false)
	for _, path := range []string{"", "app.js", "style.css", "api/data"} {
		resp := f.do(t, "GET", path, nil, nil, "")
		h := resp.Header
		if !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") || h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: headers %v", path, h)
		}
		if path != "api/data" && resp.StatusCode != 200 {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	if resp := f.do(t, "GET", "nothing.js", nil, nil, ""); resp.StatusCode != 404 {
		t.Errorf("missing file: %d", resp.StatusCode)
	}
}

// A root user's key logs in instead of the cluster secret; a wrong secret, or the
// cluster secret given with an access key, does not.
func TestLoginWithKey(t *testing.T) {
	f := newFixture(t, false)
	for _, tc := range []struct {
		ak, pw string
		want   int
	}{
		{"ROOTKEY", "root-secret", 200},
		{"ROOTKEY", "wrong", 401},
		{"ROOTKEY", testPassword, 401},
		{"OTHERKEY", "root-secret", 401},
		{"", testPassword, 200},
	} {
		resp := f.do(t, "POST", "api/login", url.Values{"access_key": {tc.ak}, "password": {tc.pw}}, nil, "")
		if resp.StatusCode != tc.want {
			t.Errorf("login %q/%q: %d, want %d", tc.ak, tc.pw, resp.StatusCode, tc.want)
		}
	}
}
