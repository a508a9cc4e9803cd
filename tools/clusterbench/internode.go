package main

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// runInternodeBench measures the cost of internode mutual TLS: two clusters of n nodes,
// one started with --internode-tls off (plain HTTP and Raft, HMAC-signed) and one with it
// on (the default), both up at once; every phase runs on one, then the other, for rounds
// rounds (the order flips each round), all through node1's S3 endpoint. Each phase's
// best round per cluster is reported, with the ratio TLS / plain.
func runInternodeBench(bin string, n int, dur time.Duration, rounds int) {
	dir, err := os.MkdirTemp("", "clusterbench-mtls-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	plain, _, stopPlain := startCluster(bin, filepath.Join(dir, "plain"), n, "--internode-tls", "off")
	defer stopPlain()
	mtls, _, stopTLS := startCluster(bin, filepath.Join(dir, "mtls"), n)
	defer stopTLS()
	best := map[string][]opResult{}
	keep := func(label string, res []opResult) {
		if best[label] == nil {
			best[label] = res
			return
		}
		for i, r := range res {
			if score(r) > score(best[label][i]) {
				best[label][i] = r
			}
		}
	}
	for r := 0; r < rounds; r++ {
		order := []string{"plain", "mtls"}
		if r%2 == 1 {
			order = []string{"mtls", "plain"}
		}
		for _, label := range order {
			t := plain
			if label == "mtls" {
				t = mtls
			}
			res, _ := runAll(bin, t, dur, dir, fmt.Sprintf("%s-r%d", label, r))
			keep(label, res)
		}
	}
	fmt.Printf("\n| workload (%d nodes, N=3, via node1) | internode plain | internode mTLS | mTLS / plain |\n|---|---|---|---|\n", n)
	for i, p := range phases {
		s, c := best["plain"][i], best["mtls"][i]
		if strings.HasPrefix(p.name, "4 KiB") {
			fmt.Printf("| %s | %.0f ops/s, p99 %.1f ms | %.0f ops/s, p99 %.1f ms | %.2f |\n", p.name, s.OpsPerSec, s.Latency.P99, c.OpsPerSec, c.Latency.P99, c.OpsPerSec/s.OpsPerSec)
		} else {
			fmt.Printf("| %s | %.0f MiB/s, p99 %.0f ms | %.0f MiB/s, p99 %.0f ms | %.2f |\n", p.name, s.MiBPerSec, s.Latency.P99, c.MiBPerSec, c.Latency.P99, c.MiBPerSec/s.MiBPerSec)
		}
	}
}

// score orders the rounds of one phase: operations per second (4 KiB) or MiB per second.
func score(r opResult) float64 {
	if r.MiBPerSec > 0 && r.OpsPerSec < 100 {
		return r.MiBPerSec
	}
	return r.OpsPerSec
}
