package gateway

import (
	"context"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
)

// BenchmarkConditionalPut4KiB compares, in one run, plain PUTs of 4 KiB with PUTs of 4
// KiB under If-None-Match: * (fresh keys both), one client at a time and 16 at once,
// through Local over one store and through a node of a 3-node in-process cluster (which
// is the lease holder of about a third of the keys). The two cases alternate in rounds
// (plain, if-none-match, plain#01, if-none-match#01, ...), so that the load of a shared
// machine weighs on both alike. cpu-ns/op is the CPU the process (every node) spent per
// PUT, less disturbed by other processes than the wall time.
//
//	go test -run '^$' -bench ConditionalPut4KiB -benchtime 1s ./internal/gateway
func BenchmarkConditionalPut4KiB(b *testing.B) {
	body := randBody(5, 4<<10)
	var seq atomic.Int64
	const rounds = 3
	for _, bg := range benchGateways(b) {
		for _, par := range []string{"serial", "parallel16"} {
			for range rounds {
				for _, mode := range []struct {
					name string
					opts object.PutOptions
				}{{"plain", object.PutOptions{}}, {"if-none-match", object.PutOptions{IfNoneMatch: true}}} {
					put := func() {
						key := mode.name + "/" + strconv.FormatInt(seq.Add(1), 10)
						if _, err := condPut(context.Background(), bg.g, "bench", key, body, mode.opts); err != nil {
							b.Fatal(err)
						}
					}
					b.Run(bg.name+"/"+par+"/"+mode.name, func(b *testing.B) {
						b.SetBytes(int64(len(body)))
						cpu0 := processCPU()
						defer func() { b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
						if par == "serial" {
							for b.Loop() {
								put()
							}
							return
						}
						b.SetParallelism(8) // 16 clients on 2 cores
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								put()
							}
						})
					})
				}
			}
		}
	}
}

// processCPU returns the CPU time (user and system) this process has used, in ns: every
// node of an in-process cluster, so cpu-ns/op is what a PUT costs the whole cluster.
func processCPU() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkOrderAcrossGateways measures the last-writer order across two gateways of a
// 3-node in-process cluster, each with its own hybrid logical clock: a 4 KiB PUT of a key
// through one gateway, then, once it is answered, one through the other. The second must
// be newer (it completed later). It reports the pairs whose order came out inverted, the
// smallest gap between the first's answer and the physical time of the second's version
// (how close two writes came while their order held: a skew between the gateways' clocks
// larger than this gap could have inverted them), and the largest skew seen between the
// two gateways' clocks read one after the other, in both orders (how far the later
// reading was behind the earlier one: zero on one host, where they read the same clock).
//
//	go test -run '^$' -bench OrderAcrossGateways -benchtime 2000x ./internal/gateway
func BenchmarkOrderAcrossGateways(b *testing.B) {
	c := newCluster(b, 3, clusterConfig{})
	c.createBucket("b")
	ctx := context.Background()
	body := randBody(6, 4<<10)
	inverted, pairs := 0, 0
	minGap, maxSkew := int64(1<<62), int64(0)
	i := 0
	for b.Loop() {
		key := "order/" + strconv.Itoa(i%64)
		first, second := c.nodes[i%2].gw, c.nodes[(i+1)%2].gw
		i++
		a, err := condPut(ctx, first, "b", key, body, object.PutOptions{})
		if err != nil {
			b.Fatal(err)
		}
		answered := time.Now()
		o, err := condPut(ctx, second, "b", key, body, object.PutOptions{})
		if err != nil {
			b.Fatal(err)
		}
		pairs++
		if o.HLC <= a.HLC {
			inverted++
		}
		minGap = min(minGap, hlc.Time(o.HLC).Sub(answered).Microseconds())
		// Read first's clock, then second's: a later reading behind an earlier one is skew.
		x, y := first.clock.Next(), second.clock.Next()
		maxSkew = max(maxSkew, hlc.Time(x).Sub(hlc.Time(y)).Microseconds())
	}
	b.ReportMetric(float64(inverted), "inverted")
	b.ReportMetric(float64(pairs), "pairs")
	b.ReportMetric(float64(minGap), "min-gap-µs")
	b.ReportMetric(float64(maxSkew), "max-skew-µs")
}
