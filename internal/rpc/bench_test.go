package rpc

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/wire"
)

// benchServer serves signed requests on a real loopback socket through the Mux: PUT bodies
// are discarded, GET answers n bytes.
func benchServer(b *testing.B, s *Secret) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	mux := NewMux(ln, s, nil)
	payload := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := s.Authenticate(w, r)
		if !ok {
			return
		}
		defer EndResponse(w)
		if r.Method == http.MethodGet {
			n := 4 << 10
			if r.URL.Query().Get("big") != "" {
				n = len(payload)
			}
			w.Write(payload[:n])
			return
		}
		io.Copy(io.Discard, r.Body)
	})}
	go srv.Serve(mux.HTTP())
	b.Cleanup(func() { srv.Close(); mux.Close() })
	return ln.Addr().String()
}

// The internode transport: 1 MiB bodies each way and 4 KiB requests, signed, over
// keep-alive HTTP/1.1 on loopback (docs/benchmarks.md).
func BenchmarkTransport(b *testing.B) {
	s, _ := NewSecret("benchmark-secret-0123456789")
	addr := benchServer(b, s)
	c := &Client{Secret: s, Node: "bench", HTTP: &http.Client{Transport: NewTransport()}}
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		method string
		size   int
		query  string
	}{
		{"put-1MiB", http.MethodPut, 1 << 20, ""},
		{"get-1MiB", http.MethodGet, 1 << 20, "big=1"},
		{"put-4KiB", http.MethodPut, 4 << 10, ""},
		{"get-4KiB", http.MethodGet, 4 << 10, ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			body := make([]byte, tc.size)
			b.SetBytes(int64(tc.size))
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					r := &Request{Method: tc.method, Addr: addr, Path: "/x", Cap: &Cap{Op: CapWrite, Bucket: "b", Key: "k"}}
					if tc.query != "" {
						r.Query = map[string][]string{"big": {"1"}}
					}
					if tc.method == http.MethodPut {
						r.Body, r.Size = bytes.NewReader(body), int64(len(body))
					}
					resp, err := c.Do(ctx, r)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// BenchmarkAuth is the signing work of one small internode request (an object HEAD), no
// network: the gateway mints a capability and signs the request, the holder verifies both
// and signs its answer, the gateway verifies the answer. Its allocs/op are what the
// transport's authentication adds to every request.
func BenchmarkAuth(b *testing.B) {
	s, _ := NewSecret("benchmark-secret-0123456789")
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodHead, "http://127.0.0.1:1/v1/object/bucket/some/key", nil)
		r.Header.Set(HdrCap, s.MintCap(CapRead, "bucket", "some/key", now, time.Minute))
		s.Sign(r, "node1", 7, now)
		if _, _, err := s.Verify(r, now); err != nil {
			b.Fatal(err)
		}
		if err := s.CheckCap(r.Header.Get(HdrCap), CapRead, "bucket", "some/key", now); err != nil {
			b.Fatal(err)
		}
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
		resp.Header.Set(HdrEpoch, "7")
		s.SignResponse(resp.Header, http.StatusOK, r.Header.Get(HdrNonce), r.Header.Get(wire.HdrProto))
		if err := s.VerifyResponse(resp, r.Header.Get(HdrNonce)); err != nil {
			b.Fatal(err)
		}
	}
}
