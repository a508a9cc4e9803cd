package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// The multi-host test runs six cairn nodes as if on six hosts: each in a network
// namespace of its own with its own address, the namespaces joined by a switch in a
// seventh, and the test's clients in an eighth. Nothing is on loopback but each
// namespace's own lo; nothing is added to the test's own namespace. Each zone's two
// nodes can be cut off the switch (their links down), as a zone's uplink failing would,
// and the switch holds frames between zones for a delay the test sets (netSwitch: this
// machine's kernel has no tc netem).

// netLab is the namespaces of one test and the commands run in them.
type netLab struct {
	t      *testing.T
	prefix string // namespace names start with it
	sw     string // the switch's namespace, holding every node's link
	swtch  *netSwitch
	client string // the clients' namespace
	nodes  []string
	addrs  []string // each node's address, in node order
	links  []string // each node's link on the bridge, in node order
}

const netLabSubnet = "10.231.0."

// newNetLab creates the switch, the client namespace (10.231.0.2) and n node namespaces
// (10.231.0.11, .12, ...), node i in zone i/2 (two nodes a zone), or skips the test naming what the machine lacks. They are
// removed when the test ends.
func newNetLab(t *testing.T, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); this test runs as uid", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("the ip command (iproute2, installed by make deps-apt) is missing:", err)
	}
	l := &netLab{t: t, prefix: fmt.Sprintf("cairn%d", os.Getpid()%100000)}
	l.sw, l.client = l.prefix+"-sw", l.prefix+"-cl"
	if out, err := exec.Command("ip", "netns", "add", l.sw).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (ip netns add): %v: %s", err, bytes.TrimSpace(out))
	}
	t.Cleanup(l.remove)
	l.attach(l.client, "vcl", netLabSubnet+"2")
	links, zones := []string{"vcl"}, []int{-1}
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("%s-n%d", l.prefix, i+1)
		link := fmt.Sprintf("vn%d", i+1)
		addr := fmt.Sprintf("%s%d", netLabSubnet, 11+i)
		l.attach(ns, link, addr)
		l.nodes, l.addrs, l.links = append(l.nodes, ns), append(l.addrs, addr), append(l.links, link)
		links, zones = append(links, link), append(zones, i/2)
	}
	sw, err := newNetSwitch(l.sw, links, zones)
	if err != nil {
		t.Fatal("the user-space switch:", err)
	}
	l.swtch = sw
	t.Cleanup(sw.close) // before the namespaces go (cleanups run last first)
	return l
}

// attach creates namespace ns with address addr on eth0, linked to the switch by link.
func (l *netLab) attach(ns, link, addr string) {
	l.ip("netns", "add", ns)
	l.ip("-n", l.sw, "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
	l.ip("-n", l.sw, "link", "set", link, "promisc", "on", "up")
	l.ip("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
	l.ip("-n", ns, "link", "set", "eth0", "up")
	l.ip("-n", ns, "link", "set", "lo", "up")
}

func (l *netLab) ip(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// remove deletes every namespace of the lab (their links go with them).
func (l *netLab) remove() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], l.prefix+"-") {
			if out, err := exec.Command("ip", "netns", "del", f[0]).CombinedOutput(); err != nil {
				l.t.Logf("ip netns del %s: %v: %s", f[0], err, bytes.TrimSpace(out))
			}
		}
	}
}

// cut takes node i's link off the switch (down: its packets go nowhere), or puts it back.
func (l *netLab) cut(i int, down bool) {
	l.t.Helper()
	state := "up"
	if down {
		state = "down"
	}
	l.ip("-n", l.sw, "link", "set", l.links[i], state)
}

// dial connects from the client namespace: the socket is made on an OS thread moved into
// that namespace and back. (A thread is never left to die in the namespace: the servers
// are started with Pdeathsig, which kills a child when the thread that forked it ends.)
func (l *netLab) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(l.client, func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
		return err
	})
	if err != nil && c != nil {
		l.t.Errorf("dial from %s: %v", l.client, err) // the thread could not come back
	}
	return c, err
}

// connectTime is how long a TCP connection from node i's namespace to node j's internode
// port takes to open (one round trip between them), the best of three.
func (l *netLab) connectTime(i, j int) time.Duration {
	best := time.Duration(-1)
	for range 3 {
		var d time.Duration
		err := inNetns(l.nodes[i], func() error {
			start := time.Now()
			c, err := net.DialTimeout("tcp", l.addrs[j]+":7000", 5*time.Second)
			d = time.Since(start)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			l.t.Fatalf("connect from node%d to node%d: %v", i+1, j+1, err)
		}
		if best < 0 || d < best {
			best = d
		}
	}
	return best.Round(10 * time.Microsecond)
}

// client is an S3 client for node i, connecting from the client namespace.
func (l *netLab) s3client(p *testProc) *s3.Client {
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(p.URL()),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(testAccess, testSecret, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: l.dial, MaxIdleConnsPerHost: 16}},
	})
}

// startNetCluster starts a node in each of the lab's namespaces, node i in zone
// z(i/2+1): two nodes per zone. The first bootstraps, the others join it.
func startNetCluster(t *testing.T, l *netLab, extra ...string) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, wrap: []string{"ip", "netns", "exec", l.client}}
	for i, ns := range l.nodes {
		args := []string{"--node-id", nodeID(i), "--zone", fmt.Sprintf("z%d", i/2+1)}
		if i > 0 {
			args = append(args, "--join", tc.addrs[0])
		}
		a := l.addrs[i]
		p := startTestProc(t, proc.Config{Bin: proctest.Bin(t), Name: nodeID(i), Wrap: []string{"ip", "netns", "exec", ns},
			Listen: a + ":9000", AdminListen: a + ":9001", NodeAddr: a + ":7000",
			Args: append(args, extra...), Env: []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret}})
		tc.procs = append(tc.procs, p)
		tc.addrs = append(tc.addrs, p.NodeAddr())
	}
	return tc
}

// latencies summarises request durations: p50, p99 and the largest.
func latencies(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(float64(len(s))*p))] }
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d requests)", at(0.50).Round(10*time.Microsecond), at(0.99).Round(10*time.Microsecond), s[len(s)-1].Round(10*time.Microsecond), len(s))
}

// TestMultiHostZoneCut: six nodes in their own network namespaces, in three zones of
// two; every object has a copy in each zone (N=3, W=2). With zone z3 cut off the switch,
// the gateways of z1 and z2 keep taking writes and serving reads once the cut nodes are
// marked down (the requests in between may fail, each with an error, none acknowledged
// and lost); after the cut heals, the cut nodes catch up on what they missed and every
// acknowledged object reads back through their gateways, byte for byte. The latencies
// clients saw in each phase are logged (not asserted: the machine is shared).
func TestMultiHostZoneCut(t *testing.T) {
	skipShort(t)
	l := newNetLab(t, 6)
	tc := startNetCluster(t, l, "--down-after", "1s", "--hint-interval", "200ms")
	tc.waitVoters(3)
	ctx := context.Background()
	clients := make([]*s3.Client, len(tc.procs))
	for i, p := range tc.procs {
		clients[i] = l.s3client(p)
	}
	if _, err := clients[0].CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("zones")}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[string]string{} // key: MD5 of the acknowledged body
	body := func(key string) []byte { return bytes.Repeat([]byte(key+"|"), 4096/(len(key)+1)+1)[:4096] }
	// put writes keys through the gateways gws (round robin), 4 at a time, and returns
	// the durations of the acknowledged PUTs and the errors of the others.
	put := func(prefix string, n int, gws []int) (ds []time.Duration, errs []error) {
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					key := fmt.Sprintf("%s/%04d", prefix, i)
					b := body(key)
					start := time.Now()
					_, err := clients[gws[i%len(gws)]].PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("zones"), Key: aws.String(key), Body: bytes.NewReader(b)})
					d := time.Since(start)
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("PUT %s via node%d after %v: %w", key, gws[i%len(gws)]+1, d.Round(time.Millisecond), err))
					} else {
						sum := md5.Sum(b)
						acked[key] = hex.EncodeToString(sum[:])
						ds = append(ds, d)
					}
					mu.Unlock()
				}
			}()
		}
		for i := 0; i < n; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		return ds, errs
	}
	// get reads every acknowledged key through gateway g and returns the durations.
	get := func(g int) []time.Duration {
		t.Helper()
		mu.Lock()
		keys := make(map[string]string, len(acked))
		for k, v := range acked {
			keys[k] = v
		}
		mu.Unlock()
		var ds []time.Duration
		for k, want := range keys {
			start := time.Now()
			b, err := getBody(ctx, clients[g], "zones", k)
			ds = append(ds, time.Since(start))
			if err != nil {
				t.Fatalf("GET %s via node%d: %v", k, g+1, err)
			}
			if got := md5hex(b); got != want {
				t.Fatalf("GET %s via node%d: MD5 %s, want the acknowledged %s", k, g+1, got, want)
			}
		}
		return ds
	}
	all := []int{0, 1, 2, 3, 4, 5}
	ds, errs := put("before", 120, all)
	if len(errs) > 0 {
		t.Fatalf("PUTs with every zone up: %d failed; first: %v", len(errs), errs[0])
	}
	t.Logf("every zone up, no delay: PUT %s", latencies(ds))
	t.Logf("every zone up, no delay: GET via node1 %s", latencies(get(0)))

	// Latency between zones: the switch holds each frame within a zone for a tenth of
	// the delay between zones (one way, so a round trip between zones takes twice it).
	// The last delay stays for the rest of the test. $CAIRN_NETLAB_DELAYS lists the
	// delays to measure (the benchmark in docs/benchmarks.md sweeps several).
	delays := []time.Duration{5 * time.Millisecond}
	if v := os.Getenv("CAIRN_NETLAB_DELAYS"); v != "" {
		delays = nil
		for _, f := range strings.Split(v, ",") {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatalf("CAIRN_NETLAB_DELAYS: %v", err)
			}
			delays = append(delays, d)
		}
	}
	for _, d := range delays {
		l.swtch.setDelays(d/10, d)
		t.Logf("%v between zones: a TCP connect takes %v within a zone (node1 to node2), %v between zones (node1 to node5)", d, l.connectTime(0, 1), l.connectTime(0, 4))
		ds, errs := put(fmt.Sprintf("delay-%v", d), 120, all)
		if len(errs) > 0 {
			t.Fatalf("PUTs with %v between zones: %d failed; first: %v", d, len(errs), errs[0])
		}
		t.Logf("every zone up, %v between zones (%v within): PUT %s", d, d/10, latencies(ds))
		t.Logf("every zone up, %v between zones (%v within): GET via node1 %s", d, d/10, latencies(get(0)))
	}

	// Zone z3 (node5, node6) is cut off. Requests from the first moments may fail (the
	// gateways have not yet marked the nodes down); each failure is an error to the
	// client, and everything acknowledged must read back.
	cutAt := time.Now()
	l.cut(4, true)
	l.cut(5, true)
	near := []int{0, 1, 2, 3}
	ds, errs = put("cut-early", 40, near)
	t.Logf("z3 cut, first %v: PUT %s; %d of 40 failed", time.Since(cutAt).Round(time.Millisecond), latencies(ds), len(errs))
	for _, err := range errs {
		t.Logf("  %v", err)
	}
	proctest.WaitFor(t, 30*time.Second, func() error {
		st, err := tc.statusErr(0)
		if err != nil {
			return err
		}
		for _, n := range st.Nodes {
			if (n.ID == nodeID(4) || n.ID == nodeID(5)) && n.State != "down" {
				return fmt.Errorf("%s is %s, not yet marked down after the cut", n.ID, n.State)
			}
		}
		return nil
	})
	t.Logf("z3 marked down %v after the cut", time.Since(cutAt).Round(time.Millisecond))
	ds, errs = put("cut", 120, near)
	if len(errs) > 0 {
		t.Fatalf("PUTs through z1 and z2 with z3 marked down: %d of 120 failed; first: %v", len(errs), errs[0])
	}
	t.Logf("z3 cut and marked down: PUT %s", latencies(ds))
	t.Logf("z3 cut and marked down: GET via node3 %s", latencies(get(2)))

	// The cut heals: z3 catches up (hints), and its gateways serve every acknowledged
	// object.
	healAt := time.Now()
	l.cut(4, false)
	l.cut(5, false)
	proctest.WaitFor(t, 60*time.Second, func() error {
		for i := range tc.procs {
			st, err := tc.statusErr(i)
			if err != nil {
				return err
			}
			for _, n := range st.Nodes {
				switch {
				case n.State != "up":
					return fmt.Errorf("via node%d: %s is %s", i+1, n.ID, n.State)
				case n.Stats == nil:
					return fmt.Errorf("via node%d: %s does not answer: %s", i+1, n.ID, n.Error)
				case n.Stats.HintsPending > 0:
					return fmt.Errorf("via node%d: %s has %d hints queued", i+1, n.ID, n.Stats.HintsPending)
				}
			}
		}
		return nil
	})
	t.Logf("z3 back and caught up (hints delivered) %v after the heal", time.Since(healAt).Round(time.Millisecond))
	t.Logf("after the heal: GET via node5 %s", latencies(get(4)))
	mu.Lock()
	want := map[string]string{}
	for k, sum := range acked {
		if strings.HasPrefix(k, "cut/") {
			want[k] = sum
		}
	}
	mu.Unlock()
	for k, sum := range want {
		v := tc.replicas(4, "zones", k)
		for _, r := range v.Replicas {
			if r.Error != "" || r.Deleted || r.Missing || strings.Trim(r.ETag, `"`) != sum {
				t.Fatalf("replica of %s on %s after the heal: %+v, want ETag %s", k, r.Node, r, sum)
			}
		}
	}
}
