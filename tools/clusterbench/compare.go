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
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

// runCompare measures the 4 KiB PUT of two builds' clusters against a single node, in
// one run: a single node (N=1) of bin, a cluster of base and one of bin, all up at once;
// then rounds rounds of `cairn bench put --size 4KiB --concurrency 16` against each (the
// two clusters' order flipped every round). For each it reports the rate, the p99, the
// node CPU per PUT (utime + stime of the target's processes, from /proc/PID/stat, over
// the phase), the ratio to the single node's rate in that round, and the put batches the
// cluster's nodes sent in the phase (cairn_put_batches_total, _writes_total; a build
// without them shows none).
func runCompare(bin, base string, n int, dur time.Duration, rounds int) {
	dir, err := os.MkdirTemp("", "clusterbench-cmp-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	type sys struct {
		label string
		t     target
		procs []*proc.Proc
	}
	single, sp, stopSingle := startSingleProc(bin, filepath.Join(dir, "single"))
	defer stopSingle()
	bt, bp, stopBase := startCluster(base, filepath.Join(dir, "base"), n)
	defer stopBase()
	nt, np, stopNew := startCluster(bin, filepath.Join(dir, "new"), n)
	defer stopNew()
	systems := []sys{{"single", single, []*proc.Proc{sp}}, {"base", bt, bp}, {"new", nt, np}}
	for _, s := range systems[1:] {
		log.Printf("%s: cluster feature level %d", s.label, waitLevel(bin, s.t))
	}
	fmt.Printf("\n| round | single node | cluster, base | cluster, new | ratio to the single node, base / new |\n|---|---|---|---|---|\n")
	type row struct{ ops, cpu, p99 float64 }
	sums := map[string]*row{}
	for r := 0; r < rounds; r++ {
		order := []sys{systems[0], systems[1], systems[2]}
		if r%2 == 1 {
			order = []sys{systems[0], systems[2], systems[1]}
		}
		got := map[string]row{}
		cells := map[string]string{}
		for _, s := range order {
			cpu0 := cpuTicks(s.procs)
			b0, w0 := putBatches(s.t)
			res := benchPut(bin, s.t, dur, filepath.Join(dir, fmt.Sprintf("%s-%d.json", s.label, r)))
			cpu := float64(cpuTicks(s.procs)-cpu0) * 1e6 / 100 / float64(max(res.Count, 1)) // µs per PUT (100 ticks a second)
			b1, w1 := putBatches(s.t)
			got[s.label] = row{res.OpsPerSec, cpu, res.Latency.P99}
			cells[s.label] = fmt.Sprintf("%.0f ops/s, p99 %.1f ms, %.0f µs CPU/PUT", res.OpsPerSec, res.Latency.P99, cpu)
			if b1 > b0 {
				cells[s.label] += fmt.Sprintf(", %.1f writes/batch", float64(w1-w0)/float64(b1-b0))
			}
			if res.Errors > 0 {
				cells[s.label] += fmt.Sprintf(", %d errors", res.Errors)
			}
			if sums[s.label] == nil {
				sums[s.label] = &row{}
			}
			sums[s.label].ops += res.OpsPerSec
			sums[s.label].cpu += cpu
			sums[s.label].p99 += res.Latency.P99
			log.Printf("round %d %s: %s (load %s)", r+1, s.label, cells[s.label], loadAvg())
		}
		fmt.Printf("| %d | %s | %s | %s | %.2f / %.2f |\n", r+1, cells["single"], cells["base"], cells["new"],
			got["base"].ops/got["single"].ops, got["new"].ops/got["single"].ops)
	}
	k := float64(rounds)
	m := func(l string) string {
		return fmt.Sprintf("%.0f ops/s, p99 %.1f ms, %.0f µs CPU/PUT", sums[l].ops/k, sums[l].p99/k, sums[l].cpu/k)
	}
	fmt.Printf("| mean | %s | %s | %s | %.3f / %.3f |\n", m("single"), m("base"), m("new"), sums["base"].ops/sums["single"].ops, sums["new"].ops/sums["single"].ops)
}

// benchPut runs one 4 KiB PUT phase against t and returns its result.
func benchPut(bin string, t target, dur time.Duration, jf string) opResult {
	r, err := runBench(bin, []string{"bench", "put", "--endpoint", t.endpoint, "--access-key", t.access, "--secret-key", t.secret,
		"--size", "4KiB", "--concurrency", "16", "--duration", dur.String(), "--json", jf, "--quiet"}, jf)
	if err != nil {
		log.Fatalf("bench put: %v", err)
	}
	return r.Results[0]
}

// cpuTicks sums utime and stime (clock ticks) of the processes.
func cpuTicks(ps []*proc.Proc) int64 {
	var sum int64
	for _, p := range ps {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Info().PID))
		if err != nil {
			log.Fatal(err)
		}
		// The fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		sum += u + s
	}
	return sum
}

// putBatches sums the put batch counters of t's nodes (from their /metrics).
func putBatches(t target) (batches, writes int64) {
	for _, a := range t.admins {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				continue
			}
			v, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "cairn_put_batches_total":
				batches += int64(v)
			case "cairn_put_batch_writes_total":
				writes += int64(v)
			}
		}
		resp.Body.Close()
	}
	return batches, writes
}

// waitLevel waits up to 30 s for t's map to reach a feature level that stops changing
// (the monitor raises it once every node answered) and returns it.
func waitLevel(bin string, t target) int {
	level, since := -1, time.Now()
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(500 * time.Millisecond) {
		cmd := exec.Command(bin, "admin", "--admin", t.admins[0], "--json", "status")
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+t.clusterSecret)
		out, err := cmd.Output()
		if err != nil {
			continue
		}
		var st struct {
			Level int `json:"level"`
		}
		json.Unmarshal(out, &st)
		if st.Level != level {
			level, since = st.Level, time.Now()
		}
		if level > 0 && time.Since(since) > 5*time.Second {
			break
		}
	}
	return level
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
