package gateway

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/store"
)

// benchGateways returns the gateways the benchmarks compare: Local over one store, and a
// node of a 3-node in-process cluster (N=3, W=2), which holds a replica of every key.
func benchGateways(b *testing.B) []struct {
	name string
	g    *Gateway
} {
	return benchGatewaysWith(b, nil)
}

// benchGatewaysWith is benchGateways with every store's configuration adjusted by adjust
// (if set) before it opens.
func benchGatewaysWith(b *testing.B, adjust func(*store.Config)) []struct {
	name string
	g    *Gateway
} {
	b.Helper()
	sc := testStoreConfig(b.TempDir(), nil)
	if adjust != nil {
		adjust(&sc)
	}
	st, err := store.Open(sc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	local := Local(st, testLogger())
	if err := local.CreateBucket(context.Background(), "bench", ""); err != nil {
		b.Fatal(err)
	}
	var perNode func(int, *store.Config)
	if adjust != nil {
		perNode = func(_ int, sc *store.Config) { adjust(sc) }
	}
	c := newCluster(b, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: 1, D: 2}, store: perNode})
	c.createBucket("bench")
	// The level a cluster of this build runs at (put batches on); CAIRN_BENCH_LEVEL
	// sets another (11: put batches off).
	level := LevelPutBatches
	if v, err := strconv.Atoi(os.Getenv("CAIRN_BENCH_LEVEL")); err == nil {
		level = v
	}
	c.setLevel(level)
	gws := []struct {
		name string
		g    *Gateway
	}{{"local", local}, {"cluster3", c.nodes[0].gw}}
	if os.Getenv("CAIRN_BENCH_NOATIME") != "" {
		// The same cluster without access times: the cost of noting them (tiering).
		c2 := newCluster(b, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: 1, D: 2}, noAccessTimes: true})
		c2.createBucket("bench")
		gws = append(gws, struct {
			name string
			g    *Gateway
		}{"cluster3-noatime", c2.nodes[0].gw})
	}
	return gws
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

// BenchmarkPut4KiBParallel is BenchmarkPut4KiB with 16 writers at once (clusterbench's
// 4 KiB PUT phase, without HTTP and SigV4 on the client's side): the cost per PUT of the
// write path when the group commit has company, on one store and through a node of the
// 3-node cluster (internode calls over loopback HTTP, three durable copies). cpu-ns/op is
// the CPU the whole process (every node) spent per PUT: on a shared machine, a steadier
// figure than the time.
func BenchmarkPut4KiBParallel(b *testing.B) {
	body := randBody(1, 4<<10)
	// The server's store defaults for small bodies: 4 KiB goes inline in the index (one
	// synced commit per copy), not into a segment (testStoreConfig's 1 KiB).
	for _, bg := range benchGatewaysWith(b, func(sc *store.Config) { sc.InlineMax = 0 }) {
		b.Run(bg.name, func(b *testing.B) {
			ctx := context.Background()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
			var next atomic.Int64
			bs0, ws0 := bg.g.PutBatchStats()
			var latMu sync.Mutex
			var lats []time.Duration
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					i := next.Add(1)
					start := time.Now()
					if _, err := put(ctx, bg.g, "bench", "put/"+strconv.FormatInt(i%1024, 10), body, int64(len(body))); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(start))
				}
				latMu.Lock()
				lats = append(lats, mine...)
				latMu.Unlock()
			})
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			if len(lats) > 0 {
				// The latencies, to see stalls (reported, not asserted).
				slices.Sort(lats)
				b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
				b.ReportMetric(float64(lats[len(lats)-1].Microseconds())/1000, "max-ms")
			}
			if bs, ws := bg.g.PutBatchStats(); bs > bs0 {
				bs, ws = bs-bs0, ws-ws0
				b.ReportMetric(float64(ws)/float64(bs), "writes/batch")
				b.ReportMetric(float64(ws)/float64(2*b.N), "batched-share")
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
				benchGet(b, bg.g, &buf, "get/"+strconv.Itoa(i%keys), len(body))
				i++
			}
			if !bytes.Equal(buf.Bytes(), body) {
				b.Fatal("wrong bytes")
			}
		})
	}
}

// BenchmarkClass compares STANDARD (3 copies) with EC42 (4+2 shards) on a 6-node
// in-process cluster on loopback sockets: PUT and GET of 16 MiB and 256 MiB objects, and
// a GET with two of the six nodes stopped (degraded: every stripe is reconstructed).
// Run with a small -benchtime (e.g. 5x): every PUT writes the whole object.
func BenchmarkClass(b *testing.B) {
	ctx := context.Background()
	c := newCluster(b, 6, clusterConfig{})
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Classes["EC42"] = clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2}
		// Three copies like STANDARD, but chunked onto the class's own placement.
		m.Classes["COPIES3"] = clustermap.Class{Name: "COPIES3", N: 3, W: 2, R: 1, D: 2}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	c.createBucket("bench")
	g := c.nodes[0].gw
	for _, size := range []int{16 << 20, 256 << 20} {
		body := randBody(uint64(size), size)
		name := strconv.Itoa(size>>20) + "MiB"
		for _, class := range []string{"STANDARD", "EC42", "COPIES3"} {
			key := class + "/" + name
			if _, err := putClass(ctx, g, "bench", key, class, body); err != nil { // for GET alone
				b.Fatal(err)
			}
			b.Run("put/"+class+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					if _, err := putClass(ctx, g, "bench", key, class, body); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("get/"+class+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					rd, err := g.OpenObject(ctx, "bench", key)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := rd.WriteRange(ctx, discard{}, 0, int64(size)); err != nil {
						b.Fatal(err)
					}
					rd.Close()
				}
			})
		}
	}
	// Degraded: two nodes that are neither node 0 (the gateway) nor needed for the records.
	c.stop(4)
	c.stop(5)
	for _, size := range []int{16 << 20, 256 << 20} {
		name := strconv.Itoa(size>>20) + "MiB"
		b.Run("get-degraded/EC42/"+name, func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				rd, err := g.OpenObject(ctx, "bench", "EC42/"+name)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rd.WriteRange(ctx, discard{}, 0, int64(size)); err != nil {
					b.Fatal(err)
				}
				rd.Close()
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkApply measures policy apply: 64 objects of 1 MiB re-placed from STANDARD to
// EC42 and back per iteration by one pass on every node of a 6-node cluster.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()
	c := newCluster(b, 6, clusterConfig{})
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Classes["EC42"] = clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	c.createBucket("bench")
	const n, size = 64, 1 << 20
	for i := range n {
		if _, err := putClass(ctx, c.nodes[i%6].gw, "bench", "o"+strconv.Itoa(i), "", randBody(uint64(i), size)); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(n * size)
	to := []string{"EC42", "STANDARD"}
	i := 0
	for b.Loop() {
		gen := c.applyPolicy("bench", "* => "+to[i%2]+"\n")
		i++
		if left, _ := c.applyAll("bench", gen); left != 0 {
			b.Fatalf("%d objects left", left)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "objects/s")
}

// BenchmarkPut4KiBTagged is BenchmarkPut4KiB on the 3-node cluster without tags and with
// 10 tags of S3's usual size, in the same run (docs/benchmarks.md).
func BenchmarkPut4KiBTagged(b *testing.B) {
	body := randBody(1, 4<<10)
	c := newCluster(b, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: 1, D: 2}})
	c.createBucket("bench")
	var ten [][2]string
	for i := range 10 {
		ten = append(ten, [2]string{"tag-key-" + strconv.Itoa(10+i), "some value number " + strconv.Itoa(i)})
	}
	// Rounds alternate the two (later rounds are named #01, #02, ...), so that a shared
	// machine's load and the stores' growth weigh on both alike.
	for range 4 {
		for _, bc := range []struct {
			name string
			tags [][2]string
		}{{"none", nil}, {"10tags", ten}} {
			b.Run(bc.name, func(b *testing.B) {
				ctx := context.Background()
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					src, fin := md5Finish(bytes.NewReader(body))
					if _, err := c.nodes[0].gw.PutObject(ctx, "bench", bc.name+"/"+strconv.Itoa(i%1024), &object.Object{Tags: bc.tags}, src, int64(len(body)),
						object.PutOptions{Finish: fin}); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkGetCached compares a hot 4 KiB GET on a 5-node in-process cluster (N=3, R=1)
// through a holder and through a gateway that holds no copy, with and without the object
// cache, in the same run: "serial" is one request at a time (every cached GET pays its
// own freshness check: a remote Stat instead of a remote GET), "parallel" 16 concurrent
// requests (concurrent GETs of one object share checks). docs/benchmarks.md.
func BenchmarkGetCached(b *testing.B) {
	body := randBody(3, 4<<10)
	for _, cache := range []int64{0, 64 << 20} {
		c := newCluster(b, 5, clusterConfig{cache: cache})
		c.createBucket("bench")
		key := c.keyWhere("bench", "hot", func(r []int) bool { return r[0] == 1 && !containsInt(r, 0) })
		mustPut(b, c.nodes[1].gw, "bench", key, body)
		state := "nocache"
		if cache > 0 {
			state = "cache"
		}
		for _, via := range []struct {
			name string
			i    int
		}{{"holder", 1}, {"nonholder", 0}} {
			g := c.nodes[via.i].gw
			read := func(b *testing.B) {
				rd, err := g.OpenObject(context.Background(), "bench", key)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := rd.WriteRange(context.Background(), discard{}, 0, int64(len(body))); err != nil || n != int64(len(body)) {
					b.Fatalf("read %d: %v", n, err)
				}
				rd.Close()
			}
			b.Run("serial/"+via.name+"/"+state, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					read(b)
				}
			})
			b.Run("parallel/"+via.name+"/"+state, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
				before := g.CacheStats()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						read(b)
					}
				})
				if s := g.CacheStats(); s.Enabled {
					hits := s.Hits - before.Hits
					b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
					b.ReportMetric(float64(s.Checks-before.Checks)/float64(b.N), "checks/op")
				}
			})
		}
	}
}

// BenchmarkGetAccessTimes is the cost of access tracking (store.Touch, for tiering) on a
// 4 KiB GET through the coordinator of an in-process 3-node cluster (no HTTP, no SigV4:
// the cheapest GET there is), as a same-run ratio: two gateways on node 0 of one cluster,
// one noting reads and one not (Config.NoAccessTimes), alternated in blocks of 500 GETs
// (ABBA order, so drift in the machine's load falls on both). Reported per GET of each:
// the wall time and the process's CPU time (user + system, from getrusage: on a loaded
// machine the wall time is mostly the wait for a core), and the CPU difference in percent.
func BenchmarkGetAccessTimes(b *testing.B) {
	ctx := context.Background()
	body := randBody(2, 4<<10)
	c := newCluster(b, 3, clusterConfig{class: clustermap.Class{N: 3, W: 2, R: 1, D: 2}})
	c.createBucket("bench")
	on := c.nodes[0].gw
	cfg := on.cfg
	cfg.NoAccessTimes = true
	off := New(cfg)
	b.Cleanup(func() { off.Close() })
	const keys = 64
	for i := range keys {
		if _, err := put(ctx, on, "bench", "get/"+strconv.Itoa(i), body, int64(len(body))); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	get := func(g *Gateway, i int) { benchGet(b, g, &buf, "get/"+strconv.Itoa(i%keys), len(body)) }
	for i := range 2 * keys { // warm both (the first reads of a period are the writes)
		get(on, i)
		get(off, i)
	}
	cpu := func() time.Duration { return time.Duration(processCPU()) }
	const block = 500
	var wall, used [2]time.Duration // [0] with access times, [1] without
	var count [2]int
	i := 0
	b.ResetTimer()
	for round := 0; count[0]+count[1] < b.N; round++ {
		for j := range 2 {
			side := j ^ round%2
			g := on
			if side == 1 {
				g = off
			}
			n := min(block, b.N-count[0]-count[1])
			start, c0 := time.Now(), cpu()
			for range n {
				get(g, i)
				i++
			}
			wall[side] += time.Since(start)
			used[side] += cpu() - c0
			count[side] += n
		}
	}
	if count[0] > 0 && count[1] > 0 {
		per := func(d [2]time.Duration, side int) float64 { return float64(d[side]) / float64(count[side]) }
		b.ReportMetric(per(wall, 0), "wall-ns/get-on")
		b.ReportMetric(per(wall, 1), "wall-ns/get-off")
		b.ReportMetric(per(used, 0), "cpu-ns/get-on")
		b.ReportMetric(per(used, 1), "cpu-ns/get-off")
		b.ReportMetric(100*(per(used, 0)-per(used, 1))/per(used, 1), "%cpu-cost")
	}
}

// benchGet reads bucket "bench"'s key through g into buf (reset first) and fails b unless
// it got size bytes.
func benchGet(b *testing.B, g *Gateway, buf *bytes.Buffer, key string, size int) {
	ctx := context.Background()
	rd, err := g.OpenObject(ctx, "bench", key)
	if err != nil {
		b.Fatal(err)
	}
	buf.Reset()
	n, err := rd.WriteRange(ctx, buf, 0, rd.Info().Size)
	rd.Close()
	if err != nil || n != int64(size) {
		b.Fatalf("read %d bytes: %v", n, err)
	}
}
