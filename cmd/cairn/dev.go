package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const devUsage = `Usage: cairn dev cluster [--nodes N] [--zones Z] [--dir DIR] [--replicas R]

Starts N cairn nodes on loopback ports (node 1 bootstraps, the others join it), in zones
z1..zZ round robin, prints their S3 endpoints and the credentials, writes DIR/cluster.json,
and stops them all on Ctrl-C. Each node's data is in DIR/nodeI and its log in DIR/nodeI.log.
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
	c, procs, err := startDev(ctx, bin, *dir, *nodes, *zones, *replicas, stderr)
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait()
		}
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

func loopbackPort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startDev starts the nodes and returns once every one serves.
func startDev(ctx context.Context, bin, dir string, n, zones, replicas int, stderr io.Writer) (*devCluster, []*exec.Cmd, error) {
	c := &devCluster{AccessKey: "CAIRNDEV" + strings.ToUpper(randHex(6)), SecretKey: randHex(20), ClusterSecret: randHex(24)}
	var procs []*exec.Cmd
	for i := 0; i < n; i++ {
		var addrs [3]string
		for j := range addrs {
			a, err := loopbackPort()
			if err != nil {
				return nil, procs, err
			}
			addrs[j] = a
		}
		nd := devNode{ID: fmt.Sprintf("node%d", i+1), S3: addrs[0], Admin: addrs[1], Addr: addrs[2], Zone: fmt.Sprintf("z%d", i%zones+1),
			Dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1)), Log: filepath.Join(dir, fmt.Sprintf("node%d.log", i+1))}
		nd.Args = []string{"server", "--data", nd.Dir, "--listen", nd.S3, "--admin-listen", nd.Admin, "--node-addr", nd.Addr,
			"--zone", nd.Zone, "--node-id", nd.ID, "--replicas", fmt.Sprint(replicas)}
		if i > 0 {
			nd.Args = append(nd.Args, "--join", c.Nodes[0].Addr)
		}
		c.Nodes = append(c.Nodes, nd)
	}
	env := append(os.Environ(), "CAIRN_ACCESS_KEY="+c.AccessKey, "CAIRN_SECRET_KEY="+c.SecretKey, "CAIRN_CLUSTER_SECRET="+c.ClusterSecret)
	start := func(i int) (*exec.Cmd, <-chan error, error) {
		nd := &c.Nodes[i]
		logf, err := os.OpenFile(nd.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.Command(bin, nd.Args...)
		cmd.Env = env
		cmd.Stderr = logf
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			logf.Close()
			return nil, nil, err
		}
		nd.PID = cmd.Process.Pid
		ready := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(out)
			ok := false
			for sc.Scan() {
				fmt.Fprintln(logf, sc.Text())
				if !ok && strings.Contains(sc.Text(), "S3 endpoint:") {
					ok = true
					ready <- nil
				}
			}
			if !ok {
				ready <- fmt.Errorf("node %s exited before serving; see %s", nd.ID, nd.Log)
			}
		}()
		return cmd, ready, nil
	}
	wait := func(ready <-chan error) error {
		select {
		case err := <-ready:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(90 * time.Second):
			return fmt.Errorf("a node did not start within 90s")
		}
	}
	cmd, ready, err := start(0)
	if err != nil {
		return nil, procs, err
	}
	procs = append(procs, cmd)
	if err := wait(ready); err != nil {
		return nil, procs, err
	}
	var readies []<-chan error
	var mu sync.Mutex
	for i := 1; i < n; i++ {
		cmd, ready, err := start(i)
		if err != nil {
			return nil, procs, err
		}
		mu.Lock()
		procs = append(procs, cmd)
		mu.Unlock()
		readies = append(readies, ready)
	}
	for _, r := range readies {
		if err := wait(r); err != nil {
			return nil, procs, err
		}
	}
	data, _ := json.MarshalIndent(c, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), data, 0o600); err != nil {
		return nil, procs, err
	}
	return c, procs, nil
}
