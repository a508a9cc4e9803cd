// Command clusterbench measures a loopback cairn cluster against a single node in the same
// run (docs/benchmarks.md): 4 KiB and 16 MiB PUT and GET with `cairn bench`, and the
// internode bytes each 16 MiB PUT costs, read from the nodes' own counters. With
// --object-cache it measures the gateway object cache instead (cache.go): a hot 4 KiB GET
// through a node that holds a copy and through one that holds none, on a cluster with the
// cache and its read leases, one with the cache but no leases and one with no cache, in
// the same run. With --internode-tls it measures
// internode mutual TLS (internode.go): a cluster with it and one without, up at once, the
// phases alternated between them in one run. With --compare BASE it measures the 4 KiB
// PUT of a cluster of BASE and one of --cairn against a single node, rounds alternated
// (compare.go), with the node CPU per PUT.
//
//	go run ./tools/clusterbench --cairn bin/cairn [--nodes 3] [--duration 10s]
//	go run ./tools/clusterbench --cairn bin/cairn --object-cache [--nodes 6] [--duration 10s]
//	go run ./tools/clusterbench --cairn bin/cairn --internode-tls [--rounds 3] [--duration 10s]
//	go run ./tools/clusterbench --cairn bin/cairn --compare /tmp/cairn-base [--rounds 4] [--duration 8s]
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

type opResult struct {
	Op        string  `json:"op"`
	Count     int64   `json:"count"`
	Errors    int64   `json:"errors"`
	OpsPerSec float64 `json:"ops_per_sec"`
	MiBPerSec float64 `json:"mib_per_sec"`
	Latency   struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
}

type report struct {
	Results []opResult `json:"results"`
}

type target struct {
	endpoint, access, secret string
	admins                   []string // admin addresses of every node (cluster only)
	clusterSecret            string
}

type phase struct {
	name, workload, size string
	conc                 int
}

var phases = []phase{
	{"4 KiB PUT", "put", "4KiB", 16},
	{"4 KiB GET", "get", "4KiB", 16},
	{"16 MiB PUT", "put", "16MiB", 4},
	{"16 MiB GET", "get", "16MiB", 4},
}

func main() {
	bin := flag.String("cairn", "bin/cairn", "cairn binary")
	nodes := flag.Int("nodes", 3, "cluster size")
	dur := flag.Duration("duration", 10*time.Second, "length of each measured phase")
	cacheBench := flag.Bool("object-cache", false, "measure the gateway object cache (hot 4 KiB GET through a holder and a non-holder: cache with read leases, cache without, no cache) instead")
	conc := flag.Int("concurrency", 16, "concurrent clients of the --object-cache phases")
	rounds := flag.Int("rounds", 1, "--object-cache, --internode-tls: measure each cluster's phases this many times, alternating")
	internodeBench := flag.Bool("internode-tls", false, "measure internode mutual TLS: a cluster with it and one without, phases alternated (--rounds)")
	compare := flag.String("compare", "", "measure the 4 KiB PUT of this base binary's cluster and of --cairn's, alternated (--rounds), against a single node of --cairn: rates, node CPU per PUT, ratios, put batch sizes")
	flag.Parse()
	if *compare != "" {
		runCompare(*bin, *compare, *nodes, *dur, *rounds)
		return
	}
	if *internodeBench {
		runInternodeBench(*bin, *nodes, *dur, *rounds)
		return
	}
	if *cacheBench {
		if *nodes < 4 {
			log.Fatal("--object-cache needs at least 4 nodes (a node that holds no copy)")
		}
		runCacheBench(*bin, *nodes, *dur, *conc, *rounds)
		return
	}
	dir, err := os.MkdirTemp("", "clusterbench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	single, stop := startSingle(*bin, filepath.Join(dir, "single"))
	sres, _ := runAll(*bin, single, *dur, dir, "single")
	stop()

	cl, _, stopCl := startCluster(*bin, filepath.Join(dir, "cluster"), *nodes)
	cres, traffic := runAll(*bin, cl, *dur, dir, "cluster")
	stopCl()

	fmt.Printf("\n| workload | single node | %d-node cluster (N=3 W=2 R=1) | ratio |\n|---|---|---|---|\n", *nodes)
	for i, p := range phases {
		s, c := sres[i], cres[i]
		if strings.HasPrefix(p.name, "4 KiB") {
			fmt.Printf("| %s | %.0f ops/s, p99 %.1f ms | %.0f ops/s, p99 %.1f ms | %.2f |\n", p.name, s.OpsPerSec, s.Latency.P99, c.OpsPerSec, c.Latency.P99, c.OpsPerSec/s.OpsPerSec)
		} else {
			fmt.Printf("| %s | %.0f MiB/s, p99 %.0f ms | %.0f MiB/s, p99 %.0f ms | %.2f |\n", p.name, s.MiBPerSec, s.Latency.P99, c.MiBPerSec, c.Latency.P99, c.MiBPerSec/s.MiBPerSec)
		}
	}
	fmt.Printf("\ninternode bytes per 16 MiB PUT: %.1f MiB (%.2f x the object; N-1 = %d)\n", traffic/(1<<20), traffic/(16<<20), 2)
}

// runAll runs every phase against t; it returns the results and the internode bytes sent
// per 16 MiB PUT (cluster only).
func runAll(bin string, t target, dur time.Duration, dir, label string) ([]opResult, float64) {
	var out []opResult
	var perPut float64
	for i, p := range phases {
		before := internode(bin, t)
		jf := filepath.Join(dir, fmt.Sprintf("%s-%d.json", label, i))
		args := []string{"bench", p.workload, "--endpoint", t.endpoint, "--access-key", t.access, "--secret-key", t.secret,
			"--size", p.size, "--concurrency", fmt.Sprint(p.conc), "--duration", dur.String(), "--json", jf, "--quiet"}
		if p.workload == "get" && p.size == "16MiB" {
			args = append(args, "--keys", "64")
		}
		log.Printf("%s: %s", label, p.name)
		r, err := runBench(bin, args, jf)
		if err != nil {
			log.Fatalf("%s %s: %v", label, p.name, err)
		}
		res := r.Results[0]
		out = append(out, res)
		if p.workload == "put" && p.size == "16MiB" && len(t.admins) > 0 && res.Count > 0 {
			perPut = float64(internode(bin, t)-before) / float64(res.Count)
		}
	}
	return out, perPut
}

// runBench runs `cairn` with args (a bench command writing its report to jf) and returns
// the report, which has one result at least.
func runBench(bin string, args []string, jf string) (report, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	var r report
	if err := cmd.Run(); err != nil {
		return r, err
	}
	data, err := os.ReadFile(jf)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil || len(r.Results) == 0 {
		return r, fmt.Errorf("%s: bad report: %v", jf, err)
	}
	return r, nil
}

// internode sums the internode bytes every node has sent so far.
func internode(bin string, t target) int64 {
	var sum int64
	for _, a := range t.admins {
		cmd := exec.Command(bin, "admin", "--admin", a, "--json", "status")
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+t.clusterSecret)
		out, err := cmd.Output()
		if err != nil {
			log.Fatalf("admin status: %v", err)
		}
		var st struct {
			Nodes []struct {
				ID    string `json:"id"`
				Admin string `json:"admin_addr"`
				Stats *struct {
					Sent int64 `json:"internode_sent_bytes"`
				} `json:"stats"`
			} `json:"nodes"`
		}
		json.Unmarshal(out, &st)
		for _, n := range st.Nodes {
			if n.Admin == a && n.Stats != nil {
				sum += n.Stats.Sent
			}
		}
	}
	return sum
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startSingle starts one node with N=1 and returns it and its stop function.
func startSingle(bin, dir string) (target, func()) {
	t, _, stop := startSingleProc(bin, dir)
	return t, stop
}

// startSingleProc is startSingle that also returns the process.
func startSingleProc(bin, dir string) (target, *proc.Proc, func()) {
	t := target{access: "CAIRNBENCH000000001", secret: "clusterbench-secret-key-0123456789"}
	p, err := proc.Start(context.Background(), proc.Config{Bin: bin, Name: "single", Dir: dir, Args: []string{"--replicas", "1"},
		Env: []string{"CAIRN_ACCESS_KEY=" + t.access, "CAIRN_SECRET_KEY=" + t.secret}})
	if err != nil {
		log.Fatal(err)
	}
	t.endpoint = p.URL()
	return t, p, func() { p.Stop() }
}

// startCluster starts n nodes on loopback (node1 bootstraps, the others join it, zones
// z1..z3 round robin, N=3) and returns them and their stop function.
func startCluster(bin, dir string, n int, extra ...string) (target, []*proc.Proc, func()) {
	t := target{access: "CAIRNBENCH" + randHex(5), secret: randHex(20), clusterSecret: randHex(24)}
	env := []string{"CAIRN_ACCESS_KEY=" + t.access, "CAIRN_SECRET_KEY=" + t.secret, "CAIRN_CLUSTER_SECRET=" + t.clusterSecret}
	var procs []*proc.Proc
	stop := func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			go func() { defer wg.Done(); p.Stop() }()
		}
		wg.Wait()
	}
	for i := 0; i < n; i++ {
		args := append([]string{"--node-id", fmt.Sprintf("node%d", i+1), "--zone", fmt.Sprintf("z%d", i%3+1)}, extra...)
		if i > 0 {
			args = append(args, "--join", procs[0].NodeAddr())
		}
		p, err := proc.Start(context.Background(), proc.Config{Bin: bin, Name: fmt.Sprintf("node%d", i+1), Dir: dir, Args: args, Env: env})
		if err != nil {
			stop()
			log.Fatal(err)
		}
		procs = append(procs, p)
		t.admins = append(t.admins, p.AdminAddr())
	}
	t.endpoint = procs[0].URL()
	return t, procs, stop
}
