package replica_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
)

// batchEnv is a holder serving replica.Handler on a loopback socket behind the internode
// signature check, its Local fenced by fence, and a Remote for it.
type batchEnv struct {
	st     *store.Store
	secret *rpc.Secret
	srv    *httptest.Server
	remote *replica.Remote
	tr     *http.Transport
}

func newBatchEnv(t *testing.T, fence func(object.RangeWrite) error) *batchEnv {
	t.Helper()
	e := newEnv(t) // its store and secret; its own server is not used here
	h := replica.NewHandler(replica.HandlerConfig{Local: &replica.Local{Node: "n1", Store: e.st, EnsureBucket: func(string) error { return nil }, Fence: fence},
		Secret: e.secret, Logger: discard()})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := e.secret.Authenticate(w, r)
		if !ok {
			return
		}
		h.ServeHTTP(w, r)
		rpc.EndResponse(w)
	}))
	tr := rpc.NewTransport()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	b := &batchEnv{st: e.st, secret: e.secret, srv: srv, tr: tr}
	b.remote = b.remoteWith(e.secret, tr)
	return b
}

func (b *batchEnv) remoteWith(s *rpc.Secret, rt http.RoundTripper) *replica.Remote {
	return &replica.Remote{Node: "n1", Addr: b.srv.Listener.Addr().String(), Timeout: 10 * time.Second,
		RPC: &rpc.Client{Secret: s, Node: "gw", HTTP: &http.Client{Transport: rt}, Epoch: func() uint64 { return 1 }}}
}

// orders returns the order of each key in the holder's store (0: none).
func (b *batchEnv) orders(t *testing.T, keys ...string) []uint64 {
	t.Helper()
	var out []uint64
	for _, k := range keys {
		o, err := b.st.StatObject(bucket, k)
		switch {
		case errors.Is(errors.NotExist, err):
			out = append(out, 0)
		case err != nil:
			t.Fatal(err)
		default:
			out = append(out, o.HLC)
		}
	}
	return out
}

func batchOf(keys ...string) []object.RangeWrite {
	var ws []object.RangeWrite
	for i, k := range keys {
		ws = append(ws, object.RangeWrite{Bucket: bucket, Key: k, Size: 1 << 20, Off: int64(i) * 4096, Data: randBytes(uint64(80+i), 4096), Prev: 0, Next: 1})
	}
	return ws
}

// TestRangeBatchFencedAndGood: in one batch, a write the holder's fence refuses gets its
// Permission error, a write at the wrong order its Precondition, and the good ones are
// applied; nothing else changes.
func TestRangeBatchFencedAndGood(t *testing.T) {
	b := newBatchEnv(t, func(w object.RangeWrite) error {
		if strings.HasPrefix(w.Key, "fenced") {
			return errors.E(errors.Permission, "a write under an old lease (test fence)")
		}
		return nil
	})
	ws := batchOf("good1", "fenced", "good2", "behind")
	ws[3].Prev, ws[3].Next = 3, 4
	res, err := b.remote.WriteRanges(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []errors.Kind{errors.Other, errors.Permission, errors.Other, errors.Precondition} {
		if errors.KindOf(res[i].Err) != want {
			t.Errorf("write %d (%s): %v, want kind %v", i, ws[i].Key, res[i].Err, want)
		}
		if want == errors.Other && (res[i].Object == nil || res[i].Object.HLC != 1) {
			t.Errorf("write %d: record %+v", i, res[i].Object)
		}
	}
	if got := b.orders(t, "good1", "fenced", "good2", "behind"); got[0] != 1 || got[1] != 0 || got[2] != 1 || got[3] != 0 {
		t.Fatalf("orders after the batch: %v", got)
	}
	if got := readStore(t, b.st, bucket, "good2"); !bytes.Equal(got[8192:12288], ws[2].Data) {
		t.Fatal("a good write of the batch reads back other bytes")
	}
}

// TestRangeBatchRefused: batches that are malformed, oversized, unauthenticated, with a
// capability of another kind or bucket, or changed in transit (a body signed by its hash
// and a streamed one) are refused as a whole and write nothing.
func TestRangeBatchRefused(t *testing.T) {
	b := newBatchEnv(t, nil)
	good := func(n int) []byte {
		ws := batchOf("k1", "k2")
		ws[1].Data = randBytes(90, n)
		body := wire.AppendRangeBatchHead(nil, len(ws))
		for i := range ws {
			body = wire.AppendRangeWriteHead(body, &ws[i])
			body = append(body, ws[i].Data...)
		}
		return body
	}
	small, large := good(4096), good(300<<10)
	other := batchOf("k1", "k2")
	other[1].Bucket = otherBucket
	mixed := wire.AppendRangeBatchHead(nil, 2)
	for i := range other {
		mixed = append(wire.AppendRangeWriteHead(mixed, &other[i]), other[i].Data...)
	}
	wrongSec := newSecret(t, wrongSecret)
	type req struct {
		secret *rpc.Secret
		rt     http.RoundTripper
		body   []byte
		length string // the body's length in the query ("": len(body))
		cap    *rpc.Cap
	}
	capOK := &rpc.Cap{Op: rpc.CapRangeBatch, Bucket: bucket}
	for _, tc := range []struct {
		name string
		r    req
		kind errors.Kind
	}{
		{"cut short", req{body: small[:len(small)-10], length: strconv.Itoa(len(small) - 10)}, errors.Invalid},
		{"longer than its length", req{body: small, length: strconv.Itoa(len(small) - 1)}, errors.Invalid},
		{"shorter than its length", req{body: small, length: strconv.Itoa(len(small) + 1)}, errors.Invalid},
		{"no length", req{body: small, length: "x"}, errors.Invalid},
		{"not a batch", req{body: []byte("not a range batch at all")}, errors.Invalid},
		{"oversized", req{body: small, length: strconv.Itoa(wire.MaxRangeBatchBody + 1)}, errors.TooLarge},
		{"a write of another bucket", req{body: mixed}, errors.Permission},
		{"another cluster's secret", req{secret: wrongSec, body: small}, errors.Permission},
		{"a write capability, not a batch's", req{body: small, cap: &rpc.Cap{Op: rpc.CapWrite, Bucket: bucket}}, errors.Permission},
		{"a capability of another bucket", req{body: small, cap: &rpc.Cap{Op: rpc.CapRangeBatch, Bucket: otherBucket}}, errors.Permission},
		{"no capability", req{body: small, cap: &rpc.Cap{}}, errors.Permission},
		{"hashed body changed in transit", req{body: small, rt: flipper{b.tr, 100}}, errors.Permission},
		{"streamed body changed in transit", req{body: large, rt: flipper{b.tr, 200 << 10}}, errors.Permission},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.r
			if r.secret == nil {
				r.secret = b.secret
			}
			if r.rt == nil {
				r.rt = b.tr
			}
			if r.length == "" {
				r.length = strconv.Itoa(len(r.body))
			}
			if r.cap == nil {
				r.cap = capOK
			}
			b.wantRefused(t, wire.PathRangeBatch, r.secret, r.rt, r.body, r.length, r.cap, tc.kind)
			if got := b.orders(t, "k1", "k2"); got[0] != 0 || got[1] != 0 {
				t.Fatalf("a refused batch wrote: orders %v", got)
			}
		})
	}
	// The same bodies, unchanged and properly signed, are taken.
	for _, body := range [][]byte{small} {
		ws, err := wire.DecodeRangeBatch(body)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.remote.WriteRanges(context.Background(), ws)
		if err != nil || res[0].Err != nil || res[1].Err != nil {
			t.Fatalf("the good batch: %v %+v", err, res)
		}
	}
}

// wantRefused posts body as a batch to path (its length in the query, a capability cap,
// signed with s, through rt) and checks that the holder refuses it with kind.
func (b *batchEnv) wantRefused(t *testing.T, path string, s *rpc.Secret, rt http.RoundTripper, body []byte, length string, cap *rpc.Cap, kind errors.Kind) {
	t.Helper()
	c := &rpc.Client{Secret: s, Node: "gw", HTTP: &http.Client{Transport: rt}, Epoch: func() uint64 { return 1 }}
	resp, err := c.Do(context.Background(), &rpc.Request{Method: http.MethodPost, Addr: b.srv.Listener.Addr().String(), Path: path,
		Query: url.Values{wire.QBucket: {bucket}, wire.QLength: {length}}, Body: bytes.NewReader(body), Size: int64(len(body)), Cap: cap})
	if err == nil {
		resp.Body.Close()
		t.Fatal("accepted")
	}
	if errors.KindOf(err) != kind {
		t.Fatalf("refused with %v, want kind %v", err, kind)
	}
}

// flipper changes one byte of each request body at offset at, after it was signed.
type flipper struct {
	rt http.RoundTripper
	at int64
}

func (f flipper) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &flipBody{ReadCloser: r.Body, at: f.at}
	}
	return f.rt.RoundTrip(r)
}

type flipBody struct {
	io.ReadCloser
	at, n int64
}

func (b *flipBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.at >= b.n && b.at < b.n+int64(n) {
		p[b.at-b.n] ^= 0xff
	}
	b.n += int64(n)
	return n, err
}

// TestRangeBatchHolderGoneMidBatch: the holder's connection dies while a streamed batch
// body is on its way (the holder killed mid-batch): the call fails Transient for every
// write of it, and the holder applied none of them; the batch sent again is taken.
func TestRangeBatchHolderGoneMidBatch(t *testing.T) {
	b := newBatchEnv(t, nil)
	ws := batchOf("k1", "k2", "k3")
	ws[2].Size, ws[2].Data = 4<<20, randBytes(91, 1<<20)
	cut := &cutter{rt: b.tr, after: 512 << 10, reached: make(chan struct{}), release: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-cut.reached
		b.srv.CloseClientConnections() // the holder's end of the connection goes
		close(cut.release)
	}()
	_, err := b.remoteWith(b.secret, cut).WriteRanges(context.Background(), ws)
	wg.Wait()
	if !errors.Is(errors.Transient, err) {
		t.Fatalf("a batch whose holder went: %v", err)
	}
	// The body never reached its end, so the handler cannot have applied any of it
	// (it reads a batch whole before it applies a write), whenever it gets to run.
	if got := b.orders(t, "k1", "k2", "k3"); got[0] != 0 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("the holder applied part of a cut batch: orders %v", got)
	}
	res, err := b.remote.WriteRanges(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("write %d sent again: %v", i, r.Err)
		}
	}
	if got := b.orders(t, "k1", "k2", "k3"); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("orders after the batch was sent again: %v", got)
	}
}

// cutter passes request bodies on until after bytes, then signals reached and blocks
// until release, then fails the body (the connection is gone by then).
type cutter struct {
	rt      http.RoundTripper
	after   int64
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (c *cutter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &cutBody{ReadCloser: r.Body, c: c}
	}
	return c.rt.RoundTrip(r)
}

type cutBody struct {
	io.ReadCloser
	c *cutter
	n int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.n >= b.c.after {
		b.c.once.Do(func() { close(b.c.reached) })
		<-b.c.release
		return 0, errors.E(errors.IO, "the connection went (test)")
	}
	if int64(len(p)) > b.c.after-b.n {
		p = p[:b.c.after-b.n]
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}
