package s3api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/sse"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
	"github.com/cairnfs/cairn/internal/topology"
)

// BenchmarkGetSmall measures 4 KiB GETs through HTTP on loopback, client in-process.
func BenchmarkGetSmall(b *testing.B) {
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	if err := srv.Store.CreateBucket("bench"); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 4096)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := 0; i < 100; i++ {
		r, _ := http.NewRequest("PUT", fmt.Sprintf("%s/bench/k%d", srv.URL, i), nil)
		r.Body = io.NopCloser(bytesReader(data))
		r.ContentLength = int64(len(data))
		sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := client.Do(r)
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(resp, err)
		}
		resp.Body.Close()
	}
	b.SetBytes(4096)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r, _ := http.NewRequest("GET", fmt.Sprintf("%s/bench/k%d", srv.URL, i%100), nil)
			sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
			resp, err := client.Do(r)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

type byteReader struct {
	b []byte
	i int
}

func bytesReader(b []byte) *byteReader { return &byteReader{b: b} }

func (r *byteReader) Read(p []byte) (int, error) {
	if r.i >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.i:])
	r.i += n
	return n, nil
}

// BenchmarkCheckFeatures measures the refusal-table check of a typical SDK PutObject: it
// must not allocate.
func BenchmarkCheckFeatures(b *testing.B) {
	r, _ := http.NewRequest("PUT", "http://127.0.0.1/bkt/some/key?x-id=PutObject", nil)
	for k, v := range map[string]string{
		"Authorization": "AWS4-HMAC-SHA256 Credential=AK/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
		"X-Amz-Date":    "20260101T000000Z", "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD", "User-Agent": "aws-sdk-go-v2/1.0",
		"Amz-Sdk-Invocation-Id": "x", "Amz-Sdk-Request": "attempt=1; max=3", "Content-Type": "application/octet-stream",
		"X-Amz-Checksum-Crc32": "AAAAAA==", "X-Amz-Sdk-Checksum-Algorithm": "CRC32", "X-Amz-Meta-Color": "blue",
		"Accept-Encoding": "identity",
	} {
		r.Header.Set(k, v)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := s3api.CheckFeatures(r, "PutObject"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpload1MiB compares a browser POST upload of 1 MiB (a Signature Version 4
// policy form, multipart/form-data) with a signed PUT of the same 1 MiB, in the same run
// against the same in-process server on loopback.
func BenchmarkUpload1MiB(b *testing.B) {
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	if err := srv.Store.CreateBucket("bench"); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	send := func(r *http.Request, want int) {
		resp, err := client.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.Run("PUT", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			r, _ := http.NewRequest("PUT", fmt.Sprintf("%s/bench/put%d", srv.URL, i%64), bytesReader(data))
			r.ContentLength = int64(len(data))
			sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
			send(r, 200)
		}
	})
	b.Run("POST", func(b *testing.B) {
		now := time.Now()
		fields := policyFields(`{"bucket":"bench"},["starts-with","$key","post"]`, now.Add(time.Hour), now, nil)
		b.SetBytes(int64(len(data)))
		for i := 0; i < b.N; i++ {
			// The form is built per request, as a browser does.
			fields["key"] = fmt.Sprintf("post%d", i%64)
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			for k, v := range fields {
				mw.WriteField(k, v)
			}
			fw, _ := mw.CreateFormFile("file", "f.bin")
			fw.Write(data)
			mw.Close()
			r, _ := http.NewRequest("POST", srv.URL+"/bench", &body)
			r.Header.Set("Content-Type", mw.FormDataContentType())
			send(r, 204)
		}
	})
}

// BenchmarkPutTagged measures 4 KiB PUTs through HTTP on loopback (8 clients in
// parallel), without tags and with 10 tags in x-amz-tagging, in the same run: the cost of
// parsing, checking and storing a full tag set (docs/benchmarks.md). cpu-ns/op is the
// CPU time of this process (client and server) per PUT, which the other processes of a
// shared machine disturb less than the wall time.
func BenchmarkPutTagged(b *testing.B) {
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	if err := srv.Store.CreateBucket("bench"); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 4096)
	var ten []string
	for i := range 10 {
		ten = append(ten, fmt.Sprintf("tag-key-%02d=some%%20value%%20number%%20%02d", i, i))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// Rounds alternate the two, so that a shared machine's load and the store's growth
	// weigh on both alike (the names of later rounds get #01, #02, ...).
	for range 4 {
		for _, bc := range []struct{ name, tagging string }{{"none", ""}, {"10tags", strings.Join(ten, "&")}} {
			b.Run(bc.name, func(b *testing.B) {
				var seq atomic.Int64
				b.SetBytes(int64(len(data)))
				b.SetParallelism(8)
				cpu0 := processCPU()
				defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						r, _ := http.NewRequest("PUT", fmt.Sprintf("%s/bench/%s/k%d", srv.URL, bc.name, seq.Add(1)%4096), nil)
						r.Body = io.NopCloser(bytesReader(data))
						r.ContentLength = int64(len(data))
						if bc.tagging != "" {
							r.Header.Set("X-Amz-Tagging", bc.tagging)
						}
						sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
						resp, err := client.Do(r)
						if err != nil || resp.StatusCode != 200 {
							b.Error(resp, err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			})
		}
	}
}

// processCPU returns the CPU time (user and system) this process has used, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkVersioned measures 4 KiB PUTs and GETs through HTTP on loopback (8 clients in
// parallel) in a bucket that never had versioning and in one with versioning enabled, in
// the same run, rounds alternating (docs/benchmarks.md). Versioned PUTs overwrite 4,096
// keys, so the bucket's noncurrent versions grow as they would.
func BenchmarkVersioned(b *testing.B) {
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	for _, name := range []string{"plain", "versioned"} {
		if err := srv.Store.CreateBucket(name); err != nil {
			b.Fatal(err)
		}
	}
	if err := srv.Store.SetBucketConfig("versioned", "versioning", []byte("Enabled")); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 4096)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func(method, url string, body []byte) error {
		r, _ := http.NewRequest(method, url, nil)
		if body != nil {
			r.Body = io.NopCloser(bytesReader(body))
			r.ContentLength = int64(len(body))
		}
		sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := client.Do(r)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s %s: %s", method, url, resp.Status)
		}
		return nil
	}
	for _, bucket := range []string{"plain", "versioned"} {
		for i := 0; i < 100; i++ {
			for v := 0; v < 3; v++ { // versioned keys get three versions
				if err := do("PUT", fmt.Sprintf("%s/%s/g%d", srv.URL, bucket, i), data); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for range 4 {
		for _, op := range []string{"put", "get"} {
			for _, bucket := range []string{"plain", "versioned"} {
				b.Run(op+"-"+bucket, func(b *testing.B) {
					var seq atomic.Int64
					b.SetBytes(int64(len(data)))
					b.SetParallelism(8)
					cpu0 := processCPU()
					defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							var err error
							if op == "put" {
								err = do("PUT", fmt.Sprintf("%s/%s/k%d", srv.URL, bucket, seq.Add(1)%4096), data)
							} else {
								err = do("GET", fmt.Sprintf("%s/%s/g%d", srv.URL, bucket, seq.Add(1)%100), nil)
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		}
	}
}

// BenchmarkListVersions measures the first page (1,000 entries) of ListObjectVersions
// through HTTP in a bucket of CAIRN_BENCH_VERSIONS versions (default 1,000,000: 250,000
// keys of 4 versions each, written to the store directly), the whole listing's pages
// too (docs/benchmarks.md).
func BenchmarkListVersions(b *testing.B) {
	total := 1_000_000
	if v := os.Getenv("CAIRN_BENCH_VERSIONS"); v != "" {
		fmt.Sscan(v, &total)
	}
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	if err := srv.Store.CreateBucket("listv"); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				key := fmt.Sprintf("dir%03d/key%07d", i/4%1000, i/4)
				if _, err := srv.Store.PutObject(context.Background(), "listv", key, &object.Object{Versioned: true}, bytes.NewReader([]byte("v")), 1, object.PutOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.Logf("%d versions written in %v", total, time.Since(start).Round(time.Millisecond))
	client := &http.Client{}
	list := func(query string) (body []byte, err error) {
		r, _ := http.NewRequest("GET", srv.URL+"/listv?versions"+query, nil)
		sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := client.Do(r)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		return io.ReadAll(resp.Body)
	}
	b.Run("first-page", func(b *testing.B) {
		for b.Loop() {
			if body, err := list(""); err != nil || !bytes.Contains(body, []byte("<IsTruncated>true</IsTruncated>")) {
				b.Fatal(err, string(body[:min(len(body), 300)]))
			}
		}
	})
	b.Run("middle-page", func(b *testing.B) {
		for b.Loop() {
			if _, err := list("&key-marker=dir500/key0125000"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSSE16MiB measures 16 MiB PUTs and GETs through HTTP on loopback (one client,
// in the same process), unencrypted and SSE-S3 (x-amz-server-side-encryption: AES256),
// in the same run, rounds alternating (docs/benchmarks.md). cpu-ns/op is the process's
// CPU time (client and server) per request.
func BenchmarkSSE16MiB(b *testing.B) {
	kr, err := sse.NewKeyring(sse.MasterKey{Name: "bench", Key: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		b.Fatal(err)
	}
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, func(c *s3api.Config) { c.MasterKeys = kr })
	if err := srv.Store.CreateBucket("bench"); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	const keys = 4
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	do := func(b *testing.B, method, key, algo string, body []byte) {
		r, _ := http.NewRequest(method, srv.URL+"/bench/"+key, nil)
		if body != nil {
			r.Body = io.NopCloser(bytesReader(body))
			r.ContentLength = int64(len(body))
		}
		if algo != "" && method == "PUT" {
			r.Header.Set("X-Amz-Server-Side-Encryption", algo)
		}
		sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := client.Do(r)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (method == "GET" && n != int64(len(data))) || resp.Header.Get("X-Amz-Server-Side-Encryption") != algo {
			b.Fatalf("%s %s: %d, %d bytes, encryption %q", method, key, resp.StatusCode, n, resp.Header.Get("X-Amz-Server-Side-Encryption"))
		}
	}
	modes := []struct{ name, algo string }{{"plain", ""}, {"sse-s3", "AES256"}}
	for _, m := range modes {
		for i := range keys {
			do(b, "PUT", fmt.Sprintf("%s/k%d", m.name, i), m.algo, data)
		}
	}
	for range 3 {
		for _, op := range []string{"PUT", "GET"} {
			for _, m := range modes {
				b.Run(m.name+"/"+op, func(b *testing.B) {
					b.SetBytes(int64(len(data)))
					cpu0 := processCPU()
					defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
					for i := 0; i < b.N; i++ {
						body := data
						if op == "GET" {
							body = nil
						}
						do(b, op, fmt.Sprintf("%s/k%d", m.name, i%keys), m.algo, body)
					}
				})
			}
		}
	}
}

// BenchmarkGetHandler measures the server side of a signed 4 KiB GET, the handler called
// directly (no sockets, no client), as cairn server builds it: the gateway of a one-node
// cluster with the object cache on, an access-log hook and an observer. Its allocs/op
// are the per-request allocations of the hot path (docs/benchmarks.md).
func BenchmarkGetHandler(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("size=%dKiB", size>>10), func(b *testing.B) {
			h, req := getHandlerSetup(b, size)
			w := &benchWriter{hd: http.Header{}}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				clear(w.hd)
				w.n, w.status = 0, 0
				h.ServeHTTP(w, req)
				if w.status != http.StatusOK || w.n != size {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
		})
	}
}

func getHandlerSetup(b *testing.B, size int) (http.Handler, *http.Request) {
	log := testutil.NewLogger(b)
	st, err := store.Open(store.Config{Dir: b.TempDir(), Reserve: 1, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	m := &clustermap.Map{Epoch: 1, Partitions: 1, Replicas: 1, Nodes: []clustermap.Node{{
		ID: "local", Roles: []string{clustermap.RoleStorage, clustermap.RoleGateway}, State: clustermap.StateUp, Weight: 1}}}
	maps := new(topology.Maps)
	maps.Set(m)
	gw := gateway.New(gateway.Config{NodeID: "local", Store: st, Maps: maps, Logger: log, ObjectCache: 64 << 20})
	h := s3api.New(s3api.Config{Store: gw, Logger: log,
		Lookup:    func(ak string) (string, bool) { return testutil.SecretKey, ak == testutil.AccessKey },
		Observer:  nopObserver{},
		AccessLog: func(s3api.AccessRecord) {}})
	ctx := context.Background()
	if err := gw.CreateBucket(ctx, "bench", ""); err != nil {
		b.Fatal(err)
	}
	if _, err := gw.PutObject(ctx, "bench", "k", &object.Object{}, bytes.NewReader(make([]byte, size)), int64(size), object.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	r, _ := http.NewRequest("GET", "http://127.0.0.1:9000/bench/k", nil)
	r.Header.Set("User-Agent", "aws-sdk-go-v2/1.30.0 os/linux lang/go#1.26 md/GOOS#linux md/GOARCH#amd64 api/s3#1.58.0")
	r.Header.Set("Amz-Sdk-Invocation-Id", "6c3b2b2e-6c1a-4c55-9a43-0d6b3f7a9c11")
	r.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
	r.Header.Set("Accept-Encoding", "identity")
	sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", sigv4.EmptySHA256, time.Now())
	// As the server sees it.
	r.RequestURI, r.Host, r.RemoteAddr = r.URL.RequestURI(), r.URL.Host, "127.0.0.1:40000"
	r.URL = &url.URL{Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	r.Body = http.NoBody
	return h, r
}

type nopObserver struct{}

func (nopObserver) ObserveRequest(string, int, time.Duration, int64, int64) {}

// benchWriter is the least of an http.ResponseWriter.
type benchWriter struct {
	hd     http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.hd }

func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

func (w *benchWriter) SetWriteDeadline(time.Time) error { return nil }

// BenchmarkListArchived compares a bucket of archived objects (stubs: the record of a
// version whose bytes are in an archive tier, docs/design/tiering.md) with a bucket of
// local ones, 1,000,000 each by default ($CAIRN_BENCH_ARCHIVED), written to the store
// directly: the first page of a listing, a full listing (ListObjectsV2, 1,000 keys a
// page) and HEAD, through HTTP. Neither touches a tier: a stub carries the size, ETag and
// metadata. Run with -benchtime 1x for one full listing of each.
func BenchmarkListArchived(b *testing.B) {
	total := 1_000_000
	if v := os.Getenv("CAIRN_BENCH_ARCHIVED"); v != "" {
		fmt.Sscan(v, &total)
	}
	srv := testutil.StartServer(b, store.Config{Reserve: 1}, nil)
	key := func(i int64) string { return fmt.Sprintf("dir%03d/key%07d", i%1000, i) }
	for _, bucket := range []string{"local", "archived"} {
		if err := srv.Store.CreateBucket(bucket); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := bytes.Repeat([]byte("x"), 100)
				for i := next.Add(1) - 1; i < int64(total); i = next.Add(1) - 1 {
					meta, src := &object.Object{ETag: "0123456789abcdef0123456789abcdef"}, bytes.NewReader(body)
					if bucket == "archived" {
						meta = &object.Object{ETag: "0123456789abcdef0123456789abcdef", Size: 4 << 20, Striped: true,
							Stripe: object.TierStub("archive", fmt.Sprintf("archived/%s/%016x", key(i), i), 4<<20)}
						src = bytes.NewReader(nil)
					}
					if _, err := srv.Store.PutObject(context.Background(), bucket, key(i), meta, src, int64(src.Len()), object.PutOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.Logf("%d %s objects written in %v", total, bucket, time.Since(start).Round(time.Millisecond))
	}
	client := &http.Client{}
	do := func(method, path string) (*http.Response, []byte, error) {
		r, _ := http.NewRequest(method, srv.URL+path, nil)
		sigv4.SignRequest(r, testutil.AccessKey, testutil.SecretKey, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
		resp, err := client.Do(r)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}
	for _, bucket := range []string{"local", "archived"} {
		b.Run("first-page/"+bucket, func(b *testing.B) {
			for b.Loop() {
				if _, body, err := do("GET", "/"+bucket+"?list-type=2"); err != nil || !bytes.Contains(body, []byte("<IsTruncated>true</IsTruncated>")) {
					b.Fatal(err, string(body[:min(len(body), 300)]))
				}
			}
		})
		b.Run("head/"+bucket, func(b *testing.B) {
			i := int64(0)
			for b.Loop() {
				i = (i + 7919) % int64(total)
				resp, _, err := do("HEAD", "/"+bucket+"/"+key(i))
				if err != nil || resp.StatusCode != 200 || resp.Header.Get("Etag") == "" {
					b.Fatal(err, resp)
				}
			}
		})
		b.Run("full-listing/"+bucket, func(b *testing.B) {
			for b.Loop() {
				n, token := 0, ""
				for {
					path := "/" + bucket + "?list-type=2"
					if token != "" {
						path += "&continuation-token=" + url.QueryEscape(token)
					}
					_, body, err := do("GET", path)
					if err != nil {
						b.Fatal(err)
					}
					n += bytes.Count(body, []byte("<Key>"))
					_, rest, ok := bytes.Cut(body, []byte("<NextContinuationToken>"))
					if !ok {
						break
					}
					tok, _, _ := bytes.Cut(rest, []byte("<"))
					token = string(tok)
				}
				if n != total {
					b.Fatalf("listed %d keys of %d", n, total)
				}
			}
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}
