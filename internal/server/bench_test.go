package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
)

// processCPU is the CPU (user and system) this process used so far.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkGet4KiB is the 4 KiB GET of a single node through its real S3 listener (the
// node in-process on 127.0.0.1, as cairn server runs it), 16 clients at once with
// SigV4-signed requests on kept-alive connections. cpu-ns/op is the CPU of the whole
// process per GET: node and clients, which share the machine as they do in s3bench;
// wall-clock ns/op on a shared machine says little, compare cpu-ns/op of two builds
// alternated.
func BenchmarkGet4KiB(b *testing.B) {
	r := startNode(b, Limits{}, Limits{}, Limits{})
	const ak, sk = "LIMITSTESTKEY0000001", "limitsTestSecret0123456789abcdefghijklmn"
	base := "http://" + r.S3Addr + "/bench"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	do := func(method, url string, body []byte) error {
		req, err := http.NewRequest(method, url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		if body == nil {
			req.Body = http.NoBody
		}
		sigv4.SignRequest(req, ak, sk, "us-east-1", "", time.Now())
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s %s: %s", method, url, resp.Status)
		}
		if method == http.MethodGet && n != 4096 {
			return fmt.Errorf("GET %s: %d bytes", url, n)
		}
		return nil
	}
	if err := do(http.MethodPut, base, nil); err != nil {
		b.Fatal(err)
	}
	const keys = 256
	body := pattern(4096)
	for i := range keys {
		if err := do(http.MethodPut, fmt.Sprintf("%s/k%03d", base, i), body); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(8) // 16 clients on 2 cores
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := do(http.MethodGet, fmt.Sprintf("%s/k%03d", base, next.Add(1)%keys), nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}
