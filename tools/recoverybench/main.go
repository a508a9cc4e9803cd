// Command recoverybench measures self-healing on a loopback cairn cluster
// (docs/benchmarks.md, "Recovery (self-healing)"), in one run:
//
//  1. the disk's sequential write rate, in the filesystem of the nodes' data directories:
//     --disk-size in 4 MiB blocks, fsync at the end (page cache), and the same with
//     O_DIRECT (how cairn writes large chunks);
//  2. the re-protection rate after a node loss with the copy rate unlimited: the cluster
//     (--nodes, N=3) is filled with --fill bytes in --object-size objects, one node is
//     killed (SIGKILL) and marked out, and the time until every survivor's sync round is
//     done is taken by polling `cairn admin --json recovery` (which also gives the objects
//     and bytes copied); a sample of objects is then checked replica by replica with
//     `cairn admin placement`. Reported as MiB/s, objects/s and the ratio to the disk's
//     sequential write rate;
//  3. what clients pay: `cairn bench get` (4 KiB objects, --get-clients) through a
//     surviving gateway with no recovery running, then during the recovery of a second
//     node loss at the default copy rate (64 MiB/s per node, --during-rate): ops/s, p50
//     and p99.
//
// The CPU used by this run's processes and by every other process is reported per phase:
// the figures mean little on a busy machine.
//
// Usage:
//
//	go run ./tools/recoverybench --cairn bin/cairn [--fill 1GiB] [--object-size 1MiB]
//	    [--disk-size 512MiB] [--get-duration 5s] [--get-clients 16] [--during-rate 64MiB]
//	    [--dir DIR] [--keep] [--log-level debug]
package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cairnfs/cairn/internal/proc"
)

const (
	accessKey     = "CAIRNRECOVERYBENCH01"
	secretKey     = "recoverybench-secret-key-0123456789abcd"
	clusterSecret = "recoverybench-cluster-secret-0123456789abcdef"
	defaultRate   = "64MiB" // the server's --recovery-rate default
)

type config struct {
	bin         string
	dir         string
	keep        bool
	nodes       int
	zones       int
	diskSize    int64
	fill        int64
	objectSize  int64
	fillClients int
	verify      int
	getDuration time.Duration
	getClients  int
	getKeys     int
	duringRate  string
	timeout     time.Duration
	logLevel    string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("recoverybench: ")
	var cfg config
	var diskSize, fill, objSize string
	flag.StringVar(&cfg.bin, "cairn", "bin/cairn", "cairn binary")
	flag.StringVar(&cfg.dir, "dir", "", "directory for the data directories and the disk test file (default: a new one under $TMPDIR)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the directory (data and node logs) at the end")
	flag.IntVar(&cfg.nodes, "nodes", 5, "cluster size (N=3; two nodes are lost, so at least 5)")
	flag.IntVar(&cfg.zones, "zones", 0, "zones, round robin (default: one per node, so every node holds 3/nodes of the objects)")
	flag.StringVar(&diskSize, "disk-size", "512MiB", "bytes written by the disk test (4 MiB blocks)")
	flag.StringVar(&fill, "fill", "1GiB", "bytes of objects written before the first node loss")
	flag.StringVar(&objSize, "object-size", "1MiB", "size of the fill objects")
	flag.IntVar(&cfg.fillClients, "fill-clients", 8, "concurrent PUTs of the fill")
	flag.IntVar(&cfg.verify, "verify", 200, "objects checked replica by replica after the recovery")
	flag.DurationVar(&cfg.getDuration, "get-duration", 5*time.Second, "length of the 4 KiB GET measurement without recovery (the one during recovery lasts as long as the recovery)")
	flag.IntVar(&cfg.getClients, "get-clients", 16, "concurrent 4 KiB GETs")
	flag.IntVar(&cfg.getKeys, "get-keys", 1000, "4 KiB objects read")
	flag.StringVar(&cfg.duringRate, "during-rate", defaultRate, "copy rate per node (cairn admin recovery set --rate) during the second recovery")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "give up on a recovery after this long")
	flag.StringVar(&cfg.logLevel, "log-level", "info", "the nodes' --log-level (debug logs every failed copy with its cause; see --keep)")
	flag.Parse()
	var err error
	if cfg.diskSize, err = parseSize(diskSize); err != nil {
		fatalf("--disk-size: %v", err)
	}
	if cfg.fill, err = parseSize(fill); err != nil {
		fatalf("--fill: %v", err)
	}
	if cfg.objectSize, err = parseSize(objSize); err != nil || cfg.objectSize == 0 {
		fatalf("--object-size: %v", err)
	}
	if cfg.nodes < 5 {
		fatalf("--nodes %d: want at least 5 (N=3, and two nodes are lost)", cfg.nodes)
	}
	if cfg.zones <= 0 {
		cfg.zones = cfg.nodes
	}
	if cfg.dir == "" {
		cfg.dir, err = os.MkdirTemp("", "recoverybench-")
	} else {
		err = os.MkdirAll(cfg.dir, 0o755)
	}
	if err != nil {
		fatalf("%v", err)
	}
	b := &bench{cfg: cfg}
	var once sync.Once
	atExit = func() { once.Do(b.cleanup) }
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		log.Print("interrupted: stopping the nodes")
		atExit()
		os.Exit(130)
	}()
	b.run()
	atExit()
}

// atExit stops the nodes (and removes the directory unless --keep); fatalf runs it.
var atExit = func() {}

func fatalf(format string, args ...any) {
	log.Printf(format, args...)
	atExit()
	os.Exit(1)
}

// node is one cairn server of the cluster (internal/proc); its output is in DIR/nodeI.log.
type node struct {
	id, s3, admin, addr string // addresses it bound (its ready file)
	p                   *proc.Proc
}

type bench struct {
	cfg   config
	nodes []*node

	diskBuffered, diskDirect float64 // MiB/s
	fillObjects              int
	fillBytes                int64
	fillTook                 time.Duration
	fillETags                map[string]string

	rec1 recovery
	rec2 recovery

	getBase, getDuring getResult

	cpu []string // table rows: CPU the nodes and other processes used, per phase
}

// cpuWatch measures the CPU that processes other than this one and its descendants (the
// nodes, the admin CLI, cairn bench) used during a phase: the machine is shared.
type cpuWatch struct {
	start  time.Time
	before map[int]procInfo
}

func watchCPU() cpuWatch { return cpuWatch{time.Now(), processes()} }

// cores returns, in cores since the watch started, the CPU this process and its
// descendants that lived through the phase (the nodes) used, and the CPU of every other
// process (-1: unknown).
func (w cpuWatch) cores() (nodes, others float64) {
	after := processes()
	if w.before == nil || after == nil {
		return -1, -1
	}
	self := os.Getpid()
	mine := func(pid int) bool {
		for i := 0; i < 64 && pid > 1; i++ {
			if pid == self {
				return true
			}
			pid = after[pid].ppid
		}
		return false
	}
	var m, o time.Duration
	for pid, a := range after {
		b, ok := w.before[pid]
		switch {
		case !ok:
		case mine(pid):
			m += a.cpu - b.cpu
		default:
			o += a.cpu - b.cpu
		}
	}
	d := time.Since(w.start).Seconds()
	return m.Seconds() / d, o.Seconds() / d
}

// phaseDone records the CPU of a phase, and says so if other processes were busy.
func (b *bench) phaseDone(name string, w cpuWatch) {
	nodes, others := w.cores()
	if others < 0 {
		return
	}
	b.cpu = append(b.cpu, fmt.Sprintf("| %s | %.2f | %.2f |", name, nodes, others))
	if others > 0.1 {
		log.Printf("%s: other processes used %.2f cores meanwhile: the figures are disturbed", name, others)
	}
}

// recovery is what one node loss cost to repair.
type recovery struct {
	lost          string
	objects       int64 // copied, from the sync rounds' figures
	bytes         int64
	errors        int
	present       int    // versions that arrived during the round (read repair), not copied
	firstError    string // a node's first_error, if any
	rounds        int
	firstStart    time.Time // earliest round start on a survivor
	lastEnd       time.Time // latest round end
	markedOut     time.Time
	verified      time.Time // the sample checked replica by replica
	verifiedCount int
}

func (r *recovery) took() time.Duration { return r.lastEnd.Sub(r.markedOut) }

type getResult struct {
	ops, p50, p99 float64 // ops/s, ms
	count, errors int64
	seconds       float64
}

func (b *bench) cleanup() {
	var wg sync.WaitGroup
	for _, n := range b.nodes {
		if n.p != nil && n.p.Running() {
			wg.Add(1)
			go func() { defer wg.Done(); n.p.Stop() }()
		}
	}
	wg.Wait()
	if b.cfg.keep {
		log.Printf("kept %s", b.cfg.dir)
		return
	}
	os.RemoveAll(b.cfg.dir)
}

func (n *node) dead() bool { return n.p == nil || !n.p.Running() }

func (b *bench) run() {
	cfg := b.cfg
	started := time.Now()
	log.Printf("disk: writing %s sequentially in %s", human(cfg.diskSize), cfg.dir)
	w := watchCPU()
	b.diskBuffered = diskWrite(filepath.Join(cfg.dir, "disktest"), cfg.diskSize, false)
	b.diskDirect = diskWrite(filepath.Join(cfg.dir, "disktest"), cfg.diskSize, true)
	b.phaseDone("disk", w)
	log.Printf("disk: %.0f MiB/s buffered + fsync, %.0f MiB/s O_DIRECT", b.diskBuffered, b.diskDirect)

	b.startCluster()
	w = watchCPU()
	b.fillCluster()
	b.phaseDone("fill", w)

	// A node lost, copying unthrottled.
	b.admin("recovery", "set", "--rate", "unlimited")
	w = watchCPU()
	b.rec1 = b.loseNode(len(b.nodes)-1, nil)
	b.phaseDone("recovery", w)
	b.verifySample(&b.rec1)

	// What clients see: 4 KiB GETs without and during a recovery at the default rate.
	b.admin("recovery", "set", "--rate", cfg.duringRate)
	w = watchCPU()
	b.getBase = b.benchGet(cfg.getDuration)
	b.phaseDone("GET", w)
	var stop func() getResult
	b.rec2 = b.loseNode(len(b.nodes)-2, func() { w = watchCPU(); stop = b.startBenchGet() })
	b.getDuring = stop()
	b.phaseDone("GET during recovery", w)
	b.verifySample(&b.rec2)
	b.report(started)
}

// diskWrite writes size bytes to path in 4 MiB blocks, fsyncs, and returns MiB/s; with
// direct, through O_DIRECT (0 where unsupported).
func diskWrite(path string, size int64, direct bool) float64 {
	const block = 4 << 20
	buf := alignedBlock(block)
	rand.NewChaCha8([32]byte{1}).Read(buf)
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if direct {
		if oDirect == 0 {
			return 0
		}
		flags |= oDirect
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		if direct {
			log.Printf("disk: O_DIRECT not available here: %v", err)
			return 0
		}
		fatalf("%v", err)
	}
	defer os.Remove(path)
	start := time.Now()
	for n := int64(0); n < size; n += block {
		buf[0]++ // not the same block twice
		if _, err := f.Write(buf); err != nil {
			fatalf("disk test: %v", err)
		}
	}
	if err := f.Sync(); err != nil {
		fatalf("disk test: fsync: %v", err)
	}
	took := time.Since(start)
	f.Close()
	written := (size + block - 1) / block * block
	return float64(written) / (1 << 20) / took.Seconds()
}

// alignedBlock returns n bytes aligned to 4096 (O_DIRECT needs it).
func alignedBlock(n int) []byte {
	b := make([]byte, n+4096)
	off := int(4096 - uintptr(unsafe.Pointer(&b[0]))%4096)
	if off == 4096 {
		off = 0
	}
	return b[off : off+n]
}

func (b *bench) startCluster() {
	log.Printf("starting %d nodes (N=3, %d zones)", b.cfg.nodes, b.cfg.zones)
	for i := 0; i < b.cfg.nodes; i++ {
		n := &node{id: fmt.Sprintf("node%d", i+1)}
		args := []string{"--node-id", n.id, "--zone", fmt.Sprintf("z%d", i%b.cfg.zones+1), "--log-level", b.cfg.logLevel}
		if i > 0 {
			args = append(args, "--join", b.nodes[0].addr)
		}
		b.nodes = append(b.nodes, n)
		b.start(n, args)
	}
}

// start runs n and waits until it is ready (its ready file); its output goes to
// DIR/nodeI.log, its data to DIR/nodeI.
func (b *bench) start(n *node, args []string) {
	p, err := proc.Start(context.Background(), proc.Config{Bin: b.cfg.bin, Name: n.id, Dir: b.cfg.dir, Args: args, StartTimeout: 90 * time.Second,
		StopTimeout: 30 * time.Second, Env: []string{"CAIRN_ACCESS_KEY=" + accessKey, "CAIRN_SECRET_KEY=" + secretKey, "CAIRN_CLUSTER_SECRET=" + clusterSecret}})
	if err != nil {
		fatalf("%v", err)
	}
	n.p = p
	n.s3, n.admin, n.addr = p.S3Addr(), p.AdminAddr(), p.NodeAddr()
}

// admin runs `cairn admin ARGS` against the first node and returns its output.
func (b *bench) admin(args ...string) []byte {
	for attempt := 0; ; attempt++ {
		cmd := exec.Command(b.cfg.bin, append([]string{"admin", "--admin", b.nodes[0].admin}, args...)...)
		cmd.Env = append(os.Environ(), "CAIRN_CLUSTER_SECRET="+clusterSecret)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil {
			return out
		}
		if attempt == 20 {
			fatalf("admin %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
		}
		time.Sleep(250 * time.Millisecond) // e.g. a Raft election
	}
}

func (b *bench) client(i int) *s3.Client {
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + b.nodes[i].s3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, ""), RetryMaxAttempts: 1,
		HTTPClient: &http.Client{Timeout: 2 * time.Minute}})
}

// fillCluster writes --fill bytes of random --object-size objects into bucket "fill",
// through the first three gateways.
func (b *bench) fillCluster() {
	ctx := context.Background()
	if _, err := b.client(0).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("fill")}); err != nil {
		fatalf("%v", err)
	}
	n := int((b.cfg.fill + b.cfg.objectSize - 1) / b.cfg.objectSize)
	log.Printf("fill: %d objects of %s", n, human(b.cfg.objectSize))
	clients := []*s3.Client{b.client(0), b.client(1), b.client(2)}
	b.fillETags = map[string]string{}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < b.cfg.fillClients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := rand.NewChaCha8([32]byte{byte(w), 2})
			data := make([]byte, b.cfg.objectSize)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				src.Read(data)
				key := fmt.Sprintf("obj/%06d", i)
				sum := md5.Sum(data)
				if _, err := clients[i%3].PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("fill"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
					fatalf("fill: put %s: %v", key, err)
				}
				mu.Lock()
				b.fillETags[key] = hex.EncodeToString(sum[:])
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.fillTook = time.Since(start)
	b.fillObjects, b.fillBytes = n, int64(n)*b.cfg.objectSize
	log.Printf("fill: %s in %.1fs (%.0f MiB/s of client data)", human(b.fillBytes), b.fillTook.Seconds(), mib(b.fillBytes)/b.fillTook.Seconds())
	// Let the sync rounds the joins started end, so they are not counted as recovery.
	b.waitIdle(time.Time{}, nil)
}

// JSON shapes of `cairn admin --json recovery` and `status` (the fields used here).
type recoveryJSON struct {
	Nodes []struct {
		Node        string    `json:"node"`
		Running     bool      `json:"running"`
		Started     time.Time `json:"started"`
		ObjectsToDo int64     `json:"objects_to_move"`
		BytesToDo   int64     `json:"bytes_to_move"`
		ObjectsDone int64     `json:"objects_done"`
		BytesDone   int64     `json:"bytes_done"`
		Error       string    `json:"error"`
	} `json:"nodes"`
}

type statusJSON struct {
	Nodes []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Stats *struct {
			LastSync *struct {
				Start      time.Time `json:"start"`
				Errors     int       `json:"errors"`
				Present    int       `json:"present"`
				FirstError string    `json:"first_error"`
			} `json:"last_sync"`
		} `json:"stats"`
	} `json:"nodes"`
}

// round is one sync round of one node, as seen by polling `cairn admin recovery`.
type round struct {
	objects, bytes int64
	started, ended time.Time // ended: the first poll that saw it done (within one poll interval)
}

// waitIdle polls `cairn admin --json recovery` until every storage node that answers has
// run a round that started after since and none is running; the rounds seen go to seen
// (by node and start).
func (b *bench) waitIdle(since time.Time, seen map[string]*round) {
	deadline := time.Now().Add(b.cfg.timeout)
	lastLog := time.Now()
	for {
		var rec recoveryJSON
		if err := json.Unmarshal(b.admin("--json", "recovery"), &rec); err != nil {
			fatalf("admin recovery --json: %v", err)
		}
		now := time.Now()
		idle := len(rec.Nodes) > 0
		for _, n := range rec.Nodes {
			if n.Error != "" {
				continue
			}
			if n.Running || n.Started.Before(since) || n.Started.IsZero() {
				idle = false
			}
			if seen == nil || n.Started.Before(since) || n.Started.IsZero() {
				continue
			}
			k := n.Node + "@" + n.Started.Format(time.RFC3339Nano)
			r := seen[k]
			if r == nil {
				r = &round{started: n.Started}
				seen[k] = r
			}
			r.objects, r.bytes = n.ObjectsDone, n.BytesDone
			if !n.Running && r.ended.IsZero() {
				r.ended = now
			}
		}
		if idle {
			return
		}
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			var st []string
			for _, n := range rec.Nodes {
				st = append(st, fmt.Sprintf("%s running=%v started=%s done=%d/%d %s", n.Node, n.Running, n.Started.Format("15:04:05.000"),
					n.ObjectsDone, n.ObjectsToDo, n.Error))
			}
			log.Printf("recovery: %s", strings.Join(st, "; "))
		}
		if time.Now().After(deadline) {
			fatalf("recovery not done after %s", b.cfg.timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// loseNode kills node i, marks it out, and waits until the survivors' recovery rounds are
// done. running, if set, is called once the first round is under way.
func (b *bench) loseNode(i int, running func()) recovery {
	n := b.nodes[i]
	r := recovery{lost: n.id}
	log.Printf("killing %s and marking it out", n.id)
	n.p.Kill()
	r.markedOut = time.Now()
	b.admin("mark", n.id, "out")
	if running != nil {
		for deadline := time.Now().Add(30 * time.Second); ; {
			var rec recoveryJSON
			json.Unmarshal(b.admin("--json", "recovery"), &rec)
			started := false
			for _, x := range rec.Nodes {
				started = started || (x.Running && !x.Started.Before(r.markedOut))
			}
			if started {
				break
			}
			if time.Now().After(deadline) {
				fatalf("no recovery round started within 30s of the mark-out")
			}
			time.Sleep(50 * time.Millisecond)
		}
		running()
	}
	seen := map[string]*round{}
	b.waitIdle(r.markedOut, seen)
	for _, x := range seen {
		r.objects += x.objects
		r.bytes += x.bytes
		if r.firstStart.IsZero() || x.started.Before(r.firstStart) {
			r.firstStart = x.started
		}
		if x.ended.After(r.lastEnd) {
			r.lastEnd = x.ended
		}
	}
	r.rounds = len(seen)
	// Copy errors, from each node's last sync round.
	var st statusJSON
	if err := json.Unmarshal(b.admin("--json", "status"), &st); err != nil {
		fatalf("admin status --json: %v", err)
	}
	for _, x := range st.Nodes {
		if x.Stats != nil && x.Stats.LastSync != nil && !x.Stats.LastSync.Start.Before(r.markedOut) {
			r.errors += x.Stats.LastSync.Errors
			r.present += x.Stats.LastSync.Present
			if r.firstError == "" && x.Stats.LastSync.FirstError != "" {
				r.firstError = x.ID + ": " + x.Stats.LastSync.FirstError
			}
		}
	}
	log.Printf("%s lost: %d objects, %s copied in %d rounds, %.2fs from the mark-out to the last round's end (%.0f MiB/s), %d copy errors (%s), %d present (arrived meanwhile)",
		n.id, r.objects, human(r.bytes), r.rounds, r.took().Seconds(), mib(r.bytes)/r.took().Seconds(), r.errors, r.firstError, r.present)
	return r
}

// verifySample checks --verify fill objects replica by replica: on 3 nodes, none of them
// lost, each with the ETag written. It waits (up to --timeout) for stragglers.
func (b *bench) verifySample(r *recovery) {
	keys := make([]string, 0, len(b.fillETags))
	for k := range b.fillETags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rnd := rand.New(rand.NewPCG(uint64(len(r.lost)), 42))
	rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:min(len(keys), b.cfg.verify)]
	var lost []string
	for _, n := range b.nodes {
		if n.dead() {
			lost = append(lost, n.id)
		}
	}
	deadline := time.Now().Add(b.cfg.timeout)
	for len(keys) > 0 {
		var bad []string
		problem := ""
		for _, k := range keys {
			if p := b.placementProblem(k, b.fillETags[k], lost); p != "" {
				bad = append(bad, k)
				problem = k + ": " + p
			}
		}
		r.verifiedCount += len(keys) - len(bad)
		if len(bad) == 0 {
			break
		}
		if time.Now().After(deadline) {
			fatalf("%d sampled objects still not on 3 nodes after %s, e.g. %s", len(bad), b.cfg.timeout, problem)
		}
		log.Printf("%d sampled objects not yet on 3 nodes (e.g. %s); waiting", len(bad), problem)
		keys = bad
		time.Sleep(time.Second)
	}
	r.verified = time.Now()
	log.Printf("verified %d objects replica by replica", r.verifiedCount)
}

func (b *bench) placementProblem(key, etag string, lost []string) string {
	var pl struct {
		Nodes    []string `json:"nodes"`
		Replicas []struct {
			Node    string `json:"node"`
			HLC     uint64 `json:"hlc"`
			ETag    string `json:"etag"`
			Deleted bool   `json:"deleted"`
			Missing bool   `json:"missing"`
			Error   string `json:"error"`
		} `json:"replicas"`
	}
	if err := json.Unmarshal(b.admin("--json", "placement", "fill", key), &pl); err != nil {
		return err.Error()
	}
	if len(pl.Nodes) != 3 || len(pl.Replicas) != 3 {
		return fmt.Sprintf("%d nodes, %d replicas", len(pl.Nodes), len(pl.Replicas))
	}
	for _, x := range pl.Replicas {
		switch {
		case slices.Contains(lost, x.Node):
			return "placed on lost node " + x.Node
		case x.Error != "" || x.Missing || x.Deleted || x.ETag != etag:
			return fmt.Sprintf("replica on %s: etag %q missing=%v deleted=%v error=%q", x.Node, x.ETag, x.Missing, x.Deleted, x.Error)
		case x.HLC != pl.Replicas[0].HLC:
			return "replicas hold different versions"
		}
	}
	return ""
}

// getCmd is `cairn bench get` on 4 KiB objects through the first node, writing its
// report to the returned path; with noPrepare it reads the objects already in bucket
// "small", else it writes them first (and keeps them).
func (b *bench) getCmd(d time.Duration, noPrepare bool) (*exec.Cmd, string) {
	jf := filepath.Join(b.cfg.dir, fmt.Sprintf("get-%d.json", time.Now().UnixNano()))
	args := []string{"bench", "get", "--endpoint", "http://" + b.nodes[0].s3, "--access-key", accessKey, "--secret-key", secretKey,
		"--bucket", "small", "--size", "4KiB", "--keys", strconv.Itoa(b.cfg.getKeys), "--concurrency", strconv.Itoa(b.cfg.getClients),
		"--duration", d.String(), "--keep", "--json", jf, "--quiet"}
	if noPrepare {
		args = append(args, "--no-prepare")
	}
	cmd := exec.Command(b.cfg.bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd, jf
}

// benchGet measures 4 KiB GETs for d with no recovery running.
func (b *bench) benchGet(d time.Duration) getResult {
	log.Printf("4 KiB GET, %d clients, no recovery", b.cfg.getClients)
	cmd, jf := b.getCmd(d, false)
	if err := cmd.Run(); err != nil {
		fatalf("bench get: %v", err)
	}
	return readGet(jf)
}

// startBenchGet starts 4 KiB GETs of the objects already written; the function returned
// interrupts them (as Ctrl-C does: the bench reports what it measured) and returns the
// figures.
func (b *bench) startBenchGet() func() getResult {
	log.Printf("4 KiB GET, %d clients, during the recovery", b.cfg.getClients)
	cmd, jf := b.getCmd(time.Hour, true)
	if err := cmd.Start(); err != nil {
		fatalf("%v", err)
	}
	return func() getResult {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait() // exit status 130: interrupted, figures written
		return readGet(jf)
	}
}

func readGet(jf string) getResult {
	data, err := os.ReadFile(jf)
	if err != nil {
		fatalf("bench get: %v", err)
	}
	var rep struct {
		Results []struct {
			Count     int64   `json:"count"`
			Errors    int64   `json:"errors"`
			OpsPerSec float64 `json:"ops_per_sec"`
			Seconds   float64 `json:"seconds"`
			Latency   struct {
				P50 float64 `json:"p50"`
				P99 float64 `json:"p99"`
			} `json:"latency_ms"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &rep); err != nil || len(rep.Results) == 0 {
		fatalf("bench get: bad report %s: %v", jf, err)
	}
	x := rep.Results[0]
	return getResult{ops: x.OpsPerSec, p50: x.Latency.P50, p99: x.Latency.P99, count: x.Count, errors: x.Errors, seconds: x.Seconds}
}

func (b *bench) report(started time.Time) {
	cpu := "unknown"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	ver, _ := exec.Command(b.cfg.bin, "version").Output()
	fmt.Printf("\nrecoverybench %s, %s; %d cores (%s), %s; %d nodes, %d zones, N=3; took %s\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(ver)), runtime.NumCPU(), cpu, runtime.Version(),
		b.cfg.nodes, b.cfg.zones, time.Since(started).Round(time.Second))
	fmt.Println("| measurement | figure | goal |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| disk sequential write, 4 MiB blocks, fsync at the end (%s) | %.0f MiB/s | |\n", human(b.cfg.diskSize), b.diskBuffered)
	if b.diskDirect > 0 {
		fmt.Printf("| the same with O_DIRECT (how cairn writes chunks >= 64 KiB) | %.0f MiB/s | |\n", b.diskDirect)
	}
	fmt.Printf("| fill: %d x %s through 3 gateways, %d clients | %.1fs, %.0f MiB/s of client data | |\n", b.fillObjects, human(b.cfg.objectSize),
		b.cfg.fillClients, b.fillTook.Seconds(), mib(b.fillBytes)/b.fillTook.Seconds())
	r := b.rec1
	rate := mib(r.bytes) / r.took().Seconds()
	fmt.Printf("| re-protection after losing %s, unthrottled: copied | %d objects, %s in %d sync rounds, %d errors | |\n", r.lost, r.objects, human(r.bytes), r.rounds, r.errors)
	fmt.Printf("| time from the mark-out to the last round's end (first round began after %.2fs) | %.2fs | |\n", r.firstStart.Sub(r.markedOut).Seconds(), r.took().Seconds())
	fmt.Printf("| **re-protection rate** | **%.0f MiB/s**, %.0f objects/s | |\n", rate, float64(r.objects)/r.took().Seconds())
	fmt.Printf("| ratio to the disk's sequential write (buffered + fsync / O_DIRECT) | **%.0f %%** / %.0f %% | >= 50 %% |\n", 100*rate/b.diskBuffered, 100*rate/max(b.diskDirect, 1e-9))
	fmt.Printf("| sample checked replica by replica (`admin placement`) | %d objects on 3 nodes, %.1fs after the mark-out | |\n", r.verifiedCount, r.verified.Sub(r.markedOut).Seconds())
	g0, g1 := b.getBase, b.getDuring
	fmt.Printf("| 4 KiB GET, %d clients, no recovery (%.0fs) | %.0f ops/s, p50 %.2f ms, **p99 %.2f ms**, %d errors | |\n", b.cfg.getClients, g0.seconds, g0.ops, g0.p50, g0.p99, g0.errors)
	r2 := b.rec2
	fmt.Printf("| 4 KiB GET during the recovery of %s at %s/s per node (%.1fs) | %.0f ops/s, p50 %.2f ms, **p99 %.2f ms**, %d errors | |\n", r2.lost, b.cfg.duringRate, g1.seconds, g1.ops, g1.p50, g1.p99, g1.errors)
	fmt.Printf("| p99 during / without recovery (ops/s ratio) | **%.2fx** (%.2f) | <= 2x |\n", g1.p99/g0.p99, g1.ops/g0.ops)
	fmt.Printf("| that recovery: copied | %d objects, %s in %.2fs (%.0f MiB/s over %d nodes), %d errors, %d present | |\n", r2.objects, human(r2.bytes), r2.took().Seconds(),
		mib(r2.bytes)/r2.took().Seconds(), b.cfg.nodes-2, r2.errors, r2.present)
	if len(b.cpu) > 0 {
		fmt.Printf("\n| phase | CPU of this run's processes (cores) | CPU of other processes (cores) |\n|---|---|---|\n%s\n", strings.Join(b.cpu, "\n"))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// parseSize parses a byte count with an optional KiB, MiB, GiB or TiB suffix.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 512MiB)", s)
	}
	return n * mult, nil
}
