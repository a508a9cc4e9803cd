package replica_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
)

const (
	upload1       = "0123456789abcdef0123456789abcdef"
	upload2       = "fedcba9876543210fedcba9876543210"
	clusterSecret = "node-test-cluster-secret-0123456789"
	wrongSecret   = "node-test-wrong-secret-abcdefghijk"
	bucket        = "photos"
	otherBucket   = "private"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newSecret(tb testing.TB, s string) *rpc.Secret {
	tb.Helper()
	sec, err := rpc.NewSecret(s)
	if err != nil {
		tb.Fatal(err)
	}
	return sec
}

// env is one storage node serving replica.Handler on a loopback socket behind the internode
// signature check, as the server wires it.
type env struct {
	st     *store.Store
	secret *rpc.Secret
	srv    *httptest.Server
	addr   string
	hc     *http.Client
	client *rpc.Client // signs with the cluster secret
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := store.Open(store.Config{
		Dir:         t.TempDir(),
		InlineMax:   16 << 10,
		ChunkSize:   64 << 10,
		SegmentSize: 1 << 20,
		Reserve:     1,
		Logger:      discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, b := range []string{bucket, otherBucket} {
		if err := st.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	secret := newSecret(t, clusterSecret)
	h := replica.NewHandler(replica.HandlerConfig{Local: &replica.Local{Node: "n1", Store: st, EnsureBucket: func(string) error { return nil }}, Secret: secret, Logger: discard()})
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := secret.Authenticate(w, r)
		if !ok {
			return
		}
		h.ServeHTTP(w, r)
		rpc.EndResponse(w)
	})
	srv := httptest.NewServer(auth)
	tr := rpc.NewTransport()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	e := &env{st: st, secret: secret, srv: srv, addr: srv.Listener.Addr().String(), hc: &http.Client{Transport: tr}}
	e.client = e.newClient(secret)
	return e
}

func (e *env) newClient(s *rpc.Secret) *rpc.Client {
	return &rpc.Client{Secret: s, Node: "gw", HTTP: e.hc, Epoch: func() uint64 { return 1 }}
}

func etagOf(b []byte) string {
	s := md5.Sum(b)
	return `"` + hex.EncodeToString(s[:]) + `"`
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func objQuery(b, k string, kv ...string) url.Values {
	q := url.Values{"b": {b}, "k": {k}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return q
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

// versions returns n increasing HLC versions from now.
func versions(n int) []uint64 {
	base := hlc.FromTime(time.Now())
	vs := make([]uint64, n)
	for i := range vs {
		vs[i] = base + uint64(i+1)<<hlc.LogicalBits
	}
	return vs
}

func finalMeta(data []byte) *object.Object {
	return &object.Object{Size: int64(len(data)), ETag: etagOf(data), ChecksumAlgo: "CRC32C", Checksum: "AAAAAA==", ChecksumType: "FULL_OBJECT"}
}

// put writes data as b/k at version v with the final metadata in a header.
func (e *env) put(c *rpc.Client, b, k string, v uint64, meta *object.Object, data []byte) (*object.Object, error) {
	hdr := http.Header{}
	hdr.Set(wire.HdrMeta, wire.EncodeMeta(meta))
	hdr.Set(wire.HdrFinal, wire.EncodeMeta(finalMeta(data)))
	resp, err := c.Do(context.Background(), &rpc.Request{Method: http.MethodPut, Addr: e.addr, Path: wire.PathObject,
		Query: objQuery(b, k, "v", u64(v), "mod", "1700000000000000000"), Header: hdr,
		Body: bytes.NewReader(data), Size: int64(len(data)), Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: b, Key: k}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
}

// trailerReader calls fill just before it returns EOF, as Remote.Put does: this test builds
// raw requests to reach the handler with what a gateway would never send.
type trailerReader struct {
	r    io.Reader
	fill func()
	done bool
}

func (t *trailerReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF && !t.done {
		t.done = true
		t.fill()
	}
	return n, err
}

// putStreamed writes data with an unknown length; the final metadata goes in a trailer
// unless abandon is set, in which case the trailer is declared but never filled.
func (e *env) putStreamed(c *rpc.Client, b, k string, v uint64, meta *object.Object, data []byte, final *object.Object) (*object.Object, error) {
	tr := http.Header{wire.HdrFinal: nil}
	hdr := http.Header{}
	hdr.Set(wire.HdrMeta, wire.EncodeMeta(meta))
	body := &trailerReader{r: io.MultiReader(bytes.NewReader(data[:len(data)/2]), bytes.NewReader(data[len(data)/2:])), fill: func() {
		if final != nil {
			tr.Set(wire.HdrFinal, wire.EncodeMeta(final))
		}
	}}
	resp, err := c.Do(context.Background(), &rpc.Request{Method: http.MethodPut, Addr: e.addr, Path: wire.PathObject,
		Query: objQuery(b, k, "v", u64(v)), Header: hdr, Body: body, Size: -1, Trailer: tr,
		Cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: b, Key: k}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
}

func (e *env) head(c *rpc.Client, b, k string) (*object.Object, http.Header, error) {
	resp, err := c.Do(context.Background(), &rpc.Request{Method: http.MethodHead, Addr: e.addr, Path: wire.PathObject,
		Query: objQuery(b, k), Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: b, Key: k}})
	if err != nil {
		return nil, nil, err
	}
	resp.Body.Close()
	o, err := wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
	return o, resp.Header, err
}

func (e *env) get(c *rpc.Client, b, k string, kv ...string) ([]byte, *object.Object, http.Header, error) {
	resp, err := c.Do(context.Background(), &rpc.Request{Method: http.MethodGet, Addr: e.addr, Path: wire.PathObject,
		Query: objQuery(b, k, kv...), Cap: &rpc.Cap{Op: rpc.CapRead, Bucket: b, Key: k}})
	if err != nil {
		return nil, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, nil, errors.E(errors.IO, err)
	}
	o, err := wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
	return data, o, resp.Header, err
}

func (e *env) del(c *rpc.Client, b, k string, v uint64) (*object.Object, error) {
	resp, err := c.Do(context.Background(), &rpc.Request{Method: http.MethodDelete, Addr: e.addr, Path: wire.PathObject,
		Query: objQuery(b, k, "v", u64(v), "mod", "1700000000000000001"), Cap: &rpc.Cap{Op: rpc.CapDelete, Bucket: b, Key: k}})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return wire.DecodeMeta(resp.Header.Get(wire.HdrMeta))
}

func (e *env) list(c *rpc.Client, b, prefix string) (*object.ListResult, error) {
	var res wire.ListAnswer
	err := c.DoJSON(context.Background(), &rpc.Request{Method: http.MethodGet, Addr: e.addr, Path: wire.PathList,
		Query: url.Values{wire.QBucket: {b}, wire.QPrefix: {prefix}, wire.QMax: {"1000"}}, Cap: &rpc.Cap{Op: rpc.CapList, Bucket: b, Key: prefix}}, &res)
	if err != nil {
		return nil, err
	}
	return res.Result(), nil
}

// readStore reads b/k from the store directly.
func readStore(t *testing.T, st *store.Store, b, k string) []byte {
	t.Helper()
	r, err := st.OpenObject(b, k)
	if err != nil {
		t.Fatalf("store: open %s/%s: %v", b, k, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := r.WriteRange(context.Background(), &buf, 0, r.Object.Size); err != nil {
		t.Fatalf("store: read %s/%s: %v", b, k, err)
	}
	return buf.Bytes()
}

func wantKind(t *testing.T, what string, err error, k errors.Kind) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want a %v error", what, k)
	}
	if !errors.Is(k, err) {
		t.Fatalf("%s: error %v has kind %v, want %v", what, err, errors.KindOf(err), k)
	}
}

func TestPutHeadGet(t *testing.T) {
	e := newEnv(t)
	vs := versions(8)
	for i, tc := range []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"small", 100},
		{"embedded max", 8 << 10},
		{"inline", 12 << 10},
		{"chunked", 64<<10 + 1},
		{"several chunks", 3*64<<10 + 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "dir/" + strings.ReplaceAll(tc.name, " ", "-") + "?&=%+ é"
			data := randBytes(uint64(i), tc.size)
			meta := &object.Object{ContentType: "image/jpeg", CacheControl: "no-cache", UserMeta: [][2]string{{"a", "1"}, {"b", "two words"}}}
			o, err := e.put(e.client, bucket, key, vs[i], meta, data)
			if err != nil {
				t.Fatalf("put: %v", err)
			}
			if o.HLC != vs[i] || o.Size != int64(tc.size) || o.ETag != etagOf(data) || o.ContentType != "image/jpeg" || o.Deleted {
				t.Fatalf("put answered %+v", o)
			}
			if o.ModTime != 1700000000000000000 {
				t.Errorf("mod time %d, want the one in the query", o.ModTime)
			}

			h, hdr, err := e.head(e.client, bucket, key)
			if err != nil {
				t.Fatalf("head: %v", err)
			}
			if got := hdr.Get(wire.HdrVersion); got != u64(vs[i]) {
				t.Errorf("head %s = %q, want %d", wire.HdrVersion, got, vs[i])
			}
			check := func(what string, o *object.Object) {
				t.Helper()
				if o.HLC != vs[i] || o.Size != int64(tc.size) || o.ETag != etagOf(data) || o.Deleted ||
					o.ContentType != "image/jpeg" || o.CacheControl != "no-cache" || len(o.UserMeta) != 2 || o.UserMeta[1] != [2]string{"b", "two words"} ||
					o.ChecksumAlgo != "CRC32C" || o.Checksum != "AAAAAA==" || o.ChecksumType != "FULL_OBJECT" {
					t.Errorf("%s metadata %+v", what, o)
				}
				if o.Body != nil || o.Chunks != nil {
					t.Errorf("%s metadata carries the body or chunk list", what)
				}
			}
			check("head", h)

			got, g, ghdr, err := e.get(e.client, bucket, key)
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("get returned %d bytes that differ from the %d written", len(got), len(data))
			}
			check("get", g)
			if v := ghdr.Get(wire.HdrVersion); v != u64(vs[i]) {
				t.Errorf("get %s = %q, want %d", wire.HdrVersion, v, vs[i])
			}
			// The store holds the same bytes.
			if !bytes.Equal(readStore(t, e.st, bucket, key), data) {
				t.Fatal("the store holds other bytes")
			}
			if tc.size > 10 {
				off, n := tc.size/3, tc.size/2
				got, _, _, err := e.get(e.client, bucket, key, "v", u64(vs[i]), "off", strconv.Itoa(off), "n", strconv.Itoa(n))
				if err != nil {
					t.Fatalf("ranged get: %v", err)
				}
				if !bytes.Equal(got, data[off:off+n]) {
					t.Fatal("ranged get returned other bytes")
				}
			}
			// A read pinned to another version is refused.
			_, _, _, err = e.get(e.client, bucket, key, "v", u64(vs[i]+1))
			wantKind(t, "get of another version", err, errors.Precondition)
		})
	}
}

func TestGetRangeOutOfBounds(t *testing.T) {
	e := newEnv(t)
	for i, size := range []int{100, 12 << 10, 2*64<<10 + 5} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			key := "range-" + strconv.Itoa(size)
			data := randBytes(uint64(100+i), size)
			if _, err := e.put(e.client, bucket, key, versions(1)[0], &object.Object{}, data); err != nil {
				t.Fatal(err)
			}
			for _, r := range [][2]string{
				{"-1", "1"},
				{"0", "-1"},
				{strconv.Itoa(size), "1"},
				{"1", strconv.Itoa(size)},
				{strconv.Itoa(size + 1), ""},
			} {
				kv := []string{"off", r[0]}
				if r[1] != "" {
					kv = append(kv, "n", r[1])
				}
				_, _, _, err := e.get(e.client, bucket, key, kv...)
				if err == nil || !errors.Is(errors.Invalid, err) {
					t.Errorf("get off=%s n=%s: %v, want an Invalid error", r[0], r[1], err)
				}
			}
			// The node still serves the object.
			if got, _, _, err := e.get(e.client, bucket, key); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("get after bad ranges: %v", err)
			}
		})
	}
}

// TestGetRangeOverflow asks for ranges whose end, off+n, overflows int64. They must be
// refused as Invalid like any range outside the object. The requests run in a child
// process: a node that crashes on them must fail this test, not abort the whole package.
func TestGetRangeOverflow(t *testing.T) {
	if os.Getenv("CAIRN_NODE_TEST_CHILD") == "1" {
		getRangeOverflow(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestGetRangeOverflow$", "-test.count=1", "-test.v")
	// The child's temporary directories are left behind if it crashes: put them in ours.
	cmd.Env = append(os.Environ(), "CAIRN_NODE_TEST_CHILD=1", "TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		// Keep the test's errors and where the node panicked, once each.
		var keep []string
		seen := map[string]bool{}
		for _, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			if i := strings.Index(l, "http: panic serving"); i >= 0 {
				l = l[i:]
				if j := strings.Index(l, ": runtime error"); j >= 0 {
					l = "http: panic serving a request" + l[j:]
				}
			} else if j := strings.Index(l, " +0x"); j >= 0 && strings.Contains(l, "/internal/store/") {
				l = "at " + l[:j]
			} else if !strings.HasPrefix(l, "panic: ") && !strings.Contains(l, "want an Invalid error") {
				continue
			}
			if !seen[l] {
				seen[l] = true
				keep = append(keep, l)
			}
		}
		t.Errorf("ranges with an overflowing end: %v; the child test process reported:\n%s", err, strings.Join(keep, "\n"))
	}
}

func getRangeOverflow(t *testing.T) {
	e := newEnv(t)
	for i, size := range []int{100, 12 << 10, 2*64<<10 + 5} {
		key := "overflow-" + strconv.Itoa(size)
		data := randBytes(uint64(200+i), size)
		if _, err := e.put(e.client, bucket, key, versions(1)[0], &object.Object{}, data); err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int64{{1, math.MaxInt64}, {math.MaxInt64, 1}, {math.MaxInt64 / 2, math.MaxInt64/2 + 2}} {
			_, _, _, err := e.get(e.client, bucket, key, "off", strconv.FormatInt(r[0], 10), "n", strconv.FormatInt(r[1], 10))
			if err == nil || !errors.Is(errors.Invalid, err) {
				t.Errorf("%d-byte object: get off=%d n=%d: %v, want an Invalid error", size, r[0], r[1], err)
			}
		}
	}
}

func TestPutStreamedWithTrailer(t *testing.T) {
	e := newEnv(t)
	vs := versions(4)
	for i, size := range []int{0, 1, 12 << 10, 3*64<<10 + 5} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			key := "streamed-" + strconv.Itoa(size)
			data := randBytes(uint64(10+i), size)
			o, err := e.putStreamed(e.client, bucket, key, vs[i], &object.Object{ContentType: "text/plain"}, data, finalMeta(data))
			if err != nil {
				t.Fatalf("streamed put: %v", err)
			}
			if o.HLC != vs[i] || o.Size != int64(size) || o.ETag != etagOf(data) || o.Checksum != "AAAAAA==" {
				t.Fatalf("streamed put answered %+v", o)
			}
			got, g, _, err := e.get(e.client, bucket, key)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) || g.ETag != etagOf(data) || g.ContentType != "text/plain" {
				t.Fatalf("get after streamed put: %d bytes, %+v", len(got), g)
			}
		})
	}
}

func TestAbandonedWriteStoresNothing(t *testing.T) {
	e := newEnv(t)
	vs := versions(3)
	for i, size := range []int{0, 100, 12 << 10, 2*64<<10 + 1} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			key := "abandoned-" + strconv.Itoa(size)
			data := randBytes(uint64(20+i), size)
			_, err := e.putStreamed(e.client, bucket, key, vs[0], &object.Object{}, data, nil)
			wantKind(t, "abandoned put", err, errors.Invalid)
			_, _, err = e.head(e.client, bucket, key)
			wantKind(t, "head after abandoned put", err, errors.NotExist)
			if !errors.IsErr(err, object.ErrNoSuchKey) {
				t.Errorf("head error %v is not NoSuchKey", err)
			}
			if _, err := e.st.StatVersion(bucket, key); !errors.Is(errors.NotExist, err) {
				t.Fatalf("store: %v, want NotExist", err)
			}

			// Over an existing object, an abandoned write leaves it as it was.
			old := randBytes(uint64(30+i), 50)
			if _, err := e.put(e.client, bucket, key, vs[1], &object.Object{}, old); err != nil {
				t.Fatal(err)
			}
			_, err = e.putStreamed(e.client, bucket, key, vs[2], &object.Object{}, data, nil)
			wantKind(t, "abandoned overwrite", err, errors.Invalid)
			if o, err := e.st.StatVersion(bucket, key); err != nil || o.HLC != vs[1] {
				t.Fatalf("store after abandoned overwrite: %+v, %v", o, err)
			}
			if !bytes.Equal(readStore(t, e.st, bucket, key), old) {
				t.Fatal("abandoned overwrite changed the object")
			}
		})
	}
	// A final size that disagrees with the body is refused too.
	data := randBytes(40, 1000)
	bad := finalMeta(data)
	bad.Size++
	_, err := e.putStreamed(e.client, bucket, "short", vs[0], &object.Object{}, data, bad)
	wantKind(t, "put with a final size that disagrees", err, errors.Invalid)
	if _, err := e.st.StatVersion(bucket, "short"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("store: %v, want NotExist", err)
	}
}

// TestPutMetadataFromRecord writes with metadata taken from a stored record (as a gateway
// copying a replica does): the storage layout fields of the record it came from must not
// leak into the new one.
func TestPutMetadataFromRecord(t *testing.T) {
	e := newEnv(t)
	vs := versions(4)
	small := randBytes(50, 10)
	if _, err := e.put(e.client, bucket, "small", vs[0], &object.Object{ContentType: "a/b"}, small); err != nil {
		t.Fatal(err)
	}
	rec, _, err := e.head(e.client, bucket, "small")
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{12 << 10, 2*64<<10 + 3} {
		key := "from-record-" + strconv.Itoa(size)
		data := randBytes(uint64(51+i), size)
		m := *rec
		if _, err := e.put(e.client, bucket, key, vs[1+i], &m, data); err != nil {
			t.Fatalf("put %d bytes with the metadata of a %d-byte record: %v", size, len(small), err)
		}
		got, _, _, err := e.get(e.client, bucket, key)
		if err != nil {
			t.Errorf("get %d bytes written with the metadata of a %d-byte record (%s: %+v): %v", size, len(small), wire.HdrMeta, wire.EncodeMeta(rec), err)
			continue
		}
		if !bytes.Equal(got, data) {
			t.Errorf("get %d bytes written with the metadata of a small record: got %d other bytes", size, len(got))
		}
	}
	// Whatever happened, the keys can still be overwritten with clean metadata.
	for i, size := range []int{12 << 10, 2*64<<10 + 3} {
		key := "from-record-" + strconv.Itoa(size)
		data := randBytes(uint64(61+i), 100)
		if _, err := e.put(e.client, bucket, key, vs[3], &object.Object{}, data); err != nil {
			t.Errorf("overwrite of %s: %v", key, err)
			continue
		}
		if got, _, _, err := e.get(e.client, bucket, key); err != nil || !bytes.Equal(got, data) {
			t.Errorf("get after overwrite of %s: %v", key, err)
		}
	}
}

func TestVersionsAndTombstones(t *testing.T) {
	e := newEnv(t)
	vs := versions(6)
	newer, older := randBytes(60, 300), randBytes(61, 200)
	if _, err := e.put(e.client, bucket, "k", vs[3], &object.Object{ContentType: "new"}, newer); err != nil {
		t.Fatal(err)
	}
	// An older write arriving late does not replace the newer version; the answer is the
	// record that stays.
	o, err := e.put(e.client, bucket, "k", vs[1], &object.Object{ContentType: "old"}, older)
	if err != nil {
		t.Fatalf("late older put: %v", err)
	}
	if o.HLC != vs[3] || o.ContentType != "new" {
		t.Fatalf("late older put answered %+v, want the newer record", o)
	}
	o, err = e.putStreamed(e.client, bucket, "k", vs[2], &object.Object{ContentType: "old"}, older, finalMeta(older))
	if err != nil || o.HLC != vs[3] {
		t.Fatalf("late older streamed put: %+v, %v", o, err)
	}
	if got, g, _, err := e.get(e.client, bucket, "k"); err != nil || !bytes.Equal(got, newer) || g.HLC != vs[3] {
		t.Fatalf("get after a late older put: %v", err)
	}
	// An older delete does not remove it either.
	if o, err := e.del(e.client, bucket, "k", vs[2]); err != nil || o.HLC != vs[3] || o.Deleted {
		t.Fatalf("older delete: %+v, %v", o, err)
	}
	if !bytes.Equal(readStore(t, e.st, bucket, "k"), newer) {
		t.Fatal("older delete changed the object")
	}

	// A newer delete leaves a tombstone.
	o, err = e.del(e.client, bucket, "k", vs[4])
	if err != nil {
		t.Fatal(err)
	}
	if !o.Deleted || o.HLC != vs[4] {
		t.Fatalf("delete answered %+v", o)
	}
	h, hdr, err := e.head(e.client, bucket, "k")
	if err != nil {
		t.Fatalf("head of a tombstone: %v", err)
	}
	if !h.Deleted || h.HLC != vs[4] || hdr.Get(wire.HdrVersion) != u64(vs[4]) {
		t.Fatalf("head of a tombstone: %+v, version %q", h, hdr.Get(wire.HdrVersion))
	}
	_, _, _, err = e.get(e.client, bucket, "k")
	wantKind(t, "get of a deleted object", err, errors.NotExist)
	if !errors.IsErr(err, object.ErrNoSuchKey) {
		t.Errorf("get of a deleted object: %v is not NoSuchKey", err)
	}
	// A write older than the tombstone does not resurrect the object.
	if o, err := e.put(e.client, bucket, "k", vs[3]+1, &object.Object{}, older); err != nil || !o.Deleted {
		t.Fatalf("put older than the tombstone: %+v, %v", o, err)
	}
	// Deleting a key never written leaves a tombstone too.
	if o, err := e.del(e.client, bucket, "never", vs[0]); err != nil || !o.Deleted {
		t.Fatalf("delete of a missing key: %+v, %v", o, err)
	}
	// A newer write replaces the tombstone.
	if _, err := e.put(e.client, bucket, "k", vs[5], &object.Object{}, older); err != nil {
		t.Fatal(err)
	}
	if got, _, _, err := e.get(e.client, bucket, "k"); err != nil || !bytes.Equal(got, older) {
		t.Fatalf("get after a write over the tombstone: %v", err)
	}

	// Listings include tombstones.
	if _, err := e.put(e.client, bucket, "live", vs[0], &object.Object{}, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := e.del(e.client, bucket, "gone", vs[1]); err != nil {
		t.Fatal(err)
	}
	res, err := e.list(e.client, bucket, "")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	got := map[string]bool{}
	for _, ent := range res.Objects {
		got[ent.Key] = ent.Object.Deleted
	}
	want := map[string]bool{"k": false, "live": false, "gone": true, "never": true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("list = %v, want %v (key: deleted)", got, want)
	}
	res, err = e.list(e.client, bucket, "l")
	if err != nil || len(res.Objects) != 1 || res.Objects[0].Key != "live" {
		t.Fatalf("list with prefix: %+v, %v", res, err)
	}
	if _, err := e.list(e.client, "nobucket", ""); !errors.Is(errors.NotExist, err) || !errors.IsErr(err, object.ErrNoSuchBucket) {
		t.Fatalf("list of a missing bucket: %v", err)
	}
}

// storeState is everything the store holds in the test buckets, tombstones and upload
// records included, with the bodies' digests.
func storeState(t *testing.T, st *store.Store) string {
	t.Helper()
	var lines []string
	for _, b := range []string{bucket, otherBucket} {
		res, err := st.List(b, object.ListOptions{Max: 10000, Tombstones: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, ent := range res.Objects {
			o := ent.Object
			line := fmt.Sprintf("%s/%s hlc=%d deleted=%v size=%d etag=%s type=%s meta=%d tags=%q", b, ent.Key, o.HLC, o.Deleted, o.Size, o.ETag, o.ContentType, o.MetaHLC, o.Tags)
			if !o.Deleted {
				line += " body=" + etagOf(readStore(t, st, b, ent.Key))
			}
			lines = append(lines, line)
		}
		ups, err := st.ListUploads(b, object.UploadListOptions{Max: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ups.Uploads {
			parts, _, err := st.ListParts(b, u.Key, u.UploadID, 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			line := fmt.Sprintf("upload %s/%s id=%s parts:", b, u.Key, u.UploadID)
			for _, p := range parts {
				line += fmt.Sprintf(" %d:%d:%s", p.Number, p.Object.Size, p.Object.ETag)
			}
			lines = append(lines, line)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestRefusedRequests is the security test: requests without a valid signature, or
// without a capability for exactly their operation, bucket and key, are refused with
// Permission (HTTP 403) and change nothing.
func TestRefusedRequests(t *testing.T) {
	e := newEnv(t)
	vs := versions(3)
	victim := randBytes(70, 5000)
	if _, err := e.put(e.client, bucket, "victim", vs[0], &object.Object{ContentType: "orig"}, victim); err != nil {
		t.Fatal(err)
	}
	if _, err := e.put(e.client, otherBucket, "victim", vs[0], &object.Object{ContentType: "orig"}, victim); err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateUploadID(bucket, "victim", upload1, &object.Object{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PutPart(context.Background(), bucket, "victim", upload1, 1, bytes.NewReader(victim), int64(len(victim)), nil); err != nil {
		t.Fatal(err)
	}
	before := storeState(t, e.st)

	wrong := newSecret(t, wrongSecret)
	now := time.Now()
	capOf := func(s *rpc.Secret, op, b, k string) string { return s.MintCap(op, b, k, now, time.Minute) }
	valid := capOf(e.secret, rpc.CapWrite, bucket, "victim")
	rawValid, _ := base64.RawURLEncoding.DecodeString(valid)
	flip := func(i int) string {
		b := append([]byte(nil), rawValid...)
		b[i] ^= 0x20
		return base64.RawURLEncoding.EncodeToString(b)
	}
	random := base64.RawURLEncoding.EncodeToString(randBytes(71, len(rawValid)))

	newData := randBytes(72, 3000)
	type request struct {
		method, path string
		query        url.Values
		body         []byte
		op           string // the operation the request needs
	}
	putReq := request{http.MethodPut, wire.PathObject, objQuery(bucket, "victim", "v", u64(vs[2])), newData, rpc.CapWrite}
	putNew := request{http.MethodPut, wire.PathObject, objQuery(bucket, "newkey", "v", u64(vs[2])), newData, rpc.CapWrite}
	delReq := request{http.MethodDelete, wire.PathObject, objQuery(bucket, "victim", "v", u64(vs[2])), nil, rpc.CapDelete}
	getReq := request{http.MethodGet, wire.PathObject, objQuery(bucket, "victim"), nil, rpc.CapRead}
	headReq := request{http.MethodHead, wire.PathObject, objQuery(bucket, "victim"), nil, rpc.CapRead}
	listReq := request{http.MethodGet, wire.PathList, url.Values{"b": {bucket}, "prefix": {""}, "max": {"100"}}, nil, rpc.CapList}
	uploadReq := request{http.MethodPost, wire.PathUpload, objQuery(bucket, "victim", "id", upload2), nil, rpc.CapWrite}
	abortReq := request{http.MethodPost, wire.PathUploadEnd, objQuery(bucket, "victim", "id", upload1),
		[]byte(`{"bucket":"` + bucket + `","key":"victim","upload_id":"` + upload1 + `","state":"aborted","ended":1}`), rpc.CapDelete}
	partReq := request{http.MethodPut, wire.PathPart, objQuery(bucket, "victim", "id", upload1, "n", "1"), newData, rpc.CapWrite}
	partsReq := request{http.MethodGet, wire.PathParts, objQuery(bucket, "victim", "id", upload1), nil, rpc.CapRead}
	completeReq := request{http.MethodPost, wire.PathComplete, objQuery(bucket, "victim", "id", upload1, "v", u64(vs[2])),
		[]byte(`{"parts":[],"min_part":0,"final":{}}`), rpc.CapWrite}
	metaReq := request{http.MethodPost, wire.PathMeta, objQuery(bucket, "victim"),
		[]byte(`{"hlc":` + u64(vs[0]) + `,"meta_hlc":` + u64(vs[2]) + `,"tags":[["evil","1"]]}`), rpc.CapWrite}
	all := []request{putReq, putNew, delReq, getReq, headReq, listReq, uploadReq, abortReq, partReq, partsReq, completeReq, metaReq}

	// key is the capability's key for r: the prefix for listings.
	capKey := func(r request) string {
		if r.op == rpc.CapList {
			return r.query.Get("prefix")
		}
		return r.query.Get("k")
	}

	for _, tc := range []struct {
		name    string
		reqs    []request
		sign    *rpc.Secret // nil: unsigned
		signAt  time.Time   // zero: now
		cap     func(r request) string
		mutate  func(r *http.Request)
		useRPC  bool // send through rpc.Client with a capability for the request itself
		rpcAuth *rpc.Secret
	}{
		{name: "client with another secret", reqs: all, useRPC: true, rpcAuth: wrong},
		{name: "unsigned with a valid capability", reqs: all, cap: func(r request) string {
			return capOf(e.secret, r.op, r.query.Get("b"), capKey(r))
		}},
		{name: "signed with another secret", reqs: all, sign: wrong, cap: func(r request) string {
			return capOf(e.secret, r.op, r.query.Get("b"), capKey(r))
		}},
		{name: "stale signature", reqs: all, sign: e.secret, signAt: now.Add(-rpc.MaxSkew - time.Minute), cap: func(r request) string {
			return capOf(e.secret, r.op, r.query.Get("b"), capKey(r))
		}},
		{name: "query changed after signing", reqs: []request{putReq, delReq, getReq, metaReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, r.op, otherBucket, "victim") },
			mutate: func(r *http.Request) {
				q := r.URL.Query()
				q.Set("b", otherBucket)
				r.URL.RawQuery = q.Encode()
			}},
		{name: "no capability", reqs: all, sign: e.secret, cap: func(request) string { return "" }},
		{name: "random capability", reqs: all, sign: e.secret, cap: func(request) string { return random }},
		{name: "capability bit flipped in mac", reqs: []request{putReq}, sign: e.secret, cap: func(request) string { return flip(len(rawValid) - 3) }},
		{name: "capability bit flipped in expiry", reqs: []request{putReq}, sign: e.secret, cap: func(request) string { return flip(6) }},
		{name: "capability truncated", reqs: []request{putReq}, sign: e.secret, cap: func(request) string { return valid[:len(valid)-2] }},
		{name: "capability not base64", reqs: []request{putReq}, sign: e.secret, cap: func(request) string { return "*" + valid[1:] }},
		{name: "capability from another secret", reqs: all, sign: e.secret, cap: func(r request) string {
			return capOf(wrong, r.op, r.query.Get("b"), capKey(r))
		}},
		{name: "expired capability", reqs: all, sign: e.secret, cap: func(r request) string {
			return e.secret.MintCap(r.op, r.query.Get("b"), capKey(r), now.Add(-time.Hour), time.Minute)
		}},
		{name: "capability for another key", reqs: all, sign: e.secret, cap: func(r request) string {
			return capOf(e.secret, r.op, r.query.Get("b"), capKey(r)+"x")
		}},
		{name: "capability for another bucket", reqs: all, sign: e.secret, cap: func(r request) string {
			return capOf(e.secret, r.op, otherBucket, capKey(r))
		}},
		{name: "read capability", reqs: []request{putReq, putNew, delReq, uploadReq, abortReq, partReq, completeReq, listReq, metaReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, rpc.CapRead, r.query.Get("b"), capKey(r)) }},
		{name: "write capability", reqs: []request{delReq, abortReq, getReq, headReq, partsReq, listReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, rpc.CapWrite, r.query.Get("b"), capKey(r)) }},
		{name: "delete capability", reqs: []request{putReq, putNew, uploadReq, partReq, completeReq, getReq, headReq, partsReq, listReq, metaReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, rpc.CapDelete, r.query.Get("b"), capKey(r)) }},
		{name: "list capability", reqs: []request{putReq, delReq, getReq, headReq, partsReq, metaReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, rpc.CapList, r.query.Get("b"), capKey(r)) }},
		{name: "list capability for another prefix", reqs: []request{listReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, rpc.CapList, bucket, "victim") }},
		{name: "capability for the whole bucket", reqs: []request{putReq, delReq, getReq}, sign: e.secret,
			cap: func(r request) string { return capOf(e.secret, r.op, bucket, "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range tc.reqs {
				what := fmt.Sprintf("%s %s?%s", r.method, r.path, r.query.Encode())
				var err error
				var status int
				if tc.useRPC {
					c := e.newClient(tc.rpcAuth)
					hdr := http.Header{}
					hdr.Set(wire.HdrMeta, wire.EncodeMeta(&object.Object{ContentType: "evil"}))
					hdr.Set(wire.HdrFinal, wire.EncodeMeta(finalMeta(r.body)))
					var resp *http.Response
					resp, err = c.Do(context.Background(), &rpc.Request{Method: r.method, Addr: e.addr, Path: r.path, Query: r.query,
						Header: hdr, Body: bytes.NewReader(r.body), Size: int64(len(r.body)), Cap: &rpc.Cap{Op: r.op, Bucket: r.query.Get("b"), Key: capKey(r)}})
					if err == nil {
						resp.Body.Close()
					}
				} else {
					u := "http://" + e.addr + r.path + "?" + r.query.Encode()
					req, rerr := http.NewRequest(r.method, u, bytes.NewReader(r.body))
					if rerr != nil {
						t.Fatal(rerr)
					}
					req.Header.Set(wire.HdrMeta, wire.EncodeMeta(&object.Object{ContentType: "evil"}))
					req.Header.Set(wire.HdrFinal, wire.EncodeMeta(finalMeta(r.body)))
					if c := tc.cap(r); c != "" {
						req.Header.Set(rpc.HdrCap, c)
					}
					if tc.sign != nil {
						at := tc.signAt
						if at.IsZero() {
							at = time.Now()
						}
						tc.sign.Sign(req, "gw", 1, at)
					}
					if tc.mutate != nil {
						tc.mutate(req)
					}
					resp, derr := e.hc.Do(req)
					if derr != nil {
						t.Fatalf("%s: %v", what, derr)
					}
					status = resp.StatusCode
					if status >= 400 {
						err = wire.DecodeError(resp)
					} else {
						io.Copy(io.Discard, resp.Body)
					}
					resp.Body.Close()
					if status != http.StatusForbidden {
						t.Errorf("%s: status %d, want 403", what, status)
					}
				}
				if err == nil {
					t.Errorf("%s: accepted", what)
					continue
				}
				if !errors.Is(errors.Permission, err) {
					t.Errorf("%s: error %v has kind %v, want Permission", what, err, errors.KindOf(err))
				}
			}
			if after := storeState(t, e.st); after != before {
				t.Fatalf("the store changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}

	// The same requests with the right capability succeed (so the refusals above are the
	// capability's doing, not a malformed request's).
	t.Run("control", func(t *testing.T) {
		if _, _, err := e.head(e.client, bucket, "victim"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.put(e.client, bucket, "victim", vs[2], &object.Object{}, newData); err != nil {
			t.Fatal(err)
		}
		if got := readStore(t, e.st, bucket, "victim"); !bytes.Equal(got, newData) {
			t.Fatal("control put not stored")
		}
		if !bytes.Equal(readStore(t, e.st, otherBucket, "victim"), victim) {
			t.Fatal("the other bucket's object changed")
		}
	})
}

// Partition digests answered over the wire equal the local ones, change only in the
// partition of a record that changed (a new version or a tombstone), and are zero for
// empty partitions.
func TestDigests(t *testing.T) {
	e := newEnv(t)
	const P = 16
	vs := versions(3)
	for i := range 20 {
		if _, err := e.put(e.client, bucket, fmt.Sprint("k", i), vs[0], &object.Object{}, randBytes(uint64(i), 100)); err != nil {
			t.Fatal(err)
		}
	}
	remote := func() []uint64 {
		t.Helper()
		all := make([]int, P)
		for i := range all {
			all[i] = i
		}
		body, _ := json.Marshal(wire.ScanRequest{Partitions: P, Parts: all})
		var resp wire.DigestAnswer
		if err := e.client.DoJSON(context.Background(), &rpc.Request{Method: http.MethodPost, Addr: e.addr, Path: wire.PathDigest,
			Body: bytes.NewReader(body), Size: int64(len(body)), Cap: &rpc.Cap{Op: rpc.CapList, Bucket: "", Key: ""}}, &resp); err != nil {
			t.Fatal(err)
		}
		return resp.Digests
	}
	before, err := replica.Digests(e.st, P, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := remote(); !slices.Equal(got, before) {
		t.Fatalf("digests over the wire %v, local %v", got, before)
	}
	for _, change := range []func() error{
		func() error {
			_, err := e.put(e.client, bucket, "k3", vs[1], &object.Object{}, randBytes(99, 100))
			return err
		},
		func() error { _, err := e.del(e.client, bucket, "k4", vs[2]); return err },
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		after, err := replica.Digests(e.st, P, nil)
		if err != nil {
			t.Fatal(err)
		}
		differ := 0
		for p := range after {
			if after[p] != before[p] {
				differ++
			}
		}
		if differ != 1 {
			t.Fatalf("%d partitions' digests changed after one record changed; want 1", differ)
		}
		before = after
	}
	empty := 0
	for _, d := range before {
		if d == 0 {
			empty++
		}
	}
	if empty == P {
		t.Fatal("every digest is zero")
	}
}
