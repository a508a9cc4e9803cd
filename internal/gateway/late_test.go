package gateway

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
)

// gatedReader reads b, but stops after the first gate bytes until release is closed: a
// client that trickles its body, controlled by the test.
type gatedReader struct {
	b       []byte
	off     int
	gate    int
	reached chan struct{} // closed once the first gate bytes were read
	release chan struct{}
	once    sync.Once
}

func newGatedReader(b []byte, gate int) *gatedReader {
	return &gatedReader{b: b, gate: gate, reached: make(chan struct{}), release: make(chan struct{})}
}

func (r *gatedReader) Read(p []byte) (int, error) {
	if r.off == r.gate {
		r.once.Do(func() { close(r.reached) })
		<-r.release
	}
	if r.off == len(r.b) {
		return 0, io.EOF
	}
	end := len(r.b)
	if r.off < r.gate {
		end = r.gate
	}
	n := copy(p, r.b[r.off:end])
	r.off += n
	return n, nil
}

// TestLastWriterWins: of two overlapping 8 MiB uploads of one key, the one that started
// first but finished last wins (S3's rule), on one node and through two gateways of a
// 3-node cluster: its version is taken when its body is complete, not when it started.
func TestLastWriterWins(t *testing.T) {
	const size = 8 << 20
	run := func(t *testing.T, first, second *Gateway, readers ...*Gateway) {
		ctx := context.Background()
		a, b := randBody(41, size), randBody(42, size)
		slow := newGatedReader(a, size/2)
		type result struct {
			etag string
			hlc  uint64
			err  error
		}
		done := make(chan result, 1)
		go func() {
			src, fin := md5Finish(slow)
			o, err := first.PutObject(ctx, "b", "k", &object.Object{}, src, size, object.PutOptions{Finish: fin})
			if err != nil {
				done <- result{err: err}
				return
			}
			done <- result{etag: o.ETag, hlc: o.HLC}
		}()
		select {
		case <-slow.reached: // the slow upload has begun and sent half its body
		case r := <-done:
			t.Fatalf("the slow upload ended before its gate: %+v", r)
		}
		ob := mustPut(t, second, "b", "k", b) // starts later, finishes first
		close(slow.release)
		ra := <-done
		if ra.err != nil {
			t.Fatalf("slow upload: %v", ra.err)
		}
		if ra.hlc <= ob.HLC {
			t.Fatalf("the upload that finished last has version %d, not after %d", ra.hlc, ob.HLC)
		}
		for _, g := range readers {
			got, o, err := get(ctx, g, "b", "k", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, a) || o.ETag != md5Hex(a) || o.HLC != ra.hlc {
				t.Fatalf("read %d bytes with ETag %s at %d; want the upload that finished last (%s at %d)", len(got), o.ETag, o.HLC, md5Hex(a), ra.hlc)
			}
		}
	}
	t.Run("node", func(t *testing.T) {
		st, err := store.Open(testStoreConfig(t.TempDir(), nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		g := Local(st, testLogger())
		if err := g.CreateBucket(context.Background(), "b", ""); err != nil {
			t.Fatal(err)
		}
		run(t, g, g, g)
	})
	t.Run("cluster", func(t *testing.T) {
		c := newCluster(t, 3, clusterConfig{})
		c.createBucket("b")
		run(t, c.nodes[0].gw, c.nodes[1].gw, c.nodes[0].gw, c.nodes[1].gw, c.nodes[2].gw)
	})
}
