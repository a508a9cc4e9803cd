package main

// Self-healing at the process level: a node lost under load on a 5-node cluster, a node
// that returns before it is marked out, and a node joining under load. Every test keeps
// clients running and checks every operation; convergence is checked replica by replica
// through the admin API (placement of each object).

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// healAdmin is an in-process admin client of node i: the same signed API as `cairn
// admin`, without a process per call, so that thousands of objects can be checked.
func (tc *testCluster) healAdmin(i int) *adminClient {
	tc.t.Helper()
	s, err := rpc.NewSecret(testClusterSecret)
	if err != nil {
		tc.t.Fatal(err)
	}
	return &adminClient{addr: tc.procs[i].AdminAddr(), secret: s}
}

// healPlacement is the answer of the admin placement call, with each replica's version.
type healPlacement struct {
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

func healPlacementOf(c *adminClient, bucket, key string) (*healPlacement, error) {
	var v healPlacement
	err := c.do(http.MethodGet, "placement?bucket="+urlQuery(bucket)+"&key="+urlQuery(key), &v)
	return &v, err
}

// healProblem says what is wrong with an object's replicas, or "" when it is on its n
// placement nodes, none of them dead, each with the same version of ETag etag ("": deleted).
func healProblem(v *healPlacement, etag string, n int, dead string) string {
	if len(v.Nodes) != n {
		return fmt.Sprintf("placed on %d nodes %v, want %d", len(v.Nodes), v.Nodes, n)
	}
	seen := map[string]bool{}
	for _, id := range v.Nodes {
		if id == dead {
			return fmt.Sprintf("placement %v includes the dead node %s", v.Nodes, dead)
		}
		if seen[id] {
			return fmt.Sprintf("placement %v names a node twice", v.Nodes)
		}
		seen[id] = true
	}
	if len(v.Replicas) != n {
		return fmt.Sprintf("%d replicas answered, want %d", len(v.Replicas), n)
	}
	for _, r := range v.Replicas {
		switch {
		case !seen[r.Node]:
			return fmt.Sprintf("replica on %s, not in placement %v", r.Node, v.Nodes)
		case r.Error != "":
			return fmt.Sprintf("replica on %s: %s", r.Node, r.Error)
		case etag == "" && !(r.Deleted || r.Missing):
			return fmt.Sprintf("replica on %s holds %s, want deleted", r.Node, r.ETag)
		case etag != "" && (r.Deleted || r.Missing || r.ETag != etag):
			return fmt.Sprintf("replica on %s: etag %q deleted=%v missing=%v, want %s", r.Node, r.ETag, r.Deleted, r.Missing, etag)
		case etag != "" && r.HLC != v.Replicas[0].HLC:
			return fmt.Sprintf("replicas hold different versions: %d on %s, %d on %s", r.HLC, r.Node, v.Replicas[0].HLC, v.Replicas[0].Node)
		}
	}
	return ""
}

// healCheck checks every key of want (key -> ETag, "" for deleted) through node via's
// admin API, eight at a time, and returns the problems by key.
func (tc *testCluster) healCheck(via int, bucket string, keys []string, want map[string]string, dead string) map[string]string {
	c := tc.healAdmin(via)
	bad := map[string]string{}
	var mu sync.Mutex
	work := make(chan string)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				v, err := healPlacementOf(c, bucket, k)
				p := ""
				if err != nil {
					p = err.Error()
				} else {
					p = healProblem(v, want[k], 3, dead)
				}
				if p != "" {
					mu.Lock()
					bad[k] = p
					mu.Unlock()
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return bad
}

// healWaitPlaced waits until every object of want is on its 3 placement nodes with the
// expected version (re-checking only the laggards, then all of them once more), and
// returns how long that took.
func (tc *testCluster) healWaitPlaced(via int, bucket string, want map[string]string, dead string, timeout time.Duration) time.Duration {
	tc.t.Helper()
	start := time.Now()
	all := sortedKeys(want)
	pending := all
	proctest.WaitFor(tc.t, timeout, func() error {
		bad := tc.healCheck(via, bucket, pending, want, dead)
		if len(bad) == 0 && len(pending) < len(all) {
			pending = all
			return fmt.Errorf("the laggards are placed: confirming with a full pass")
		}
		if len(bad) == 0 {
			return nil
		}
		pending = sortedKeys(bad)
		var lines []string
		for _, k := range pending[:min(len(pending), 8)] {
			lines = append(lines, k+": "+bad[k])
		}
		return fmt.Errorf("%d of %d objects not on their 3 placement nodes:\n%s", len(bad), len(want), strings.Join(lines, "\n"))
	})
	return time.Since(start)
}

// healState returns node id's state in the map seen by node via.
func (tc *testCluster) healState(via int, id string) clustermap.NodeState {
	tc.t.Helper()
	for _, n := range tc.status(via).Nodes {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

func (tc *testCluster) healWaitState(via int, id string, want clustermap.NodeState, timeout time.Duration) {
	tc.t.Helper()
	proctest.WaitFor(tc.t, timeout, func() error {
		if s := tc.healState(via, id); s != want {
			return fmt.Errorf("node %s is %q, want %s", id, s, want)
		}
		return nil
	})
}

// healAdminRetry runs `cairn admin ARGS` against node via until it succeeds (a map change
// fails while a new Raft leader is being elected).
func (tc *testCluster) healAdminRetry(via int, timeout time.Duration, args ...string) string {
	tc.t.Helper()
	var out string
	proctest.WaitFor(tc.t, timeout, func() error {
		var err error
		if out, err = tc.admin(via, args...); err != nil {
			return fmt.Errorf("admin %v: %v\n%s", args, err, out)
		}
		return nil
	})
	return out
}

// healObjects writes n objects of mixed sizes (1 KiB to 512 KiB, and every 25th a 2 MiB
// streamed one) with random bodies, round robin through the gateways gws, and returns
// their ETags and total size.
func (tc *testCluster) healObjects(gws []int, bucket, prefix string, n int, seed uint64) (map[string]string, int64) {
	tc.t.Helper()
	ctx := context.Background()
	src := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	want := map[string]string{}
	var total int64
	for i := 0; i < n; i++ {
		size := (1 << 10) << (i % 10) // 1 KiB .. 512 KiB
		size += i * 13
		if i%25 == 12 {
			size = 2<<20 + i
		}
		data := make([]byte, size)
		src.Read(data)
		key := fmt.Sprintf("%s%03d", prefix, i)
		c := tc.procs[gws[i%len(gws)]].client()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			tc.t.Fatalf("put %s: %v", key, err)
		}
		want[key] = md5hex(data)
		total += int64(size)
	}
	return want, total
}

// healLoad is a client load: writers put new objects (each key written once) and readers
// read back random objects already acknowledged, through a changing set of gateways.
// Every operation is checked: a failed write, a failed read, or a body whose MD5 differs
// from the acknowledged write's is an error.
type healLoad struct {
	tc     *testCluster
	bucket string
	start  time.Time

	mu      sync.Mutex
	gws     []int
	clients map[int]*s3.Client
	acked   map[string]string // key -> ETag of the writes the load got acknowledged
	keys    []string          // every readable key: base set and acknowledged writes
	want    map[string]string // the same, with ETags
	errs    []string
	nErr    atomic.Int64
	bytes   atomic.Int64
	puts    atomic.Int64
	gets    atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// healStartLoad starts writers and readers against gateways gws; base is readable from
// the start. Each writer pauses pause between its writes.
func (tc *testCluster) healStartLoad(bucket string, gws []int, base map[string]string, writers, readers int, pause time.Duration) *healLoad {
	l := &healLoad{tc: tc, bucket: bucket, start: time.Now(), clients: map[int]*s3.Client{}, acked: map[string]string{},
		want: map[string]string{}, stop: make(chan struct{})}
	l.setGateways(gws)
	for _, k := range sortedKeys(base) {
		l.keys = append(l.keys, k)
		l.want[k] = base[k]
	}
	ctx := context.Background()
	for w := 0; w < writers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), uint64(l.start.UnixNano())))
			src := rand.NewChaCha8([32]byte{byte(w), 1})
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-time.After(pause):
				}
				size := 1<<10 + r.IntN(15<<10)
				if i%10 == 9 {
					size = 128<<10 + r.IntN(64<<10)
				}
				data := make([]byte, size)
				src.Read(data)
				key := fmt.Sprintf("load/w%d/%05d", w, i)
				gw, c := l.pick(r)
				_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)})
				l.puts.Add(1)
				if err != nil {
					l.fail("put %s via node%d: %v", key, gw+1, err)
					continue
				}
				l.bytes.Add(int64(size))
				l.mu.Lock()
				l.acked[key] = md5hex(data)
				l.want[key] = l.acked[key]
				l.keys = append(l.keys, key)
				l.mu.Unlock()
			}
		}()
	}
	for rd := 0; rd < readers; rd++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			r := rand.New(rand.NewPCG(uint64(rd)+100, uint64(l.start.UnixNano())))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				l.mu.Lock()
				if len(l.keys) == 0 { // no key to read yet: look again soon
					l.mu.Unlock()
					select {
					case <-l.stop:
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				k := l.keys[r.IntN(len(l.keys))]
				etag := l.want[k]
				l.mu.Unlock()
				gw, c := l.pick(r)
				l.readOne(ctx, gw, c, k, etag)
			}
		}()
	}
	return l
}

func (l *healLoad) readOne(ctx context.Context, gw int, c *s3.Client, k, etag string) {
	got, err := getBody(ctx, c, l.bucket, k)
	l.gets.Add(1)
	switch {
	case err != nil:
		l.fail("get %s via node%d: %v", k, gw+1, err)
	case md5hex(got) != etag:
		l.fail("get %s via node%d: %d bytes with md5 %s, want %s", k, gw+1, len(got), md5hex(got), etag)
	}
}

// setGateways changes the gateways the load uses.
func (l *healLoad) setGateways(gws []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gws = slices.Clone(gws)
	for _, i := range gws {
		if l.clients[i] == nil {
			c := l.tc.procs[i].client()
			l.clients[i] = s3.New(c.Options(), func(o *s3.Options) { o.HTTPClient = &http.Client{Timeout: 20 * time.Second} })
		}
	}
}

func (l *healLoad) pick(r *rand.Rand) (int, *s3.Client) {
	l.mu.Lock()
	defer l.mu.Unlock()
	gw := l.gws[r.IntN(len(l.gws))]
	return gw, l.clients[gw]
}

func (l *healLoad) fail(format string, args ...any) {
	l.nErr.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, fmt.Sprintf("%6.2fs ", time.Since(l.start).Seconds())+fmt.Sprintf(format, args...))
	}
}

// waitOps waits until the load has done n more PUTs and n more GETs.
func (l *healLoad) waitOps(t *testing.T, n int64) {
	t.Helper()
	p0, g0 := l.puts.Load(), l.gets.Load()
	proctest.WaitFor(t, 60*time.Second, func() error {
		if p, g := l.puts.Load()-p0, l.gets.Load()-g0; p < n || g < n {
			return fmt.Errorf("the load did %d PUTs and %d GETs, want %d of each", p, g, n)
		}
		return nil
	})
}

// snapshot returns every key readable so far (base set and acknowledged writes).
func (l *healLoad) snapshot() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.want)
}

// finish stops the load and fails the test if any operation failed.
func (l *healLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	t.Logf("load: %d puts (%d acknowledged, %.1f MiB), %d gets, %d errors in %.1fs", l.puts.Load(), len(l.acked),
		float64(l.bytes.Load())/(1<<20), l.gets.Load(), l.nErr.Load(), time.Since(l.start).Seconds())
	if n := l.nErr.Load(); n > 0 {
		t.Errorf("%d client operations failed; the first ones:\n%s", n, strings.Join(l.errs, "\n"))
	}
}

// healRecovery follows `cairn admin recovery` of every node: the sync rounds that started
// after a point in time, their objects and bytes copied, and when the last one ended.
type healRecovery struct {
	since  time.Time
	mu     sync.Mutex
	rounds map[string]repair.SyncProgress // by node and start
	idleAt time.Time                      // first poll with rounds seen and none running
	stop   chan struct{}
	done   chan struct{}
}

func (tc *testCluster) healWatchRecovery(via int, since time.Time) *healRecovery {
	hr := &healRecovery{since: since, rounds: map[string]repair.SyncProgress{}, stop: make(chan struct{}), done: make(chan struct{})}
	c := tc.healAdmin(via)
	go func() {
		defer close(hr.done)
		for {
			var rec server.Recovery
			if err := c.do(http.MethodGet, "recovery", &rec); err == nil {
				hr.mu.Lock()
				running := false
				for _, n := range rec.Nodes {
					if n.Error != "" || n.Started.Before(since) {
						continue
					}
					hr.rounds[n.Node+"@"+n.Started.String()] = n.SyncProgress
					running = running || n.Running
				}
				if len(hr.rounds) > 0 && !running && hr.idleAt.IsZero() {
					hr.idleAt = time.Now()
				} else if running {
					hr.idleAt = time.Time{}
				}
				hr.mu.Unlock()
			}
			select {
			case <-hr.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return hr
}

// figures stops the watch and returns the objects and bytes copied and the time from
// since until the last round ended (zero if none was seen ending).
func (hr *healRecovery) figures() (objects, bytes int64, took time.Duration, rounds int) {
	close(hr.stop)
	<-hr.done
	hr.mu.Lock()
	defer hr.mu.Unlock()
	for _, p := range hr.rounds {
		objects += p.ObjectsDone
		bytes += p.BytesDone
	}
	if !hr.idleAt.IsZero() {
		took = hr.idleAt.Sub(hr.since)
	}
	return objects, bytes, took, len(hr.rounds)
}

// healList lists bucket (every page) and returns each key's ETag; unlike listAll it can
// run outside the test's goroutine.
func healList(ctx context.Context, c *s3.Client, bucket string) (map[string]string, error) {
	out := map[string]string{}
	var token *string
	for {
		res, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), ContinuationToken: token})
		if err != nil {
			return out, err
		}
		for _, o := range res.Contents {
			out[aws.ToString(o.Key)] = strings.Trim(aws.ToString(o.ETag), `"`)
		}
		if !aws.ToBool(res.IsTruncated) {
			return out, nil
		}
		token = res.NextContinuationToken
	}
}

func mibps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / (1 << 20) / d.Seconds()
}

// Five nodes, N=3, clients writing and reading through four gateways all along: one node
// is killed and marked out; every partition gets back to three copies on the four
// survivors (checked object by object, replica by replica, for the base set and for
// everything the load got acknowledged), and nothing acknowledged is lost or corrupted.
func TestClusterNodeLossFiveNodes(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 5)
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	// node3 is the only node of zone z3: it holds a copy of every object, so every object
	// loses a copy.
	const dead, deadIdx = "node3", 2
	survivors := []int{0, 1, 3, 4}
	base, baseBytes := tc.healObjects(survivors, "bkt", "base/", 100, 1)
	tc.healWaitPlaced(0, "bkt", base, "", 30*time.Second)
	t.Logf("base set: %d objects, %.1f MiB", len(base), float64(baseBytes)/(1<<20))

	load := tc.healStartLoad("bkt", survivors, base, 4, 4, 20*time.Millisecond)
	load.waitOps(t, 50)
	tc.procs[deadIdx].Kill()
	// Writes meanwhile are queued for node3, then dropped with it. The clock starts before
	// the mark-out: the sync rounds may start before the CLI returns.
	load.waitOps(t, 10)
	markedOut := time.Now()
	watch := tc.healWatchRecovery(0, markedOut)
	tc.healAdminRetry(0, 20*time.Second, "mark", dead, "out")
	// The base set and what the load wrote before the mark-out, checked while the load goes on.
	before := load.snapshot()
	took := tc.healWaitPlaced(0, "bkt", before, dead, 45*time.Second)
	converged := time.Since(markedOut)
	load.waitOps(t, 20) // the load goes on after the convergence
	load.finish(t)
	objects, bytes, idle, rounds := watch.figures()
	t.Logf("recovery: %d objects, %.1f MiB copied in %d sync rounds; copying done %.2fs after the mark-out (%.1f MiB/s); "+
		"all %d objects on their 3 nodes after %.2fs (%.1f MiB/s); last check pass %.2fs",
		objects, float64(bytes)/(1<<20), rounds, idle.Seconds(), mibps(bytes, idle), len(before), converged.Seconds(), mibps(bytes, converged), took.Seconds())
	if objects == 0 {
		t.Errorf("admin recovery showed no copying after the mark-out")
	}
	// Every object, including those written during the recovery, on its 3 nodes.
	all := load.snapshot()
	tc.healWaitPlaced(1, "bkt", all, dead, 30*time.Second)
	st := tc.status(0)
	copies := 0
	for _, n := range st.Nodes {
		copies += n.Partitions
		if n.ID == dead && n.Partitions != 0 {
			t.Errorf("%s still holds %d partitions", dead, n.Partitions)
		}
	}
	if copies != st.Partitions*3 {
		t.Errorf("%d partition copies in the map, want %d", copies, st.Partitions*3)
	}
	// Read every object back: the base set through every survivor, the rest through two.
	for j, k := range sortedKeys(all) {
		gws := survivors
		if _, ok := base[k]; !ok {
			gws = []int{survivors[j%4], survivors[(j+1)%4]}
		}
		for _, i := range gws {
			got, err := getBody(ctx, load.clients[i], "bkt", k)
			if err != nil || md5hex(got) != all[k] {
				t.Fatalf("read %s via node%d after recovery: %v (%d bytes)", k, i+1, err, len(got))
			}
		}
	}
}

// A node killed and restarted before it is marked out, while objects it holds were
// overwritten (twice), deleted and created: from the moment it serves again, no read
// through it returns an old version or a deleted object (every changed key is read many
// times through it, by GET, HEAD and listing, while the queued writes are still on their
// way), and once it has caught up its own replicas hold the new versions.
func TestClusterNodeReturnNoStaleReads(t *testing.T) {
	skipShort(t)
	// Queued writes are retried only every 20 s, so the node's copies stay stale during
	// the reads below unless something else (sync at start) brings them up to date.
	tc := startCluster(t, 5, "--hint-interval", "20s", "--down-after", "2s")
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	const back, backIdx = "node2", 1
	others := []int{0, 2, 3, 4}
	base, _ := tc.healObjects(others, "bkt", "k", 60, 2)
	tc.healWaitPlaced(0, "bkt", base, "", 30*time.Second)
	// The keys node2 holds are the interesting ones: its copies of them go stale.
	var held, notHeld []string
	for _, k := range sortedKeys(base) {
		v, err := healPlacementOf(tc.healAdmin(0), "bkt", k)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(v.Nodes, back) {
			held = append(held, k)
		} else {
			notHeld = append(notHeld, k)
		}
	}
	if len(held) < 15 {
		t.Fatalf("only %d of %d keys placed on %s", len(held), len(base), back)
	}
	t.Logf("%d of %d keys have a replica on %s", len(held), len(base), back)
	old := map[string][]string{} // key -> every ETag it had before its last change
	for k, e := range base {
		old[k] = []string{e}
	}
	want := maps.Clone(base)
	src := rand.NewChaCha8([32]byte{9})
	j := 0
	put := func(k string, size int) {
		t.Helper()
		data := make([]byte, size)
		src.Read(data)
		c := tc.procs[others[j%len(others)]].client()
		j++
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		if e, ok := want[k]; ok && e != "" {
			old[k] = append(old[k], e)
		}
		want[k] = md5hex(data)
	}
	del := func(k string) {
		t.Helper()
		c := tc.procs[others[j%len(others)]].client()
		j++
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k)}); err != nil {
			t.Fatalf("delete %s: %v", k, err)
		}
		if e := want[k]; e != "" {
			old[k] = append(old[k], e)
		}
		want[k] = ""
	}
	changed := map[string]bool{}
	tc.procs[backIdx].Kill()
	// While node2 is not yet known to be down (writes to it fail and are queued), then
	// once it is marked down (writes skip it and are queued).
	for i, k := range held {
		switch i % 4 {
		case 0, 1:
			put(k, 2000+i*311)
			changed[k] = true
		case 2:
			del(k)
			changed[k] = true
		}
	}
	tc.healWaitState(0, back, clustermap.StateDown, 20*time.Second)
	for i, k := range held {
		switch i % 4 {
		case 0: // overwritten twice; the second time with a streamed body for some
			size := 5000 + i
			if i%8 == 0 {
				size = 1<<20 + 7000 + i
			}
			put(k, size)
		case 3:
			del(k)
			changed[k] = true
		}
	}
	for i, k := range notHeld[:min(len(notHeld), 6)] {
		if i%2 == 0 {
			put(k, 3000+i)
		} else {
			del(k)
		}
		changed[k] = true
	}
	for i := 0; i < 6; i++ {
		k := fmt.Sprintf("new%02d", i)
		put(k, 1500+i*1000)
		changed[k] = true
	}
	for _, k := range held[:3] { // deleted, then written again
		if want[k] == "" {
			put(k, 4000)
		}
	}
	var keys []string
	deleted := 0
	for _, k := range sortedKeys(want) {
		if changed[k] {
			keys = append(keys, k)
			if want[k] == "" {
				deleted++
			}
		}
	}
	t.Logf("%d keys changed while %s was away (%d of them deleted)", len(keys), back, deleted)
	stale := func(k, etag string) bool { return slices.Contains(old[k], etag) && etag != want[k] }

	timeout := func(c *s3.Client) *s3.Client {
		return s3.New(c.Options(), func(o *s3.Options) { o.HTTPClient = &http.Client{Timeout: 10 * time.Second} })
	}
	var oclients []*s3.Client
	for _, i := range others {
		oclients = append(oclients, timeout(tc.procs[i].client()))
	}
	tc.procs[backIdx].Restart()
	returned := time.Now()
	c := timeout(tc.procs[backIdx].client())
	var mu sync.Mutex
	checks := map[string]int{}
	var problems []string
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(problems) < 12 {
			problems = append(problems, fmt.Sprintf("%5.2fs after the restart: ", time.Since(returned).Seconds())+fmt.Sprintf(format, args...))
		}
	}
	// Reads through the other gateways too, for the record: with R = 1 they may be served
	// by node2's stale copies once it is marked up (W + R <= N allows it).
	var otherStale, otherDeleted atomic.Int64
	var otherReads atomic.Int64
	var otherFirst, otherLast atomic.Int64 // ms after the restart
	var otherEx []string
	const window = 6 * time.Second
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; time.Since(returned) < window; round++ {
				for n := range keys {
					i := (n + g*len(keys)/4) % len(keys) // the readers start at different keys
					k := keys[i]
					body, err := getBody(ctx, c, "bkt", k)
					switch {
					case want[k] == "" && err == nil:
						report("GET %s through %s returned a deleted object (%d bytes, md5 %s)", k, back, len(body), md5hex(body))
					case want[k] == "" && !strings.Contains(fmt.Sprint(err), "NoSuchKey"):
						report("GET %s (deleted) through %s: %v", k, back, err)
					case want[k] != "" && err != nil:
						report("GET %s through %s: %v", k, back, err)
					case want[k] != "" && md5hex(body) != want[k]:
						report("GET %s through %s returned md5 %s (stale: %v), want %s", k, back, md5hex(body), stale(k, md5hex(body)), want[k])
					}
					h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k)})
					switch {
					case want[k] == "" && err == nil:
						report("HEAD %s through %s found a deleted object (etag %s)", k, back, aws.ToString(h.ETag))
					case want[k] != "" && err != nil:
						report("HEAD %s through %s: %v", k, back, err)
					case want[k] != "" && strings.Trim(aws.ToString(h.ETag), `"`) != want[k]:
						report("HEAD %s through %s: etag %s, want %s", k, back, aws.ToString(h.ETag), want[k])
					}
					mu.Lock()
					checks[k]++
					mu.Unlock()
					// The same key through another gateway.
					ob, oerr := getBody(ctx, oclients[(i+round)%len(oclients)], "bkt", k)
					otherReads.Add(1)
					if (want[k] == "" && oerr == nil) || (want[k] != "" && oerr == nil && md5hex(ob) != want[k]) {
						ms := time.Since(returned).Milliseconds()
						if otherStale.Add(1) == 1 {
							otherFirst.Store(ms)
						}
						otherLast.Store(ms)
						if want[k] == "" {
							otherDeleted.Add(1)
						}
						mu.Lock()
						if len(otherEx) < 3 {
							otherEx = append(otherEx, fmt.Sprintf("%s via node%d at %dms: md5 %s, deleted=%v, stale=%v", k, others[(i+round)%len(oclients)]+1, ms, md5hex(ob), want[k] == "", stale(k, md5hex(ob))))
						}
						mu.Unlock()
					}
				}
				if g == 0 && round%3 == 0 {
					got, err := healList(ctx, c, "bkt")
					if err != nil {
						report("listing through %s: %v", back, err)
					}
					for _, k := range keys {
						if e, ok := got[k]; want[k] == "" && ok {
							report("listing through %s shows deleted %s (etag %s)", back, k, e)
						} else if want[k] != "" && e != want[k] {
							report("listing through %s shows %s with etag %q, want %s", back, k, e, want[k])
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	minChecks := -1
	for _, k := range keys {
		if n := checks[k]; minChecks < 0 || n < minChecks {
			minChecks = n
		}
	}
	t.Logf("%d keys read through %s during its first %s back, each at least %d times (GET and HEAD); "+
		"%d of %d reads of them through other gateways returned an old version or a deleted object",
		len(keys), back, window, minChecks, otherStale.Load(), otherReads.Load())
	if otherStale.Load() > 0 {
		// Other gateways read a node that came back last for a minute (gateway.returnWindow).
		t.Errorf("stale reads through other gateways (%d of them of deleted objects): from %dms to %dms after the restart; e.g.\n%s",
			otherDeleted.Load(), otherFirst.Load(), otherLast.Load(), strings.Join(otherEx, "\n"))
	}
	if len(problems) > 0 {
		t.Fatalf("stale or failed reads through the returning node:\n%s", strings.Join(problems, "\n"))
	}
	if minChecks < 5 {
		t.Fatalf("a key was read only %d times through the returning node", minChecks)
	}
	// Caught up: node2's own replicas hold the new versions (and the tombstones).
	tc.healWaitState(0, back, clustermap.StateUp, 30*time.Second)
	tc.healWaitPlaced(backIdx, "bkt", want, "", 60*time.Second)
	for _, k := range keys {
		body, err := getBody(ctx, c, "bkt", k)
		if want[k] == "" {
			if err == nil {
				t.Fatalf("deleted %s readable through %s after catch-up", k, back)
			}
			continue
		}
		if err != nil || md5hex(body) != want[k] {
			t.Fatalf("read %s through %s after catch-up: %v", k, back, err)
		}
	}
}

// Five nodes under a continuous, checked load through every gateway; a sixth joins. About
// a sixth of the partition copies move to it (with zones z1..z3 it shares z3 with node3,
// so about half of the objects get a copy on it), clients see no error during the join
// and afterwards, every object stays readable throughout, and after convergence every
// object is on its 3 placement nodes.
func TestClusterNodeAddUnderLoad(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 5)
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	gws := []int{0, 1, 2, 3, 4}
	base, _ := tc.healObjects(gws, "bkt", "base/", 100, 3)
	tc.healWaitPlaced(0, "bkt", base, "", 30*time.Second)
	admin := tc.healAdmin(0)
	before := map[string][]string{}
	for k := range base {
		v, err := healPlacementOf(admin, "bkt", k)
		if err != nil {
			t.Fatal(err)
		}
		before[k] = v.Nodes
	}
	load := tc.healStartLoad("bkt", gws, base, 5, 5, 20*time.Millisecond)
	// Every object of the base set, read in a loop through every gateway in turn.
	stopSweep := make(chan struct{})
	sweepDone := make(chan int)
	go func() {
		sweeps := 0
		r := rand.New(rand.NewPCG(7, 7))
		for {
			for _, k := range sortedKeys(base) {
				select {
				case <-stopSweep:
					sweepDone <- sweeps
					return
				default:
				}
				gw, c := load.pick(r)
				load.readOne(ctx, gw, c, k, base[k])
			}
			sweeps++
		}
	}()
	load.waitOps(t, 50)
	joined := time.Now()
	tc.add()
	const fresh = "node6"
	tc.healWaitState(0, fresh, clustermap.StateUp, 20*time.Second)
	watch := tc.healWatchRecovery(0, joined)
	load.setGateways(append(gws, 5))
	// Share of the copies that moved to the new node.
	admin = tc.healAdmin(0)
	onNew, moved, other := 0, 0, 0
	for k := range base {
		v, err := healPlacementOf(admin, "bkt", k)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range v.Nodes {
			if id == fresh {
				onNew++
			}
			if !slices.Contains(before[k], id) {
				moved++
				if id != fresh {
					other++
				}
			}
		}
	}
	st := tc.status(0)
	newParts := 0
	for _, n := range st.Nodes {
		if n.ID == fresh {
			newParts = n.Partitions
		}
	}
	share := float64(newParts) / float64(st.Partitions*3)
	keyShare := float64(onNew) / float64(3*len(base))
	t.Logf("%s holds %d of %d partition copies (%.1f %%); %d of %d sampled objects (%.1f %% of their copies) got a copy on it; "+
		"%d copies moved, %d of them to other nodes than %s", fresh, newParts, st.Partitions*3, 100*share, onNew, len(base), 100*keyShare, moved, other, fresh)
	if share < 0.08 || share > 0.30 || keyShare < 0.08 || keyShare > 0.30 {
		t.Errorf("share of copies on the new node: %.1f %% of partitions, %.1f %% of sampled objects' copies; want 8-30 %% (1/6 ideal)", 100*share, 100*keyShare)
	}
	if other > 0 {
		t.Errorf("%d copies moved to nodes other than the new one", other)
	}
	tc.healWaitPlaced(0, "bkt", load.snapshot(), "", 45*time.Second)
	converged := time.Since(joined)
	load.waitOps(t, 20) // and the load goes on after the convergence
	close(stopSweep)
	sweeps := <-sweepDone
	load.finish(t)
	objects, bytes, idle, rounds := watch.figures()
	t.Logf("rebalance: %d objects, %.1f MiB copied in %d sync rounds, copying done %.2fs after the join, all on their nodes after %.2fs; %d full sweeps of the base set",
		objects, float64(bytes)/(1<<20), rounds, idle.Seconds(), converged.Seconds(), sweeps)
	if sweeps < 1 {
		t.Errorf("the base set was not read through once during the join")
	}
	all := load.snapshot()
	tc.healWaitPlaced(5, "bkt", all, "", 30*time.Second)
	for j, k := range sortedKeys(all) {
		i := j % 6
		got, err := getBody(ctx, tc.procs[i].client(), "bkt", k)
		if err != nil || md5hex(got) != all[k] {
			t.Fatalf("read %s via node%d after the join: %v", k, i+1, err)
		}
	}
}
