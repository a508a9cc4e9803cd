package gateway

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
)

// countingReplica counts the lone Puts and the put batches a gateway sends a holder.
type countingReplica struct {
	replica.Replica
	puts, batches, batched *atomic.Int64
}

func (r countingReplica) Put(ctx context.Context, w replica.Write) (*object.Object, error) {
	r.puts.Add(1)
	return r.Replica.Put(ctx, w)
}

func (r countingReplica) PutBatch(ctx context.Context, ws []replica.Write) ([]replica.RangeResult, error) {
	r.batches.Add(1)
	r.batched.Add(int64(len(ws)))
	return r.Replica.(replica.PutBatcher).PutBatch(ctx, ws)
}

// callCounts counts, per (gateway node, holder node), the calls countingReplica saw.
type callCounts struct {
	mu sync.Mutex
	m  map[[2]string]*[3]atomic.Int64
}

func (c *callCounts) of(from, to string) *[3]atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[2]string]*[3]atomic.Int64{}
	}
	x := c.m[[2]string{from, to}]
	if x == nil {
		x = new([3]atomic.Int64)
		c.m[[2]string{from, to}] = x
	}
	return x
}

func (c *callCounts) wrap(from string, r replica.Replica) replica.Replica {
	if _, ok := r.(*replica.Remote); !ok {
		return r
	}
	x := c.of(from, r.ID())
	return countingReplica{Replica: r, puts: &x[0], batches: &x[1], batched: &x[2]}
}

// ackedPut is an acknowledged PUT: its key, version and body.
type ackedPut struct {
	key     string
	version uint64
	body    []byte
}

// queueBehindHang hangs what node from sends node to, starts n PUTs of distinct keys
// (prefix) through from's gateway, waits until those that are not among the requests in
// flight to the hung holder wait in from's sender for it (with batches on), and until
// every PUT was acknowledged (by the other two holders); then it heals the link and
// returns the acknowledged PUTs.
func queueBehindHang(t *testing.T, c *testCluster, from, to int, prefix string, n int, batches bool) []ackedPut {
	t.Helper()
	gw := c.nodes[from].gw
	f := c.faults(c.nodes[from].id, c.nodes[to].id)
	f.Hang()
	acked := make([]ackedPut, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		key := c.keyWhere("b", fmt.Sprintf("%s%d-", prefix, i), func(rs []int) bool { return true })
		body := randBody(uint64(1000+i), 4<<10)
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := put(context.Background(), gw, "b", key, body, int64(len(body)))
			errs[i] = err
			if err == nil {
				acked[i] = ackedPut{key: key, version: o.HLC, body: body}
			}
		}()
	}
	if batches {
		if !waitFor(10*time.Second, func() bool { return gw.putSender(c.nodes[to].id).Queued() == n-replica.DefaultMaxInFlight }) {
			t.Fatalf("%d writes queued for the hung holder, want %d", gw.putSender(c.nodes[to].id).Queued(), n-replica.DefaultMaxInFlight)
		}
	}
	// Every PUT is acknowledged while the holder still hangs: W=2 of the three, and the
	// hung holder holds up no write to the other one (each holder has its own sender).
	wg.Wait()
	f.Heal()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("PUT %d: %v", i, err)
		}
	}
	return acked
}

// checkEveryHolder waits until every holder of every acknowledged PUT's key holds its
// version and then checks each holder's bytes.
func checkEveryHolder(t *testing.T, c *testCluster, acked []ackedPut) {
	t.Helper()
	for _, a := range acked {
		if !waitFor(20*time.Second, func() bool { return converged(c.replicaStates(0, "b", a.key), a.version, false) }) {
			t.Fatalf("%s: the holders did not all come to version %d: %+v", a.key, a.version, c.replicaStates(0, "b", a.key))
		}
		holders, _ := c.replicaSet("b", a.key)
		for _, i := range holders {
			rd, err := c.nodes[i].store.OpenObject("b", a.key)
			if err != nil {
				t.Fatalf("%s on %s: %v", a.key, c.nodes[i].id, err)
			}
			var buf bytes.Buffer
			_, err = rd.WriteRange(context.Background(), &buf, 0, rd.Object.Size)
			rd.Close()
			if err != nil || !bytes.Equal(buf.Bytes(), a.body) {
				t.Fatalf("%s on %s reads back other bytes (%v)", a.key, c.nodes[i].id, err)
			}
		}
	}
}

// TestPutBatches: many concurrent PUTs through a 3-node cluster on real sockets at
// LevelPutBatches, some of them in batches (the writes that queued behind a hung
// holder's requests certainly), some of one key from several gateways at once (the
// holders keep the newest and answer the older ones with it): every PUT is acknowledged
// and every acknowledged version is read back byte for byte from every holder.
func TestPutBatches(t *testing.T) {
	var calls callCounts
	c := newCluster(t, 3, clusterConfig{wrap: calls.wrap})
	c.createBucket("b")
	c.setLevel(LevelPutBatches)

	acked := queueBehindHang(t, c, 0, 2, "queued", 16, true)
	sd := c.nodes[0].gw.putSender("n3")
	waitFor(10*time.Second, func() bool { _, w := sd.Stats(); return w == 16-replica.DefaultMaxInFlight })
	if b, w := sd.Stats(); b < 1 || w != 16-replica.DefaultMaxInFlight {
		t.Fatalf("%d batches to n3 carried %d writes; want the %d queued", b, w, 16-replica.DefaultMaxInFlight)
	}
	if x := calls.of("n1", "n3"); x[1].Load() < 1 {
		t.Fatalf("n3 saw %d batches", x[1].Load())
	}

	// Then writers on every gateway at once, a few keys written by two of them.
	const writers, each = 24, 8
	var mu sync.Mutex
	latest := map[string]ackedPut{}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gw := c.nodes[w%3].gw
			for j := range each {
				key := "w" + strconv.Itoa(w) + "/" + strconv.Itoa(j)
				if j%4 == 0 {
					key = "shared/" + strconv.Itoa(j) + "/" + strconv.Itoa(w%4) // written by two writers on two gateways
				}
				body := randBody(uint64(w*1000+j), 1+(w*each+j)*97%(16<<10))
				o, err := put(context.Background(), gw, "b", key, body, int64(len(body)))
				if err != nil {
					failed.Add(1)
					t.Errorf("PUT %s: %v", key, err)
					continue
				}
				mu.Lock()
				if l, ok := latest[key]; !ok || o.HLC > l.version {
					latest[key] = ackedPut{key: key, version: o.HLC, body: body}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	for _, a := range latest {
		acked = append(acked, a)
	}
	checkEveryHolder(t, c, acked)
	var batches, batched int64
	for _, nd := range c.nodes {
		b, w := nd.gw.PutBatchStats()
		batches, batched = batches+b, batched+w
	}
	t.Logf("%d put batches carried %d writes", batches, batched)
}

// TestPutBatchesNeedLevel12: below LevelPutBatches no gateway sends a put batch, even
// with writes waiting for a hung holder: each write goes alone, as before.
func TestPutBatchesNeedLevel12(t *testing.T) {
	var calls callCounts
	c := newCluster(t, 3, clusterConfig{wrap: calls.wrap})
	c.createBucket("b")
	c.setLevel(LevelPutBatches - 1)
	acked := queueBehindHang(t, c, 0, 2, "alone", 8, false)
	checkEveryHolder(t, c, acked)
	x := calls.of("n1", "n3")
	if x[1].Load() != 0 || x[0].Load() < 8 {
		t.Fatalf("at level %d, n3 saw %d batches and %d lone writes", LevelPutBatches-1, x[1].Load(), x[0].Load())
	}
	if b, _ := c.nodes[0].gw.PutBatchStats(); b != 0 {
		t.Fatalf("%d batches sent at level %d", b, LevelPutBatches-1)
	}
}

// TestPutBatchHolderKilled: a holder is closed (its listener and connections, as a
// crash) while writers keep PUTs queued for it in batches: every PUT is still
// acknowledged by the other two holders, the writes it missed are queued as hints, and
// once it is back and the hints are delivered every acknowledged version is on every
// holder, byte for byte.
func TestPutBatchHolderKilled(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	c.setLevel(LevelPutBatches)
	const writers = 24
	var mu sync.Mutex
	var acked []ackedPut
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var n atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				key := "k" + strconv.Itoa(w) + "/" + strconv.Itoa(j)
				body := randBody(uint64(w<<20+j), 4<<10)
				o, err := put(context.Background(), c.nodes[0].gw, "b", key, body, int64(len(body)))
				if err != nil {
					t.Errorf("PUT %s: %v", key, err)
					return
				}
				mu.Lock()
				acked = append(acked, ackedPut{key: key, version: o.HLC, body: body})
				mu.Unlock()
				n.Add(1)
			}
		}()
	}
	// Kill n3 once batches are going to it, then write on without it for a while.
	if !waitFor(30*time.Second, func() bool { b, _ := c.nodes[0].gw.PutBatchStats(); return b >= 3 }) {
		t.Fatal("no put batches were sent")
	}
	c.stop(2)
	at := n.Load()
	if !waitFor(30*time.Second, func() bool { return n.Load() >= at+200 }) {
		t.Fatalf("only %d PUTs acknowledged after the holder was killed", n.Load()-at)
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	pending := c.nodes[0].hints.Len()
	if pending == 0 {
		t.Fatal("no hints queued for the killed holder")
	}
	c.restart(2)
	c.runHints(0, 10*time.Millisecond)
	checkEveryHolder(t, c, acked)
	b, w := c.nodes[0].gw.PutBatchStats()
	t.Logf("%d PUTs acknowledged, %d hints queued for the killed holder, %d put batches carried %d writes", len(acked), pending, b, w)
}
