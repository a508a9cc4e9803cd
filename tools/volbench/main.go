// Command volbench is the sheepdog-fio workload (DESIGN §10) against a cairn block volume
// over NBD and against a file on the same disk, in the same run: fio with iodepth 32, 4 KiB
// random reads and writes, 1 MiB sequential reads and writes. The file is read and written
// with direct I/O, once without syncs (the disk's speed) and once with an fdatasync after
// each write (what "durable when answered" costs on the disk: cairn answers a write only
// once every copy is on stable storage). It starts the cairn nodes itself (1, or 3 joined
// on this host with N=3), in a temporary directory on the disk given, and prints one
// table with the ratios.
//
//	go run ./tools/volbench --cairn bin/cairn --dir /var/tmp --nodes 1 --runtime 10s
//
// With --snapshots it measures snapshots instead (docs/design/volume-snapshots.md):
// snapshot and clone time and bytes at 1 GiB and 1 TiB, the first 4 KiB write to each
// 4 MiB data object after a snapshot (copy on write) against the same writes again
// (steady state), and an incremental export against a full one.
//
//	go run ./tools/volbench --cairn bin/cairn --dir /var/tmp --nodes 1 --snapshots
//
// With --ec K+M (and --nodes K+M or more) it compares a volume in an erasure-coded class
// with a replicated one (3 copies) in the same run (docs/design/ec-volumes.md): 1 MiB
// sequential writes and reads, 4 KiB random writes and reads.
//
//	go run ./tools/volbench --cairn bin/cairn --dir /var/tmp --nodes 6 --ec 4+2 --runtime 10s
//
// With --tls it compares NBD over TLS with plain NBD in the same run: two single-node
// clusters on the same disk, one started with --nbd-tls require (fio's nbd engine through
// libnbd, nbds:// with a client certificate from cairn volume client-cert), the phases
// alternated between them.
//
//	go run ./tools/volbench --cairn bin/cairn --dir /var/tmp --tls --runtime 10s
//
// --phases runs only some of the phases (randread, randwrite, read, write), and
// --profile DIR starts the nodes with --pprof and writes a CPU profile of every node
// during each cairn phase to DIR/PHASE-nodeN.pprof (go tool pprof reads them), and where
// every goroutine waits half way through the phase to DIR/PHASE-nodeN.goroutines.txt.
//
//	go run ./tools/volbench --cairn bin/cairn --dir /var/tmp --phases randwrite --profile /tmp/prof
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

const secret = "volbench-cluster-secret-0123456789abcdef"

// adminAddr is the admin address of the first node; adminAddrs every node's.
var (
	adminAddr  string
	adminAddrs []string
)

func main() {
	bin := flag.String("cairn", "bin/cairn", "the cairn binary")
	dir := flag.String("dir", os.TempDir(), "directory on the disk to measure (cairn's data and the file)")
	nodes := flag.Int("nodes", 1, "cairn nodes (1, or 3 with 3 copies of every data object)")
	runtime := flag.Duration("runtime", 10*time.Second, "time of each fio phase")
	size := flag.String("size", "1GiB", "volume and file size")
	snaps := flag.Bool("snapshots", false, "measure snapshots, clones, copy on write and incremental export instead")
	ec := flag.String("ec", "", "compare a volume in an erasure-coded class of this code (4+2) with a replicated one instead")
	withTLS := flag.Bool("tls", false, "compare NBD over TLS with plain NBD instead (two single-node clusters)")
	nodeFlags := flag.String("node-flags", "", "more flags for every cairn node, space-separated (e.g. \"--segment-spares 8\")")
	only := flag.String("phases", "", "comma-separated phases to run, in that order (randread, randwrite, read, write; default all, in that order)")
	profile := flag.String("profile", "", "write a CPU profile of every node during each cairn phase to this directory (the nodes run with --pprof)")
	flag.Parse()
	work, err := os.MkdirTemp(*dir, "volbench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(work)
	cleanups = append(cleanups, func() { os.RemoveAll(work) })
	if *withTLS {
		tlsBench(*bin, work, *size, *runtime)
		return
	}
	extra := strings.Fields(*nodeFlags)
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			fail(err)
		}
		extra = append(extra, "--pprof")
	}
	uri, vol, stop := startCairn(*bin, work, *nodes, *size, extra...)
	defer stop()
	cleanups = append(cleanups, stop)
	if *snaps {
		snapshotBench(*bin, work, uri, vol, *nodes)
		return
	}
	if *ec != "" {
		ecBench(*bin, uri, vol, *ec, *size, *nodes, *runtime)
		return
	}
	file := filepath.Join(work, "file.img")
	phases := []struct{ name, rw, bs string }{
		{"4k randread", "randread", "4k"},
		{"4k randwrite", "randwrite", "4k"},
		{"1m read", "read", "1m"},
		{"1m write", "write", "1m"},
	}
	if *only != "" {
		var some []struct{ name, rw, bs string } // in the order given
		for _, o := range strings.Split(*only, ",") {
			for _, p := range phases {
				if o == p.rw {
					some = append(some, p)
				}
			}
		}
		if len(some) == 0 {
			fail(fmt.Errorf("--phases %q names none of randread, randwrite, read, write", *only))
		}
		phases = some
	}
	// Fill both first, so that reads read data and not holes.
	for _, target := range []string{"nbd", "file"} {
		run(target, uri, file, *size, "write", "1m", 0, false)
	}
	type row struct{ cairn, disk, diskSync float64 }
	rows := make([]row, len(phases))
	for i, p := range phases {
		done := profileNodes(*profile, p.rw, *runtime)
		rows[i].cairn = run("nbd", uri, file, *size, p.rw, p.bs, *runtime, false)
		done()
		rows[i].disk = run("file", uri, file, *size, p.rw, p.bs, *runtime, false)
		if strings.Contains(p.rw, "write") {
			rows[i].diskSync = run("file", uri, file, *size, p.rw, p.bs, *runtime, true)
		}
	}
	fmt.Printf("cairn volume over NBD, %d node(s), vs a file on the same disk (%s); fio iodepth 32, %s per phase\n", *nodes, *dir, *runtime)
	fmt.Printf("%-14s %14s %14s %9s %16s %9s\n", "phase", "cairn", "file", "ratio", "file+fdatasync", "ratio")
	for i, p := range phases {
		unit := "IOPS"
		if p.bs == "1m" {
			unit = "MiB/s"
		}
		syncCol, syncRatio := "-", "-"
		if rows[i].diskSync > 0 {
			syncCol = fmt.Sprintf("%.0f %s", rows[i].diskSync, unit)
			syncRatio = fmt.Sprintf("%.2f", rows[i].cairn/rows[i].diskSync)
		}
		fmt.Printf("%-14s %14s %14s %9.2f %16s %9s\n", p.name, fmt.Sprintf("%.0f %s", rows[i].cairn, unit), fmt.Sprintf("%.0f %s", rows[i].disk, unit),
			rows[i].cairn/rows[i].disk, syncCol, syncRatio)
	}
	fmt.Printf("volume I/O that waited for a node's map to be confirmed: %s; refused for lack of one: %s\n",
		metricSum("cairn_volume_lease_waits_total"), metricSum("cairn_volume_lease_wait_timeouts_total"))
	fmt.Printf("volume writes sent to holders in range batches: %s, in %s batches\n",
		metricSum("cairn_volume_range_batch_writes_total"), metricSum("cairn_volume_range_batches_total"))
}

// metricSum is the sum of a counter over every node's /metrics ("?" if one cannot be read
// or lacks it: an older binary).
func metricSum(name string) string {
	sum := 0.0
	for _, a := range adminAddrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			return "?"
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		found := false
		for _, line := range strings.Split(string(b), "\n") {
			var v float64
			if rest, ok := strings.CutPrefix(line, name+" "); ok {
				if _, err := fmt.Sscan(rest, &v); err == nil {
					sum, found = sum+v, true
				}
			}
		}
		if !found {
			return "?"
		}
	}
	return fmt.Sprint(sum)
}

// startCairn starts the nodes, creates and attaches a volume, and returns its NBD URI.
// extra are more flags for every node.
func startCairn(bin, dir string, nodes int, size string, extra ...string) (string, func(args ...string) []byte, func()) {
	var procs []*proc.Proc
	stop := func() {
		for _, p := range procs {
			p.Stop()
		}
	}
	for i := range nodes {
		args := append([]string{"--nbd-listen", "127.0.0.1:0", "--replicas", fmt.Sprint(min(nodes, 3)), "--zone", fmt.Sprintf("z%d", i+1)}, extra...)
		if i > 0 {
			args = append(args, "--join", procs[0].NodeAddr())
		}
		p, err := proc.Start(context.Background(), proc.Config{Bin: bin, Name: fmt.Sprintf("node%d", i+1), Dir: dir, Args: args,
			Env: []string{"CAIRN_CLUSTER_SECRET=" + secret}})
		if err != nil {
			stop()
			fail(err)
		}
		procs = append(procs, p)
	}
	adminAddr, adminAddrs = procs[0].AdminAddr(), nil
	for _, p := range procs {
		adminAddrs = append(adminAddrs, p.AdminAddr())
	}
	vol := func(args ...string) []byte {
		cmd := exec.Command(bin, append([]string{"volume", "--admin", procs[0].AdminAddr(), "--json"}, args...)...)
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+secret)
		out, err := cmd.CombinedOutput()
		if err != nil {
			stop()
			fail(fmt.Errorf("cairn volume %v: %v\n%s", args, err, out))
		}
		return out
	}
	// The map's feature level is raised once every node has answered the leader.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.Command(bin, "volume", "--admin", procs[0].AdminAddr(), "create", "bench", "--size", size)
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+secret)
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			fail(fmt.Errorf("cairn volume create: %v\n%s", err, out))
		}
		time.Sleep(500 * time.Millisecond)
	}
	var v struct{ URI string }
	if err := json.Unmarshal(vol("attach", "bench"), &v); err != nil {
		stop()
		fail(err)
	}
	return v.URI, vol, stop
}

// profileNodes starts a CPU profile of every node for runtime (dir "": none) and returns
// the function that waits for them and writes them to dir/phase-nodeN.pprof.
func profileNodes(dir, phase string, runtime time.Duration) func() {
	if dir == "" {
		return func() {}
	}
	errs := make(chan error, 2*len(adminAddrs))
	for i, a := range adminAddrs {
		go func() { // where every goroutine waits, half way through
			time.Sleep(2*time.Second + runtime/2)
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/goroutine?debug=1", a))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-node%d.goroutines.txt", phase, i+1)), b, 0o644)
			}
			errs <- err
		}()
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", a, int(runtime.Seconds())))
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("profile of node%d: %s: %s", i+1, resp.Status, b)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-node%d.pprof", phase, i+1)), b, 0o644)
			}
			errs <- err
		}()
	}
	return func() {
		for range 2 * len(adminAddrs) {
			if err := <-errs; err != nil {
				fail(err)
			}
		}
	}
}

// run runs one fio phase and returns IOPS (4k) or MiB/s (1m).
func run(target, uri, file, size, rw, bs string, runtime time.Duration, sync bool) float64 {
	args := []string{"--name=p", "--rw=" + rw, "--bs=" + bs, "--iodepth=32", "--size=" + strings.TrimSuffix(size, "iB"), "--output-format=json"}
	if runtime > 0 {
		args = append(args, "--time_based", fmt.Sprintf("--runtime=%ds", int(runtime.Seconds())), "--ramp_time=2s")
	}
	if target == "nbd" {
		args = append(args, "--ioengine=nbd", "--uri="+uri)
	} else {
		args = append(args, "--ioengine=libaio", "--direct=1", "--filename="+file)
		if sync {
			args = append(args, "--fdatasync=1")
		}
	}
	out, err := fioCommand(args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		fail(fmt.Errorf("fio %v: %v\n%s%s", args, err, out, stderr))
	}
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:] // the nbd engine prints a line first
	}
	var res struct {
		Jobs []struct {
			Read, Write struct {
				IOPS float64 `json:"iops"`
				BW   float64 `json:"bw_bytes"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		fail(fmt.Errorf("fio output: %v\n%s", err, out))
	}
	st := res.Jobs[0].Read
	if strings.Contains(rw, "write") {
		st = res.Jobs[0].Write
	}
	if bs == "1m" {
		return st.BW / (1 << 20)
	}
	return st.IOPS
}

// fioHome, if set, is the HOME fio runs with, as an unprivileged user (--tls): libnbd
// reads an nbds:// URI's client certificate from $HOME/.pki/libnbd (from /etc/pki/libnbd
// for root), and fio's nbd engine does not allow a URI to name a directory of files
// (tls-certificates=).
var fioHome string

func fioCommand(args ...string) *exec.Cmd {
	if fioHome == "" {
		return exec.Command("fio", args...)
	}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "fio"}, args...)...)
	} else {
		cmd = exec.Command("fio", args...)
	}
	cmd.Env = append(os.Environ(), "HOME="+fioHome)
	return cmd
}

// cleanups run, last first, when fail ends the run (os.Exit skips deferred calls): the
// nodes stopped, the work directory removed.
var cleanups []func()

func fail(err error) {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	fmt.Fprintln(os.Stderr, "volbench:", err)
	os.Exit(1)
}

// snapshotBench is --snapshots. The volume "bench" (of --size) is attached at uri.
func snapshotBench(bin, work, uri string, vol func(args ...string) []byte, nodes int) {
	type snapInfo struct {
		CommandBytes int     `json:"command_bytes"`
		Millis       float64 `json:"millis"`
	}
	fmt.Printf("cairn volume snapshots, %d node(s)\n", nodes)
	fmt.Printf("%-9s %-9s %12s %12s %14s\n", "size", "op", "server ms", "CLI ms", "map bytes")
	for _, size := range []string{"1GiB", "1TiB"} {
		name := "snap" + size
		vol("create", name, "--size", size)
		var v struct{ URI string }
		if err := json.Unmarshal(vol("attach", name), &v); err != nil {
			fail(err)
		}
		fio(v.URI, "--rw=write", "--bs=1m", "--size=8m") // some data
		for i := range 5 {
			start := time.Now()
			var si snapInfo
			if err := json.Unmarshal(vol("snapshot", name, fmt.Sprintf("s%d", i)), &si); err != nil {
				fail(err)
			}
			fmt.Printf("%-9s %-9s %12.1f %12.1f %14d\n", size, "snapshot", si.Millis, float64(time.Since(start).Microseconds())/1000, si.CommandBytes)
		}
		for i := range 5 {
			start := time.Now()
			vol("clone", fmt.Sprintf("%s@s%d", name, i), fmt.Sprintf("%s-c%d", name, i))
			fmt.Printf("%-9s %-9s %12s %12.1f %14s\n", size, "clone", "-", float64(time.Since(start).Microseconds())/1000, "1 command")
		}
	}
	// Copy on write: the volume filled, a snapshot, then one 4 KiB write into each of
	// 64 data objects (each copies its 4 MiB object first), then the same writes again.
	fio(uri, "--rw=write", "--bs=1m", "--size=256m")
	vol("snapshot", "bench", "cow")
	cow := fio(uri, "--rw=write:4092k", "--bs=4k", "--size=256m", "--iodepth=1")
	steady := fio(uri, "--rw=write:4092k", "--bs=4k", "--size=256m", "--iodepth=1")
	fmt.Printf("\n4 KiB writes, one per 4 MiB data object, iodepth 1 (64 writes)\n")
	fmt.Printf("first after a snapshot (copy on write): %8.2f ms mean, %6.0f IOPS\n", cow.lat, cow.iops)
	fmt.Printf("the same again (steady state):           %8.2f ms mean, %6.0f IOPS\n", steady.lat, steady.iops)
	// Export: full against incremental (64 MiB of 4 KiB random writes between).
	fio(uri, "--rw=write", "--bs=1m", "--size=1g")
	vol("snapshot", "bench", "e1")
	fio(uri, "--rw=randwrite", "--bs=4k", "--size=64m", "--io_size=16m", "--randrepeat=0") // within 16 data objects
	vol("snapshot", "bench", "e2")
	export := func(args ...string) (time.Duration, int64) {
		out := filepath.Join(work, "export")
		start := time.Now()
		cmd := exec.Command(bin, append([]string{"volume", "--admin", adminAddr, "export", "--quiet"}, append(args, out)...)...)
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+secret)
		if b, err := cmd.CombinedOutput(); err != nil {
			fail(fmt.Errorf("export %v: %v\n%s", args, err, b))
		}
		d := time.Since(start)
		fi, _ := os.Stat(out)
		os.Remove(out)
		return d, fi.Size()
	}
	fd, fb := export("bench@e2")
	id, ib := export("bench@e2", "--since", "e1")
	fmt.Printf("\nexport of a 1 GiB snapshot (filled; 16 MiB of 4 KiB random writes into its first 64 MiB since the previous one)\n")
	fmt.Printf("full:        %8.2f s, %8.1f MiB written, %7.1f MiB/s of volume\n", fd.Seconds(), float64(fb)/(1<<20), 1024/fd.Seconds())
	fmt.Printf("incremental: %8.2f s, %8.1f MiB written, %7.1f MiB/s of volume\n", id.Seconds(), float64(ib)/(1<<20), 1024/id.Seconds())
}

type fioResult struct{ iops, lat float64 }

// fio runs one fio job against an NBD URI and returns the write IOPS and mean latency (ms).
func fio(uri string, args ...string) fioResult {
	args = append([]string{"--name=p", "--ioengine=nbd", "--uri=" + uri, "--output-format=json"}, args...)
	out, err := exec.Command("fio", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		fail(fmt.Errorf("fio %v: %v\n%s%s", args, err, out, stderr))
	}
	if i := strings.IndexByte(string(out), '{'); i > 0 {
		out = out[i:]
	}
	var res struct {
		Jobs []struct {
			Write struct {
				IOPS float64 `json:"iops"`
				Lat  struct {
					Mean float64 `json:"mean"`
				} `json:"clat_ns"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) == 0 {
		fail(fmt.Errorf("fio output: %v\n%s", err, out))
	}
	return fioResult{res.Jobs[0].Write.IOPS, res.Jobs[0].Write.Lat.Mean / 1e6}
}

// ecBench compares a volume in an erasure-coded class with the replicated one, uri.
func ecBench(bin, uri string, vol func(args ...string) []byte, code, size string, nodes int, runtime time.Duration) {
	cmd := exec.Command(bin, "admin", "--admin", adminAddr, "class", "create", "ECBENCH", "--ec", code)
	cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+secret)
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("class create: %v\n%s", err, out))
	}
	vol("create", "benchec", "--size", size, "--class", "ECBENCH")
	var v struct{ URI string }
	if err := json.Unmarshal(vol("attach", "benchec"), &v); err != nil {
		fail(err)
	}
	phases := []struct{ name, rw, bs string }{
		{"1m write", "write", "1m"},
		{"1m read", "read", "1m"},
		{"4k randwrite", "randwrite", "4k"},
		{"4k randread", "randread", "4k"},
	}
	for _, u := range []string{uri, v.URI} {
		run("nbd", u, "", size, "write", "1m", 0, false) // filled: reads read data
	}
	fmt.Printf("cairn volumes over NBD, %d nodes: erasure-coded %s vs 3 copies; fio iodepth 32, %s per phase\n", nodes, code, runtime)
	fmt.Printf("%-14s %14s %14s %9s\n", "phase", "EC "+code, "3 copies", "ratio")
	for _, p := range phases {
		e := run("nbd", v.URI, "", size, p.rw, p.bs, runtime, false)
		r := run("nbd", uri, "", size, p.rw, p.bs, runtime, false)
		unit := "IOPS"
		if p.bs == "1m" {
			unit = "MiB/s"
		}
		fmt.Printf("%-14s %14s %14s %9.2f\n", p.name, fmt.Sprintf("%.0f %s", e, unit), fmt.Sprintf("%.0f %s", r, unit), e/r)
	}
}

// tlsBench is --tls: the same phases against a volume over plain NBD and one over NBD
// with TLS, each on a single-node cluster of its own, alternated phase by phase.
func tlsBench(bin, work, size string, runtime time.Duration) {
	plainDir, tlsDir := filepath.Join(work, "plain"), filepath.Join(work, "tls")
	for _, d := range []string{plainDir, tlsDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fail(err)
		}
	}
	plainURI, _, stopPlain := startCairn(bin, plainDir, 1, size)
	defer stopPlain()
	tlsURI, vol, stopTLS := startCairn(bin, tlsDir, 1, size, "--nbd-tls", "require")
	defer stopTLS()
	fioHome = filepath.Join(work, "home")
	certs := filepath.Join(fioHome, ".pki", "libnbd")
	if err := os.MkdirAll(filepath.Dir(certs), 0o755); err != nil {
		fail(err)
	}
	vol("client-cert", "volbench", "--volumes", "bench", "--out", certs)
	if !strings.HasPrefix(tlsURI, "nbds://") {
		fail(fmt.Errorf("the TLS volume's URI is %s, want nbds://", tlsURI))
	}
	if os.Geteuid() == 0 { // fio runs as nobody (both sides, to compare like with like)
		if err := os.Chmod(work, 0o755); err != nil { // MkdirTemp made it 0700
			fail(err)
		}
		if out, err := exec.Command("chown", "-R", "65534:65534", fioHome).CombinedOutput(); err != nil {
			fail(fmt.Errorf("chown: %v\n%s", err, out))
		}
	}
	phases := []struct{ name, rw, bs string }{
		{"4k randread", "randread", "4k"},
		{"4k randwrite", "randwrite", "4k"},
		{"1m read", "read", "1m"},
		{"1m write", "write", "1m"},
	}
	for _, u := range []string{plainURI, tlsURI} {
		run("nbd", u, "", size, "write", "1m", 0, false) // filled: reads read data
	}
	fmt.Printf("cairn volume over NBD with TLS 1.3 (client certificate) vs plain, one node each, same disk; fio iodepth 32, %s per phase\n", runtime)
	fmt.Printf("%-14s %14s %14s %9s\n", "phase", "TLS", "plain", "ratio")
	for _, p := range phases {
		tl := run("nbd", tlsURI, "", size, p.rw, p.bs, runtime, false)
		pl := run("nbd", plainURI, "", size, p.rw, p.bs, runtime, false)
		unit := "IOPS"
		if p.bs == "1m" {
			unit = "MiB/s"
		}
		fmt.Printf("%-14s %14s %14s %9.2f\n", p.name, fmt.Sprintf("%.0f %s", tl, unit), fmt.Sprintf("%.0f %s", pl, unit), tl/pl)
	}
}
