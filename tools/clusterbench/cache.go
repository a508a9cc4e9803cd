package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

// cacheCounters are a node's object cache counters (cairn_object_cache_*_total).
type cacheCounters struct{ hits, misses, checks, failures, leaseHits float64 }

// scrapeCache reads node p's object cache counters from its /metrics.
func scrapeCache(p *proc.Proc) cacheCounters {
	resp, err := http.Get(p.AdminURL() + "/metrics")
	if err != nil {
		log.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	var c cacheCounters
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "cairn_object_cache_hits_total":
			c.hits = f
		case "cairn_object_cache_misses_total":
			c.misses = f
		case "cairn_object_cache_checks_total":
			c.checks = f
		case "cairn_object_cache_check_failures_total":
			c.failures = f
		case "cairn_object_cache_lease_hits_total":
			c.leaseHits = f
		}
	}
	return c
}

// cacheRow is one measured phase of the --object-cache run.
type cacheRow struct {
	cluster, via string
	res          opResult
	d            cacheCounters
}

// runCacheBench starts three clusters of n nodes, one with --object-cache 64MiB and its
// read leases (--object-cache-lease 2s, the default), one with the cache but no leases
// (every hit checked) and one with no cache, writes one 4 KiB object and reads it for
// dur through a node holding a copy and one holding none; it prints a table with the hit
// ratio, the freshness checks and the hits under a lease per GET.
func runCacheBench(bin string, n int, dur time.Duration, conc, rounds int) {
	dir, err := os.MkdirTemp("", "clusterbench-cache-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	type cluster struct {
		name          string
		t             target
		procs         []*proc.Proc
		holder, other int
	}
	var cls []*cluster
	var stops []func()
	stopAll := func() {
		for _, f := range stops {
			f()
		}
	}
	defer stopAll()
	bench := func(t target, endpoint, jf string, extra ...string) opResult {
		args := append([]string{"bench", "get", "--endpoint", endpoint, "--access-key", t.access, "--secret-key", t.secret,
			"--bucket", "hot", "--prefix", "hot/", "--keep", "--quiet", "--json", jf}, extra...)
		r, err := runBench(bin, args, jf)
		if err != nil {
			stopAll()
			log.Fatalf("bench: %v", err)
		}
		return r.Results[len(r.Results)-1]
	}
	// Both clusters run at once (idle but for the phase measured), so that both see the
	// same machine: its other load changes over minutes.
	for _, cfg := range []struct{ name, size, lease string }{{"cache + leases", "64MiB", "2s"}, {"cache, no leases", "64MiB", "0"}, {"no cache", "0", "0"}} {
		t, procs, stop := startCluster(bin, filepath.Join(dir, cfg.size+cfg.lease), n, "--object-cache", cfg.size, "--object-cache-lease", cfg.lease)
		stops = append(stops, stop)
		// One 4 KiB object, hot/obj00000000.
		bench(t, t.endpoint, filepath.Join(dir, "prep.json"), "--keys", "1", "--size", "4KiB", "--ops", "1")
		cmd := exec.Command(bin, "admin", "--admin", procs[0].AdminAddr(), "--json", "placement", "hot", "hot/obj00000000")
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+t.clusterSecret)
		out, err := cmd.Output()
		if err != nil {
			stopAll()
			log.Fatalf("admin placement: %v", err)
		}
		var pl struct{ Nodes []string }
		if err := json.Unmarshal(out, &pl); err != nil || len(pl.Nodes) == 0 {
			stopAll()
			log.Fatalf("admin placement: %v: %s", err, out)
		}
		c := &cluster{name: cfg.name, t: t, procs: procs, holder: -1, other: -1}
		for i := range procs {
			id := fmt.Sprintf("node%d", i+1)
			if id == pl.Nodes[0] {
				c.holder = i
			}
			if c.other < 0 && !slices.Contains(pl.Nodes, id) {
				c.other = i
			}
		}
		log.Printf("%s: hot/obj00000000 on %v; holder node%d, non-holder node%d", cfg.name, pl.Nodes, c.holder+1, c.other+1)
		cls = append(cls, c)
	}
	var rows []cacheRow
	for round := range rounds {
		for _, c := range cls {
			for _, via := range []struct {
				name string
				i    int
			}{{"holder", c.holder}, {"non-holder", c.other}} {
				before := scrapeCache(c.procs[via.i])
				log.Printf("%s: round %d via %s", c.name, round+1, via.name)
				res := bench(c.t, c.procs[via.i].URL(), filepath.Join(dir, fmt.Sprintf("%s-%d-%s.json", c.name, round, via.name)),
					"--no-prepare", "--concurrency", strconv.Itoa(conc), "--duration", dur.String())
				after := scrapeCache(c.procs[via.i])
				rows = append(rows, cacheRow{cluster: c.name, via: via.name, res: res, d: cacheCounters{
					hits: after.hits - before.hits, misses: after.misses - before.misses,
					checks: after.checks - before.checks, failures: after.failures - before.failures, leaseHits: after.leaseHits - before.leaseHits}})
			}
		}
	}
	fmt.Printf("\n| cluster (%d nodes, N=3 R=1) | GET 4 KiB via | ops/s | p50 ms | p99 ms | hit ratio | checks per GET | leased hits per GET | check failures |\n|---|---|---|---|---|---|---|---|---|\n", n)
	for _, r := range rows {
		gets := r.d.hits + r.d.misses
		ratio, checks, leased := "-", "-", "-"
		if gets > 0 {
			ratio = fmt.Sprintf("%.3f", r.d.hits/gets)
			checks = fmt.Sprintf("%.3f", r.d.checks/gets)
			leased = fmt.Sprintf("%.3f", r.d.leaseHits/gets)
		}
		fmt.Printf("| %s | %s | %.0f | %.2f | %.2f | %s | %s | %s | %.0f |\n", r.cluster, r.via, r.res.OpsPerSec, r.res.Latency.P50, r.res.Latency.P99, ratio, checks, leased, r.d.failures)
	}
	// The goal: a non-holder with the cache serves at least 90% of a holder's rate.
	var holder []float64
	nonHolder := map[string][]float64{}
	for _, r := range rows {
		if r.via == "holder" {
			holder = append(holder, r.res.OpsPerSec)
		} else {
			nonHolder[r.cluster] = append(nonHolder[r.cluster], r.res.OpsPerSec)
		}
	}
	for _, c := range cls {
		fmt.Printf("\nnon-holder of %q / holder (mean of rounds, every cluster's holders): %.2f", c.name, mean(nonHolder[c.name])/mean(holder))
	}
	fmt.Println()
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}
