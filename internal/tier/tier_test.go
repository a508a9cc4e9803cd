package tier

import (
	"bytes"
	"context"
	"crypto/md5"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// startTier starts an S3 server on loopback with bucket "arch" and returns its URL.
func startTier(t *testing.T) string {
	t.Helper()
	srv := testutil.StartServer(t, store.Config{}, nil)
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/arch", nil)
	sigv4.SignRequest(req, testutil.AccessKey, testutil.SecretKey, "us-east-1", "", time.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create bucket: %s", resp.Status)
	}
	return srv.URL
}

func newClient(t *testing.T, endpoint, bucket, secret string) *Client {
	t.Helper()
	c, err := New(Config{Endpoint: endpoint, Bucket: bucket, AccessKey: testutil.AccessKey, SecretKey: secret, HeaderTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClient(t *testing.T) {
	url := startTier(t)
	ctx := context.Background()
	c := newClient(t, url, "arch", testutil.SecretKey)
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("probe: %v", err)
	}
	body := bytes.Repeat([]byte("tier"), 3000)
	sum := md5.Sum(body)
	etag, err := c.Put(ctx, "b/k 1", bytes.NewReader(body), int64(len(body)), sum[:])
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	rc, n, err := c.Get(ctx, "b/k 1")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || n != int64(len(body)) || !bytes.Equal(got, body) {
		t.Fatalf("get: %d bytes (size %d), err %v; want the %d bytes put (etag %s)", len(got), n, err, len(body), etag)
	}
	rc, err = c.GetRange(ctx, "b/k 1", 5, 7)
	if err != nil {
		t.Fatalf("get range: %v", err)
	}
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, body[5:12]) {
		t.Fatalf("get range: %q, %v; want %q", got, err, body[5:12])
	}
	// A body that does not match its MD5 is refused by the endpoint.
	bad := md5.Sum([]byte("other"))
	if _, err := c.Put(ctx, "bad", bytes.NewReader(body), int64(len(body)), bad[:]); err == nil {
		t.Fatal("put with a wrong Content-MD5 accepted")
	}
	if _, _, err := c.Get(ctx, "bad"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("get of the refused put: %v, want NotExist", err)
	}
	if empty, err := c.Empty(ctx); err != nil || empty {
		t.Fatalf("empty with an object: %v, %v", empty, err)
	}
	if err := c.Delete(ctx, "b/k 1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if empty, err := c.Empty(ctx); err != nil || !empty {
		t.Fatalf("empty without objects: %v, %v", empty, err)
	}
	if err := c.Delete(ctx, "b/k 1"); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	if _, _, err := c.Get(ctx, "b/k 1"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("get after delete: %v, want NotExist", err)
	}
}

func TestProbeErrors(t *testing.T) {
	url := startTier(t)
	ctx := context.Background()
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	// A listener that accepts connections and never answers.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mute.Close() })
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	for _, tc := range []struct {
		name                  string
		endpoint, bucket, key string
		kind                  errors.Kind
	}{
		{"no bucket", url, "nosuch", testutil.SecretKey, errors.NotExist},
		{"wrong secret", url, "arch", "wrong-secret-key-0123456789abcdefghijkl", errors.Permission},
		{"nothing listens", closed, "arch", testutil.SecretKey, errors.Transient},
		{"never answers", "http://" + mute.Addr().String(), "arch", testutil.SecretKey, errors.Transient},
	} {
		c, err := New(Config{Endpoint: tc.endpoint, Bucket: tc.bucket, AccessKey: testutil.AccessKey, SecretKey: tc.key, HeaderTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Probe(ctx); !errors.Is(tc.kind, err) {
			t.Errorf("%s: probe: %v, want kind %v", tc.name, err, tc.kind)
		} else {
			t.Logf("%s: %v", tc.name, err)
		}
	}
	for _, cfg := range []Config{
		{Endpoint: "127.0.0.1:9000", Bucket: "b", AccessKey: "a", SecretKey: "s"},
		{Endpoint: "http://127.0.0.1:9000/path", Bucket: "b", AccessKey: "a", SecretKey: "s"},
		{Endpoint: "http://127.0.0.1:9000", AccessKey: "a", SecretKey: "s"},
		{Endpoint: "http://127.0.0.1:9000", Bucket: "b", AccessKey: "a"},
	} {
		if _, err := New(cfg); !errors.Is(errors.Invalid, err) {
			t.Errorf("New(%+v): %v, want Invalid", cfg, err)
		}
	}
}
