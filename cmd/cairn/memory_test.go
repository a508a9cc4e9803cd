package main

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
)

// genReader yields n pseudo-random bytes cheaply: a random 1 MiB block, varied per block.
type genReader struct {
	block  []byte
	n, off int64
}

func newGenReader(n int64) *genReader {
	b := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{1}).Read(b)
	return &genReader{block: b, n: n}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && g.off < g.n {
		i := g.off % int64(len(g.block))
		c := copy(p[k:], g.block[i:min(int64(len(g.block)), i+g.n-g.off)])
		// Make every MiB differ: stamp the block number at its start.
		if i == 0 && c >= 8 {
			blk := g.off >> 20
			for j := 0; j < 8; j++ {
				p[k+j] = byte(blk >> (8 * j))
			}
		}
		k += c
		g.off += int64(c)
	}
	return k, nil
}

func signedReq(t *testing.T, method, url string, body io.Reader, n int64) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		r.ContentLength = n
	}
	sigv4.SignRequest(r, testAccess, testSecret, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
	return r
}

// TestLargeObjectMemory streams a 5 GiB object in and out (CAIRN_BIG_SIZE overrides the size)
// and checks the server's peak RSS stays under 300 MiB and the bytes and ETag are right.
func TestLargeObjectMemory(t *testing.T) {
	size := int64(5 << 30)
	if v := os.Getenv("CAIRN_BIG_SIZE"); v != "" {
		size, _ = strconv.ParseInt(v, 10, 64)
	}
	p := startProc(t, t.TempDir())
	client := &http.Client{Timeout: 30 * time.Minute}
	resp, err := client.Do(signedReq(t, "PUT", p.url()+"/big", nil, 0))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("create bucket: %v %v", resp, err)
	}
	resp.Body.Close()

	start := time.Now()
	h := md5.New()
	body := io.TeeReader(newGenReader(size), h)
	resp, err = client.Do(signedReq(t, "PUT", p.url()+"/big/object", body, size))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("PUT: %d %s", resp.StatusCode, msg)
	}
	want := hex.EncodeToString(h.Sum(nil))
	if etag := resp.Header.Get("ETag"); etag != `"`+want+`"` {
		t.Fatalf("ETag %s, want %q", etag, want)
	}
	putTook := time.Since(start)

	start = time.Now()
	resp, err = client.Do(signedReq(t, "GET", p.url()+"/big/object", nil, 0))
	if err != nil {
		t.Fatal(err)
	}
	h.Reset()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || n != size {
		t.Fatalf("GET: %d bytes, %v", n, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		t.Fatalf("GET body MD5 %s, want %s", got, want)
	}
	getTook := time.Since(start)
	rss := p.peakRSS()
	mib := float64(size) / (1 << 20)
	t.Logf("%d MiB: PUT %.1fs (%.0f MiB/s), GET %.1fs (%.0f MiB/s), server peak RSS %d MiB",
		size>>20, putTook.Seconds(), mib/putTook.Seconds(), getTook.Seconds(), mib/getTook.Seconds(), rss>>20)
	if rss > 300<<20 {
		t.Fatalf("server peak RSS %d MiB over 300 MiB", rss>>20)
	}
	_ = fmt.Sprint
}
