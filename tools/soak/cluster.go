package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/cairnfs/cairn/internal/proc"
)

// cluster is N cairn server processes on loopback, each with its data directory on its
// own tmpfs mount when the process may mount one.
type cluster struct {
	cfg           *config
	log           *logger
	nodes         []*node
	access        string
	secret        string
	clusterSecret string
	tmpfs         bool // data directories are on tmpfs mounts (disk-full faults possible)
	// onExit is called (in its own goroutine) when a node exits without being told to.
	onExit func(n *node, err error)

	mu    sync.Mutex
	peak  []int64 // by node: the most tmpfs space used, fillers excluded
	total int64   // size of a tmpfs mount
}

// spaceReserve is the free space below which a node refuses writes: 2 segments of the
// --segment-size the soak passes (8 MiB) + 64 MiB.
const spaceReserve = 2*8<<20 + 64<<20

// node is one cairn server process (internal/proc); it can be killed, restarted, paused
// and resumed. Its addresses are those its first start bound (random ports below the
// ephemeral range: proc.Config.LowPorts), kept across restarts.
type node struct {
	cl      *cluster
	idx     int
	id      string
	s3Addr  string // set by the first start
	admin   string
	addr    string
	mnt     string // tmpfs mount point, "" if none
	data    string // --data
	logPath string
	args    []string // server flags other than the addresses and --data
	client  *s3.Client

	mu sync.Mutex
	p  *proc.Proc // nil until the first start
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newCluster prepares the nodes' directories and mounts; start starts them.
func newCluster(cfg *config, lg *logger) (*cluster, error) {
	c := &cluster{cfg: cfg, log: lg, access: "CAIRNSOAK" + strings.ToUpper(randHex(6)), secret: randHex(20), clusterSecret: randHex(24)}
	c.tmpfs = true // until a mount fails
	c.peak = make([]int64, cfg.nodes)
	for i := 0; i < cfg.nodes; i++ {
		n := &node{cl: c, idx: i, id: fmt.Sprintf("node%d", i+1), logPath: filepath.Join(cfg.dir, fmt.Sprintf("node%d.log", i+1))}
		root := filepath.Join(cfg.dir, n.id)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return c, err
		}
		if c.tmpfs {
			if err := mountTmpfs(root, cfg.tmpfsSize); err != nil {
				lg.printf("disk-full faults disabled: cannot mount tmpfs (%v)", err)
				c.tmpfs = false
			} else {
				n.mnt = root
			}
		}
		n.data = filepath.Join(root, "data")
		n.args = []string{"--pprof", "--node-id", n.id, "--zone", fmt.Sprintf("z%d", i%3+1), "--replicas", fmt.Sprint(cfg.replicas),
			"--down-after", cfg.downAfter.String(), "--sync-interval", cfg.syncInterval.String(),
			// Small segments and frequent compaction keep a node's space use well inside its
			// tmpfs (the free-space reserve is 2 segments + 64 MiB).
			"--segment-size", "8MiB", "--compact-interval", "5s", "--cache-size", "16MiB"}
		c.nodes = append(c.nodes, n)
	}
	if !c.tmpfs {
		var kept []string
		for _, f := range cfg.faults {
			if f != "diskfull" {
				kept = append(kept, f)
			}
		}
		cfg.faults = kept
	}
	return c, nil
}

// describe is cluster.json: what is needed to look at the nodes or restart one by hand.
func (c *cluster) describe() any {
	type nd struct {
		ID   string   `json:"id"`
		S3   string   `json:"s3"`
		Adm  string   `json:"admin"`
		Addr string   `json:"addr"`
		Log  string   `json:"log"`
		Args []string `json:"args"`
	}
	out := struct {
		AccessKey     string `json:"access_key"`
		SecretKey     string `json:"secret_key"`
		ClusterSecret string `json:"cluster_secret"`
		Nodes         []nd   `json:"nodes"`
	}{AccessKey: c.access, SecretKey: c.secret, ClusterSecret: c.clusterSecret}
	for _, n := range c.nodes {
		var args []string
		if n.p != nil {
			args = n.p.Args()
		}
		out.Nodes = append(out.Nodes, nd{n.id, n.s3Addr, n.admin, n.addr, n.logPath, args})
	}
	return out
}

// start starts every node: the first bootstraps the cluster, the others join it. Then
// it writes DIR/cluster.json, what is needed to look at the nodes or restart one by hand.
func (c *cluster) start(ctx context.Context) error {
	if err := c.nodes[0].start(ctx); err != nil {
		return err
	}
	errs := make(chan error, len(c.nodes))
	for _, n := range c.nodes[1:] {
		n.args = append(n.args, "--join", c.nodes[0].addr)
		go func() { errs <- n.start(ctx) }()
	}
	var first error
	for range c.nodes[1:] {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	for _, n := range c.nodes {
		n.client = s3.New(s3.Options{
			Region:           "us-east-1",
			BaseEndpoint:     aws.String("http://" + n.s3Addr),
			UsePathStyle:     true,
			Credentials:      credentials.NewStaticCredentialsProvider(c.access, c.secret, ""),
			RetryMaxAttempts: 1,
			HTTPClient:       &http.Client{Timeout: c.cfg.clientTO, Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}},
		})
	}
	info, _ := json.MarshalIndent(c.describe(), "", "  ")
	return os.WriteFile(filepath.Join(c.cfg.dir, "cluster.json"), info, 0o600)
}

// start starts the node's process (the first time, on new addresses; then on the same
// ones) and waits until it serves.
func (n *node) start(ctx context.Context) error {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	if p != nil {
		return p.Restart(ctx)
	}
	p, err := proc.Start(ctx, proc.Config{Bin: n.cl.cfg.cairn, Name: n.id, Dir: n.cl.cfg.dir, DataDir: n.data, LogPath: n.logPath,
		LowPorts: true, Args: n.args, SysProcAttr: procAttr(), StartTimeout: 60 * time.Second, StopTimeout: 40 * time.Second,
		Env: []string{"CAIRN_ACCESS_KEY=" + n.cl.access, "CAIRN_SECRET_KEY=" + n.cl.secret, "CAIRN_CLUSTER_SECRET=" + n.cl.clusterSecret},
		OnExit: func(_ *proc.Proc, err error) {
			if n.cl.onExit != nil {
				n.cl.onExit(n, err)
			}
		}})
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.p = p
	n.s3Addr, n.admin, n.addr = p.S3Addr(), p.AdminAddr(), p.NodeAddr()
	n.mu.Unlock()
	return nil
}

func (n *node) current() *proc.Proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p
}

// running reports whether the node's process is alive (possibly paused).
func (n *node) running() bool {
	p := n.current()
	return p != nil && p.Running()
}

// kill sends SIGKILL and waits for the process to go.
func (n *node) kill() {
	if p := n.current(); p != nil {
		p.Kill()
	}
}

// stop asks the process to stop (SIGTERM; SIGKILL after 40 s: the server gives in-flight
// requests 30 s) and waits for it. It returns how long that took, and whether the
// process had to be killed.
func (n *node) stop() (time.Duration, bool) {
	p := n.current()
	if p == nil || !p.Running() {
		return 0, false
	}
	t0 := time.Now()
	err := p.Stop()
	return time.Since(t0), errors.Is(err, proc.ErrStopTimeout)
}

func (n *node) pause() {
	if p := n.current(); p != nil {
		p.Pause()
	}
}

func (n *node) resume() {
	if p := n.current(); p != nil {
		p.Resume()
	}
}

// logTail returns the last lines of the node's log.
func (n *node) logTail(lines int) string {
	data, err := os.ReadFile(n.logPath)
	if err != nil {
		return ""
	}
	l := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return "    " + strings.Join(l, "\n    ")
}

// fillerPath is where a disk-full fault writes its filler file.
func (n *node) fillerPath() string { return filepath.Join(n.mnt, "filler") }

// fill fills the node's tmpfs with a file: space the size of what is free is allocated
// at once, then the last blocks are written until the filesystem is full.
func (n *node) fill() (int64, error) {
	f, err := os.OpenFile(n.fillerPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.mnt, &st); err == nil {
		if free := int64(st.Bavail)*int64(st.Bsize) - 1<<20; free > 0 && fallocate(f, free) == nil {
			total = free
			f.Seek(free, io.SeekStart)
		}
	}
	buf := make([]byte, 4<<10)
	for {
		k, err := f.Write(buf)
		total += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// space returns the bytes used on the node's tmpfs, the filler excluded, and its size;
// ok is false if it cannot tell (no tmpfs, or a filler came or went while it looked).
func (n *node) space() (used, total int64, ok bool) {
	if n.mnt == "" {
		return 0, 0, false
	}
	filler := func() (int64, bool) {
		var st syscall.Stat_t
		if syscall.Stat(n.fillerPath(), &st) != nil {
			return 0, false
		}
		return st.Blocks * 512, true
	}
	f1, had := filler()
	var st syscall.Statfs_t
	if syscall.Statfs(n.mnt, &st) != nil {
		return 0, 0, false
	}
	f2, has := filler()
	if had != has {
		return 0, 0, false
	}
	total = int64(st.Blocks) * int64(st.Bsize)
	used = total - int64(st.Bfree)*int64(st.Bsize) - max(f1, f2)
	return max(used, 0), total, true
}

func (n *node) unfill() error {
	err := os.Remove(n.fillerPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// shutdown stops every node (gracefully if graceful, else SIGKILL), keeps a copy of each
// tmpfs data directory if keepData, and unmounts the tmpfs mounts. It is safe to call more
// than once and on a cluster that never started.
func (c *cluster) shutdown(graceful, keepData bool) {
	if c == nil {
		return
	}
	if keepData {
		c.dumpGoroutines()
	}
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if graceful {
				took, killed := n.stop()
				switch {
				case killed:
					c.log.printf("%s did not stop within %.0fs of SIGTERM: killed; log tail:\n%s", n.id, took.Seconds(), n.logTail(20))
				case took > 5*time.Second:
					c.log.printf("%s took %.1fs to stop after SIGTERM; log tail:\n%s", n.id, took.Seconds(), n.logTail(20))
				}
			} else {
				n.kill()
			}
		}()
	}
	wg.Wait()
	for _, n := range c.nodes {
		if n.mnt == "" {
			continue
		}
		n.unfill()
		if keepData {
			if _, err := os.Stat(n.data); err == nil {
				dst := filepath.Join(c.cfg.dir, n.id+"-data")
				if err := os.CopyFS(dst, os.DirFS(n.data)); err != nil {
					c.log.printf("could not keep a copy of %s: %v", n.data, err)
				}
			}
		}
		if err := unmount(n.mnt); err != nil {
			c.log.printf("unmount %s: %v", n.mnt, err)
			continue
		}
		n.mnt = ""
	}
}

// dumpGoroutines saves every running node's goroutine stacks (/debug/pprof/goroutine on
// its admin address) to DIR/nodeI-goroutines.txt, for the report of a failed run.
func (c *cluster) dumpGoroutines() {
	cl := &http.Client{Timeout: 10 * time.Second}
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		n.resume()
		resp, err := cl.Get("http://" + n.admin + "/debug/pprof/goroutine?debug=2")
		if err != nil {
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			os.WriteFile(filepath.Join(c.cfg.dir, n.id+"-goroutines.txt"), data, 0o644)
		}
	}
}

// adminRaw runs `cairn admin ARGS` against node n's admin address and returns its output.
func (c *cluster) adminRaw(ctx context.Context, n *node, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.cfg.cairn, append([]string{"admin", "--admin", n.admin}, args...)...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + c.clusterSecret, "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cairn admin %s via %s: %v: %s", strings.Join(args, " "), n.id, err, strings.TrimSpace(stderr.String()))
	}
	return data, nil
}

// admin runs `cairn admin --json ARGS` against node n's admin address and decodes its output.
func (c *cluster) admin(ctx context.Context, n *node, out any, args ...string) error {
	data, err := c.adminRaw(ctx, n, append([]string{"--json"}, args...)...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("cairn admin %s: %v", strings.Join(args, " "), err)
	}
	return nil
}

// adminAny runs an admin command against the first node (from a rotating start) that answers.
func (c *cluster) adminAny(ctx context.Context, out any, args ...string) error {
	var err error
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		if err = c.admin(ctx, n, out, args...); err == nil {
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("no node is running")
	}
	return err
}

// statusJSON is the part of `cairn admin status --json` the soak reads.
type statusJSON struct {
	Epoch     uint64 `json:"epoch"`
	Effective struct {
		N, W, R, D int
	} `json:"effective"`
	Nodes []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Error string `json:"error"`
		Stats *struct {
			UsedBytes    int64 `json:"used_bytes"`
			FreeBytes    int64 `json:"free_bytes"`
			HintsPending int64 `json:"hints_pending"`
			LastSync     *struct {
				Start  time.Time `json:"start"`
				Errors int       `json:"errors"`
				Err    string    `json:"error"`
				Copied int       `json:"copied"`
				Delete int       `json:"deleted"`
			} `json:"last_sync"`
		} `json:"stats"`
	} `json:"nodes"`
	Classes []struct {
		Name string `json:"name"`
	} `json:"classes"`
	Warnings []string `json:"warnings"`
}

// recoveryJSON is the part of `cairn admin recovery --json` the soak reads.
type recoveryJSON struct {
	Nodes []struct {
		Node    string `json:"node"`
		Running bool   `json:"running"`
		Error   string `json:"error"`
	} `json:"nodes"`
}

// placementJSON is `cairn admin placement --json BUCKET KEY`.
type placementJSON struct {
	Nodes    []string      `json:"nodes"`
	Replicas []replicaJSON `json:"replicas"`
}

// replicaJSON is one replica's record in placementJSON.
type replicaJSON struct {
	Node    string `json:"node"`
	HLC     uint64 `json:"hlc"`
	ETag    string `json:"etag"`
	Size    int64  `json:"size"`
	Deleted bool   `json:"deleted"`
	Missing bool   `json:"missing"`
	Error   string `json:"error"`
	Class   string `json:"class"`  // "" for STANDARD
	Layout  string `json:"layout"` // "copy", "EC K+M" or "N copies of S KiB chunks"
}
