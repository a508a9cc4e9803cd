package gateway

import (
	"bytes"
	"context"
	"strconv"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/store"
)

// benchGateways returns the gateways the benchmarks compare: Local over one store, and a
// node of a 3-node in-process cluster (N=3, W=2), which holds a replica of every key.
func benchGateways(b *testing.B) []struct {
	name string
	g    *Gateway
} {
	b.Helper()
	st, err := store.Open(testStoreConfig(b.TempDir(), nil))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	local := Local(st, testLogger())
	if err := local.CreateBucket(context.Background(), "bench"); err != nil {
		b.Fatal(err)
	}
	c := newCluster(b, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: 1, D: 2}})
	c.createBucket("bench")
	return []struct {
		name string
		g    *Gateway
	}{{"local", local}, {"cluster3", c.nodes[0].gw}}
}

func BenchmarkPut4KiB(b *testing.B) {
	body := randBody(1, 4<<10)
	for _, bg := range benchGateways(b) {
		b.Run(bg.name, func(b *testing.B) {
			ctx := context.Background()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := put(ctx, bg.g, "bench", "put/"+strconv.Itoa(i%1024), body, int64(len(body))); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkGet4KiB(b *testing.B) {
	body := randBody(2, 4<<10)
	for _, bg := range benchGateways(b) {
		b.Run(bg.name, func(b *testing.B) {
			ctx := context.Background()
			const keys = 64
			for i := range keys {
				if _, err := put(ctx, bg.g, "bench", "get/"+strconv.Itoa(i), body, int64(len(body))); err != nil {
					b.Fatal(err)
				}
			}
			var buf bytes.Buffer
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				rd, err := bg.g.OpenObject(ctx, "bench", "get/"+strconv.Itoa(i%keys))
				if err != nil {
					b.Fatal(err)
				}
				buf.Reset()
				n, err := rd.WriteRange(ctx, &buf, 0, rd.Info().Size)
				rd.Close()
				if err != nil || n != int64(len(body)) {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				i++
			}
			if !bytes.Equal(buf.Bytes(), body) {
				b.Fatal("wrong bytes")
			}
		})
	}
}
