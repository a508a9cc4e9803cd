package gateway

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

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

// TestLastWriterSkew shows the order of writes through gateways whose clocks disagree
// (fake wall clocks; a 4-node cluster, N=3, the writes' keys not held by n4, whose clock
// is 50 ms behind the others'). Within the skew, a write through n4 that completes after
// one through n1 can be ordered before it (the clocks decide); once n4 has seen n1's
// write (any answer carrying its version), its later writes are newer whatever the skew
// (the hybrid clock); and writes that complete more than the skew apart are in order.
func TestLastWriterSkew(t *testing.T) {
	c := newCluster(t, 4, clusterConfig{})
	c.createBucket("b")
	var mu sync.Mutex
	now := time.Unix(1_900_000_000, 0)
	set := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	const skew = 50 * time.Millisecond
	for i, nd := range c.nodes {
		off := time.Duration(0)
		if i == 3 {
			off = -skew
		}
		nd.gw.clock.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now.Add(off) }
	}
	notN4 := func(r []int) bool { return !slices.Contains(r, 3) }
	ctx := context.Background()
	stored := func(key string) string {
		got, _, err := get(ctx, c.nodes[0].gw, "b", key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	n1, n4 := c.nodes[0].gw, c.nodes[3].gw

	k := c.keyWhere("b", "skew", notN4)
	mustPut(t, n1, "b", k, []byte("A"))
	set(10 * time.Millisecond) // B completes 10 ms after A, within the skew
	mustPut(t, n4, "b", k, []byte("B"))
	if got := stored(k); got != "A" {
		t.Fatalf("within the skew: %q stored; the clocks order B (10 ms later, 50 ms behind) first", got)
	}
	set(10 * time.Millisecond) // n4 saw A's version in the answers to B
	mustPut(t, n4, "b", k, []byte("C"))
	if got := stored(k); got != "C" {
		t.Fatalf("after n4 saw A: %q stored, want C", got)
	}

	k2 := c.keyWhere("b", "skew2", notN4)
	mustPut(t, n1, "b", k2, []byte("A2"))
	set(skew + 20*time.Millisecond) // beyond the skew
	mustPut(t, n4, "b", k2, []byte("D"))
	if got := stored(k2); got != "D" {
		t.Fatalf("beyond the skew: %q stored, want D", got)
	}
}
