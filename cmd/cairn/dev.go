package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
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
	"github.com/cairnfs/cairn/internal/testutil/testcert"
)

const devUsage = `Usage: cairn dev cluster [--nodes N] [--zones Z] [--dir DIR] [--replicas R] [--base-port P] [--tls] [--internode-tls on|off] [--clean]
       cairn dev cluster kill|stop|start|restart NODE [--dir DIR]

Starts N cairn nodes on loopback ports (node 1 bootstraps, the others join it), in zones
z1..zZ round robin, prints their S3 endpoints and the credentials, writes DIR/cluster.json,
and stops them all on Ctrl-C. Each node's data is in DIR/nodeI and its log in DIR/nodeI.log.
A node that dies is reported as it dies. While the cluster runs, the second form acts on
one of its nodes (NODE is node1, node2, ...): kill (SIGKILL), stop (SIGTERM, clean),
start (a stopped or killed node), restart (stop, then start); a started node keeps its
ports and data, and Ctrl-C stops it with the others.

Flags:
  --nodes N      number of nodes, 1 to 64 (default 3)
  --zones Z      number of zones (default: one per node, up to 3)
  --dir DIR      directory for the nodes' data and logs (default: a new temporary directory;
                 the control commands find the cluster there, or in $CAIRN_DEV_DIR)
  --replicas R   copies of STANDARD objects (default 3; a class's copies in force are at
                 most the number of storage nodes)
  --base-port P  node I (from 0) serves S3 on port P+10I, the admin API on P+10I+1, the
                 internode protocol on P+10I+2 and block volumes (NBD, cairn volume) on
                 P+10I+3 (default 19000: below the kernel's ephemeral
                 port range, so a node's ports stay free while it is down; 0: any free ports)
  --tls          serve S3 and the admin API over HTTPS: a throwaway CA and a certificate for
                 127.0.0.1 and localhost are made in DIR/tls (ca.pem is the CA to trust; kept
                 and reused while DIR is)
  --internode-tls on|off
                 internode traffic (RPC and Raft) over mutual TLS with the cluster CA node1
                 makes (on, the default, as for any new cluster: DIR/node1/internode/ca.pem),
                 or plain, authenticated by the cluster secret (off: for comparisons; cairn
                 admin internode-tls enable turns it on later)
  --clean        remove DIR when the cluster stops (default: keep it, and say where it is)
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
	AccessKey     string `json:"access_key"`
	SecretKey     string `json:"secret_key"`
	ClusterSecret string `json:"cluster_secret"`
	CAFile        string `json:"ca_file,omitempty"` // --tls: the CA that signed the nodes' certificate
	// InternodeCA is the cluster CA of internode mutual TLS (empty: --internode-tls off).
	InternodeCA string    `json:"internode_ca,omitempty"`
	Nodes       []devNode `json:"nodes"`
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
	if len(args) > 1 && devActions[args[1]] {
		return devControl(args[1], args[2:], stdout, stderr)
	}
	fs := flag.NewFlagSet("cairn dev cluster", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, devUsage) }
	nodes := fs.Int("nodes", 3, "number of nodes")
	zones := fs.Int("zones", 0, "number of zones (default: one per node, up to 3)")
	dir := fs.String("dir", "", "directory for the nodes' data and logs (default: a new temporary directory)")
	replicas := fs.Int("replicas", 3, "copies of STANDARD objects")
	basePort := fs.Int("base-port", 19000, "first port: node I uses P+10I (S3), P+10I+1 (admin), P+10I+2 (internode), P+10I+3 (NBD); 0: any free ports")
	clean := fs.Bool("clean", false, "remove the directory when the cluster stops")
	withTLS := fs.Bool("tls", false, "serve S3 and admin over HTTPS with a throwaway CA made in DIR/tls")
	internode := fs.String("internode-tls", "on", "internode mutual TLS: on or off")
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev: unexpected %q: the commands are cairn dev cluster [FLAGS] and cairn dev cluster kill|stop|start|restart NODE --dir DIR", fs.Arg(0))
	}
	if *internode != "on" && *internode != "off" {
		return fmt.Errorf("dev: --internode-tls %q: want on or off", *internode)
	}
	if *nodes < 1 || *nodes > 64 {
		return fmt.Errorf("dev: --nodes %d: want 1 to 64", *nodes)
	}
	if *zones <= 0 {
		*zones = min(*nodes, 3)
	}
	if *basePort < 0 || *basePort+10**nodes > 65535 {
		return fmt.Errorf("dev: --base-port %d: the ports of %d nodes do not fit below 65536", *basePort, *nodes)
	}
	if lo := ephemeralStart(); *basePort > 0 && *basePort+10**nodes > lo {
		fmt.Fprintf(stderr, "cairn dev cluster: warning: ports %d to %d reach into the kernel's ephemeral range (from %d): a node's port may be taken while it is down\n",
			*basePort, *basePort+10**nodes-1, lo)
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
	// The control socket first: it also tells whether a dev cluster already runs here.
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return err
	}
	ln, err := listenControl(filepath.Join(*dir, "control.sock"))
	if err != nil {
		return err
	}
	defer ln.Close()
	var certs *devCertFiles
	caFile, scheme := "", "http"
	if *withTLS {
		if certs, err = devCerts(filepath.Join(*dir, "tls")); err != nil {
			return fmt.Errorf("dev: --tls: %w", err)
		}
		caFile, scheme = certs.CA, "https"
	}
	dc := &devSupervisor{dir: *dir, stdout: stdout, stderr: stderr, ctx: ctx}
	c, procs, err := startDev(ctx, bin, *dir, *nodes, *zones, *replicas, *basePort, certs, *internode == "on", dc.died)
	dc.c, dc.procs = c, procs
	defer func() {
		dc.stopAll()
		if *clean {
			if err := os.RemoveAll(*dir); err != nil {
				fmt.Fprintf(stderr, "cairn dev cluster: removing %s: %v\n", *dir, err)
			} else {
				fmt.Fprintf(stdout, "removed %s\n", *dir)
			}
		} else {
			fmt.Fprintf(stdout, "data and logs kept in %s (remove it, or run with --clean)\n", *dir)
		}
	}()
	if err != nil {
		return err
	}
	go dc.serve(ln)
	fmt.Fprintf(stdout, "cairn dev cluster: %d nodes, data and logs in %s\n", *nodes, *dir)
	for i, n := range c.Nodes {
		fmt.Fprintf(stdout, "  node%d %-14s zone %-4s S3 %s://%s  admin %s  node %s\n", i+1, n.ID, n.Zone, scheme, n.S3, n.Admin, n.Addr)
	}
	fmt.Fprintf(stdout, "  access key:  %s\n  secret key:  %s\n", c.AccessKey, c.SecretKey)
	if c.InternodeCA != "" {
		fmt.Fprintf(stdout, "  internode traffic (RPC, Raft): mutual TLS, cluster CA %s\n", c.InternodeCA)
	} else {
		fmt.Fprintf(stdout, "  internode traffic (RPC, Raft): plain, authenticated by the cluster secret (--internode-tls off)\n")
	}
	if caFile != "" {
		fmt.Fprintf(stdout, "  HTTPS (S3, admin); the CA to trust: %s\n", caFile)
		fmt.Fprintf(stdout, "  try: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url https://%s --ca-bundle %s s3 ls\n", c.AccessKey, c.SecretKey, c.Nodes[0].S3, caFile)
		fmt.Fprintf(stdout, "       CAIRN_CA_FILE=%s CAIRN_CLUSTER_SECRET=%s cairn admin --admin %s status\n", caFile, c.ClusterSecret, c.Nodes[0].Admin)
	} else {
		fmt.Fprintf(stdout, "  try: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url http://%s s3 ls\n", c.AccessKey, c.SecretKey, c.Nodes[0].S3)
		fmt.Fprintf(stdout, "       CAIRN_CLUSTER_SECRET=%s cairn admin --admin %s status\n", c.ClusterSecret, c.Nodes[0].Admin)
	}
	fmt.Fprintf(stdout, "       cairn dev cluster kill|stop|start|restart node2 --dir %s\n", *dir)
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

// devCertFiles are the files of a dev cluster's TLS: the CA to trust, and the
// certificate and key every node serves.
type devCertFiles struct{ CA, Cert, Key string }

// devCerts makes, in dir, a throwaway CA (ca.pem) and a certificate for 127.0.0.1 and
// localhost that it signed (cert.pem, key.pem; valid 30 days), unless an earlier start
// left ones valid for at least another day.
func devCerts(dir string) (*devCertFiles, error) {
	f := &devCertFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	if c, err := tls.LoadX509KeyPair(f.Cert, f.Key); err == nil && c.Leaf != nil && time.Until(c.Leaf.NotAfter) > 24*time.Hour {
		if _, err := os.Stat(f.CA); err == nil {
			return f, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := testcert.NewCA("cairn dev cluster CA")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(time.Now().Unix(), "127.0.0.1", "localhost")
	if err == nil {
		err = pair.Write(f.Cert, f.Key)
	}
	if err == nil {
		err = os.WriteFile(f.CA, ca.CertPEM, 0o644)
	}
	return f, err
}

// startDev starts the nodes and returns once every one serves: node1 bootstraps, the
// others join it. Each binds the loopback ports basePort gives it (any free ones for 0)
// and says which in its ready file, DIR/nodeI.ready.json; with certs, every node serves
// HTTPS with them. onExit hears of a node that exits without being told to.
func startDev(ctx context.Context, bin, dir string, n, zones, replicas, basePort int, certs *devCertFiles, internodeTLS bool, onExit func(*proc.Proc, error)) (*devCluster, []*proc.Proc, error) {
	c := &devCluster{AccessKey: "CAIRNDEV" + strings.ToUpper(randHex(6)), SecretKey: randHex(20), ClusterSecret: randHex(24)}
	var extra []string
	if certs != nil {
		c.CAFile, extra = certs.CA, []string{"--tls-cert", certs.Cert, "--tls-key", certs.Key}
	}
	if !internodeTLS {
		extra = append(extra, "--internode-tls", "off")
	}
	env := []string{"CAIRN_ACCESS_KEY=" + c.AccessKey, "CAIRN_SECRET_KEY=" + c.SecretKey, "CAIRN_CLUSTER_SECRET=" + c.ClusterSecret}
	cfg := func(i int) proc.Config {
		id := fmt.Sprintf("node%d", i+1)
		args := append([]string{"--zone", fmt.Sprintf("z%d", i%zones+1), "--node-id", id, "--replicas", fmt.Sprint(replicas)}, extra...)
		if i > 0 {
			args = append(args, "--join", c.Nodes[0].Addr)
		}
		nbdAddr := "127.0.0.1:0"
		if basePort > 0 {
			nbdAddr = fmt.Sprintf("127.0.0.1:%d", basePort+10*i+3)
		}
		args = append(args, "--nbd-listen", nbdAddr) // block volumes: cairn volume attach prints the URI
		pc := proc.Config{Bin: bin, Name: id, Dir: dir, Args: args, Env: env, StartTimeout: 90 * time.Second, OnExit: onExit}
		if basePort > 0 {
			port := basePort + 10*i
			pc.Listen, pc.AdminListen, pc.NodeAddr = fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", port+1), fmt.Sprintf("127.0.0.1:%d", port+2)
		}
		return pc
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
	if internodeTLS {
		c.InternodeCA = filepath.Join(first.DataDir(), "internode", "ca.pem")
	}
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
