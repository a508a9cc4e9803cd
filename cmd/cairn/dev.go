package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

const devUsage = `Usage: cairn dev cluster [--nodes N] [--zones Z] [--dir DIR] [--replicas R]

Starts N cairn nodes on loopback ports (node 1 bootstraps, the others join it), in zones
z1..zZ round robin, prints their S3 endpoints and the credentials, writes DIR/cluster.json,
and stops them all on Ctrl-C. Each node's data is in DIR/nodeI and its log in DIR/nodeI.log.

Flags:
  --nodes N      number of nodes, 1 to 64 (default 3)
  --zones Z      number of zones (default: one per node, up to 3)
  --dir DIR      directory for the nodes' data and logs (default: a new temporary directory)
  --replicas R   copies of STANDARD objects (default 3; a class's copies in force are at
                 most the number of storage nodes)
`

// devNode is one node of a dev cluster, as written to cluster.json.
type devNode struct {
	ID    string   `json:"id"`
	S3    string   `json:"s3"`
	Admin string   `json:"admin"`
	Addr  string   `json:"addr"`
	Zone  string   `json:"zone"`
	Dir   string   `json:"dir"`
	Log   string   `json:"log"`
	PID   int      `json:"pid"`
	Args  []string `json:"args"`
}

// devCluster is cluster.json.
type devCluster struct {
	AccessKey     string    `json:"access_key"`
	SecretKey     string    `json:"secret_key"`
	ClusterSecret string    `json:"cluster_secret"`
	Nodes         []devNode `json:"nodes"`
}

func runDev(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, devUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "cluster" {
		fmt.Fprint(stderr, devUsage)
		return fmt.Errorf("dev: unknown command (want \"cluster\")")
	}
	fs := flag.NewFlagSet("cairn dev cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, devUsage) }
	nodes := fs.Int("nodes", 3, "number of nodes")
	zones := fs.Int("zones", 0, "number of zones (default: one per node, up to 3)")
	dir := fs.String("dir", "", "directory for the nodes' data and logs (default: a new temporary directory)")
	replicas := fs.Int("replicas", 3, "copies of STANDARD objects")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if *nodes < 1 || *nodes > 64 {
		return fmt.Errorf("dev: --nodes %d: want 1 to 64", *nodes)
	}
	if *zones <= 0 {
		*zones = min(*nodes, 3)
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "cairn-dev-")
		if err != nil {
			return err
		}
		*dir = d
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	c, procs, err := startDev(ctx, bin, *dir, *nodes, *zones, *replicas)
	defer func() {
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A Ctrl-C in a terminal reaches the nodes too: one that already stopped
				// cleanly on its own is no error.
				if err := p.Stop(); errors.Is(err, proc.ErrStopTimeout) {
					fmt.Fprintf(stderr, "cairn dev cluster: %v\n", err)
				} else if err := p.ExitErr(); err != nil {
					fmt.Fprintf(stderr, "cairn dev cluster: %s: %v (log: %s)\n", p.Name(), err, p.LogPath())
				}
			}()
		}
		wg.Wait()
	}()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cairn dev cluster: %d nodes, data and logs in %s\n", *nodes, *dir)
	for i, n := range c.Nodes {
		fmt.Fprintf(stdout, "  node%d %-14s zone %-4s S3 http://%s  admin %s  node %s\n", i+1, n.ID, n.Zone, n.S3, n.Admin, n.Addr)
	}
	fmt.Fprintf(stdout, "  access key:  %s\n  secret key:  %s\n", c.AccessKey, c.SecretKey)
	fmt.Fprintf(stdout, "  try: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url http://%s s3 ls\n", c.AccessKey, c.SecretKey, c.Nodes[0].S3)
	fmt.Fprintf(stdout, "       CAIRN_CLUSTER_SECRET=%s cairn admin --admin %s status\n", c.ClusterSecret, c.Nodes[0].Admin)
	fmt.Fprintf(stdout, "  cluster ready; Ctrl-C stops every node\n")
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping the cluster")
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// startDev starts the nodes and returns once every one serves: node1 bootstraps, the
// others join it. Each binds free loopback ports (port 0) and says which in its ready
// file, DIR/nodeI.ready.json.
func startDev(ctx context.Context, bin, dir string, n, zones, replicas int) (*devCluster, []*proc.Proc, error) {
	c := &devCluster{AccessKey: "CAIRNDEV" + strings.ToUpper(randHex(6)), SecretKey: randHex(20), ClusterSecret: randHex(24)}
	env := []string{"CAIRN_ACCESS_KEY=" + c.AccessKey, "CAIRN_SECRET_KEY=" + c.SecretKey, "CAIRN_CLUSTER_SECRET=" + c.ClusterSecret}
	cfg := func(i int) proc.Config {
		id := fmt.Sprintf("node%d", i+1)
		args := []string{"--zone", fmt.Sprintf("z%d", i%zones+1), "--node-id", id, "--replicas", fmt.Sprint(replicas)}
		if i > 0 {
			args = append(args, "--join", c.Nodes[0].Addr)
		}
		return proc.Config{Bin: bin, Name: id, Dir: dir, Args: args, Env: env, StartTimeout: 90 * time.Second}
	}
	node := func(p *proc.Proc, i int) devNode {
		r := p.Info()
		return devNode{ID: r.NodeID, S3: r.S3, Admin: r.Admin, Addr: r.Node, Zone: fmt.Sprintf("z%d", i%zones+1),
			Dir: p.DataDir(), Log: p.LogPath(), PID: r.PID, Args: p.Args()}
	}
	first, err := proc.Start(ctx, cfg(0))
	if err != nil {
		return nil, nil, err
	}
	procs := []*proc.Proc{first}
	c.Nodes = append(c.Nodes, node(first, 0))
	rest := make([]*proc.Proc, n-1)
	errs := make([]error, n-1)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rest[i-1], errs[i-1] = proc.Start(ctx, cfg(i))
		}()
	}
	wg.Wait()
	for i, p := range rest {
		if p != nil {
			procs = append(procs, p)
			c.Nodes = append(c.Nodes, node(p, i+1))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, procs, err
	}
	data, _ := json.MarshalIndent(c, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), data, 0o600); err != nil {
		return nil, procs, err
	}
	return c, procs, nil
}
