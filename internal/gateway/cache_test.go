package gateway

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// checkCache verifies the LRU's invariants: the bytes charged are the sum of the entries'
// charges and within the budget, and the list holds exactly the map's entries.
func checkCache(t *testing.T, c *objectCache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum int64
	n := 0
	var prev *cacheEntry
	for e := c.head; e != nil; e = e.next {
		if e.prev != prev {
			t.Fatalf("broken list at %v", e.k)
		}
		if c.entries[e.k] != e {
			t.Fatalf("listed entry %v not in the map", e.k)
		}
		sum += e.charge
		n++
		prev = e
	}
	if prev != c.tail {
		t.Fatal("tail is not the last entry")
	}
	if n != len(c.entries) {
		t.Fatalf("list has %d entries, map %d", n, len(c.entries))
	}
	if sum != c.used {
		t.Fatalf("used %d, entries' charges sum to %d", c.used, sum)
	}
	if c.used > c.budget {
		t.Fatalf("used %d over the budget %d", c.used, c.budget)
	}
}

func TestObjectCacheLRU(t *testing.T) {
	// Keys "a".."z" in bucket "b": each entry costs its body + 2 + cacheEntryOverhead.
	const over = 2 + cacheEntryOverhead
	body := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	type op struct {
		do      string // put, get, drop
		key     string
		version uint64
		size    int
		want    bool // get: a hit
	}
	tests := []struct {
		name   string
		budget int64
		ops    []op
		keys   []string // cached at the end
		evicts int64
		maxObj int64 // if set, overrides the size limit (budget/16 by default)
	}{
		{"disabled", 0, nil, nil, 0, 0},
		{"put and hit", 64 << 10, []op{{do: "put", key: "a", version: 1, size: 100}, {do: "get", key: "a", version: 1, want: true}}, []string{"a"}, 0, 0},
		{"other version is a miss and dropped", 64 << 10, []op{{do: "put", key: "a", version: 1, size: 100}, {do: "get", key: "a", version: 2}, {do: "get", key: "a", version: 1}}, nil, 0, 0},
		{"newer version replaces", 64 << 10, []op{{do: "put", key: "a", version: 1, size: 100}, {do: "put", key: "a", version: 2, size: 200}, {do: "get", key: "a", version: 2, want: true}}, []string{"a"}, 0, 0},
		{"older fill never replaces newer", 64 << 10, []op{{do: "put", key: "a", version: 2, size: 100}, {do: "put", key: "a", version: 1, size: 100}, {do: "get", key: "a", version: 2, want: true}}, []string{"a"}, 0, 0},
		{"least recently used goes first", 3 * (1000 + over), []op{
			{do: "put", key: "a", version: 1, size: 1000}, {do: "put", key: "b", version: 1, size: 1000}, {do: "put", key: "c", version: 1, size: 1000},
			{do: "get", key: "a", version: 1, want: true}, // b is now the oldest
			{do: "put", key: "d", version: 1, size: 1000},
			{do: "get", key: "b", version: 1}}, []string{"a", "c", "d"}, 1, 2000},
		{"a big entry evicts several", 3 * (1000 + over), []op{
			{do: "put", key: "a", version: 1, size: 1000}, {do: "put", key: "b", version: 1, size: 1000}, {do: "put", key: "c", version: 1, size: 1000},
			{do: "put", key: "d", version: 1, size: 2000}}, []string{"c", "d"}, 2, 2000},
		{"over the object limit is not kept", 16 * 1000, []op{{do: "put", key: "a", version: 1, size: 1001}}, nil, 0, 0},
		{"at the object limit is kept", 16 * 1000, []op{{do: "put", key: "a", version: 1, size: 1000}}, []string{"a"}, 0, 0},
		{"1 MiB cap", 1 << 30, []op{{do: "put", key: "a", version: 1, size: MaxCachedObject + 1}, {do: "put", key: "b", version: 1, size: MaxCachedObject}}, []string{"b"}, 0, 0},
		{"drop", 64 << 10, []op{{do: "put", key: "a", version: 1, size: 10}, {do: "drop", key: "a"}, {do: "get", key: "a", version: 1}}, nil, 0, 0},
		{"empty body", 64 << 10, []op{{do: "put", key: "a", version: 1, size: 0}, {do: "get", key: "a", version: 1, want: true}}, []string{"a"}, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newObjectCache(tc.budget)
			if tc.budget <= 0 {
				if c != nil {
					t.Fatal("a cache with no budget")
				}
				return
			}
			if tc.maxObj > 0 {
				c.maxObj = tc.maxObj
			}
			for i, o := range tc.ops {
				switch o.do {
				case "put":
					c.put("b", o.key, o.version, "e", body(o.size))
				case "get":
					b, ok := c.get("b", o.key, o.version, "e")
					if ok != o.want {
						t.Fatalf("op %d: get %s@%d hit=%v, want %v", i, o.key, o.version, ok, o.want)
					}
					if ok && len(b) == 0 && o.size != 0 {
						t.Fatalf("op %d: empty body", i)
					}
				case "drop":
					c.drop("b", o.key)
				}
				checkCache(t, c)
			}
			var keys []string
			for e := c.head; e != nil; e = e.next {
				keys = append(keys, e.k.key)
			}
			if got, want := strings.Join(sortedStrings(keys), ","), strings.Join(tc.keys, ","); got != want {
				t.Errorf("cached %q, want %q", got, want)
			}
			if got := c.evictions.Load(); got != tc.evicts {
				t.Errorf("%d evictions, want %d", got, tc.evicts)
			}
		})
	}
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestObjectCacheBudget drives random puts, gets and drops of random sizes from several
// goroutines: the byte budget is never exceeded and the accounting stays exact.
func TestObjectCacheBudget(t *testing.T) {
	for _, budget := range []int64{1000, 64 << 10, 1 << 20} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			c := newObjectCache(budget)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), uint64(budget)))
					for range 3000 {
						k := fmt.Sprintf("k%d", r.IntN(50))
						switch p := r.IntN(10); {
						case p < 5:
							c.put("b", k, uint64(r.IntN(4)), "e", make([]byte, r.IntN(int(budget/8)+2)))
						case p < 9:
							c.get("b", k, uint64(r.IntN(4)), "e")
						default:
							c.drop("b", k)
						}
						if used, _ := c.usage(); used > budget {
							t.Errorf("used %d over the budget %d", used, budget)
							return
						}
					}
				}()
			}
			wg.Wait()
			checkCache(t, c)
		})
	}
}

// cacheCluster is a 5-node cluster (N=3) whose gateways all have an object cache, a
// bucket, and a key none of whose replicas is node reader: reads through it cross the
// network, writes go through other gateways.
func cacheCluster(t *testing.T, cls clustermap.Class) (c *testCluster, key string, reader int, holders []int) {
	c = newCluster(t, 5, clusterConfig{class: cls, cache: 8 << 20})
	c.createBucket("b")
	key = c.keyWhere("b", "k", func(r []int) bool { return !containsInt(r, 0) })
	holders, _ = c.replicaSet("b", key)
	return c, key, 0, holders
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestObjectCacheFreshAcrossGateways: a non-holder gateway caches an object, other
// gateways overwrite, tag and delete it, and every read through the caching gateway
// returns the last acknowledged state; hits are counted only for unchanged versions.
func TestObjectCacheFreshAcrossGateways(t *testing.T) {
	c, key, rd, holders := cacheCluster(t, clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2})
	ctx := context.Background()
	g := c.nodes[rd].gw
	writer := c.nodes[holders[1]].gw
	other := c.nodes[4].gw
	if containsInt(holders, 4) {
		other = c.nodes[holders[2]].gw
	}
	read := func(want []byte) {
		t.Helper()
		b, _, err := get(ctx, g, "b", key, 0, -1)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("read %d bytes %.8q, want %d bytes %.8q", len(b), b, len(want), want)
		}
	}
	v1 := randBody(1, 4<<10)
	mustPut(t, writer, "b", key, v1)
	read(v1) // miss, fills
	read(v1) // hit
	if s := g.CacheStats(); s.Hits != 1 || s.Entries != 1 {
		t.Fatalf("after two reads: %+v, want 1 hit and 1 entry", s)
	}
	// A range read is served from the cached body.
	if b, _, err := get(ctx, g, "b", key, 100, 50); err != nil || !bytes.Equal(b, v1[100:150]) {
		t.Fatalf("range read: %v", err)
	}
	if s := g.CacheStats(); s.Hits != 2 {
		t.Fatalf("range read not a hit: %+v", s)
	}

	v2 := randBody(2, 4<<10)
	mustPut(t, other, "b", key, v2)
	read(v2)
	if s := g.CacheStats(); s.Stale != 1 {
		t.Fatalf("overwrite elsewhere: %+v, want 1 stale entry", s)
	}
	read(v2) // refilled: a hit again

	// A tag change elsewhere: the body is served from memory with the new tags.
	if _, err := writer.SetObjectTags(ctx, "b", key, [][2]string{{"k", "v"}}); err != nil {
		t.Fatal(err)
	}
	hits := g.CacheStats().Hits
	_, info, err := get(ctx, g, "b", key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tags) != 1 || info.Tags[0] != [2]string{"k", "v"} {
		t.Fatalf("tags %v after a tag change elsewhere", info.Tags)
	}
	if g.CacheStats().Hits != hits+1 {
		t.Fatal("a tag change made the body miss")
	}

	if err := other.DeleteObject(ctx, "b", key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(ctx, g, "b", key, 0, -1); !errors.Is(errors.NotExist, err) {
		t.Fatalf("read after a delete elsewhere: %v, want NoSuchKey", err)
	}
	if s := g.CacheStats(); s.Entries != 0 {
		t.Fatalf("entry kept after a delete: %+v", s)
	}
	v3 := randBody(3, 100)
	mustPut(t, writer, "b", key, v3)
	read(v3)
	read(v3)

	// Local writes drop the entry at once.
	mustPut(t, g, "b", key, v1)
	if s := g.CacheStats(); s.Entries != 0 {
		t.Fatalf("entry kept after a local write: %+v", s)
	}
	read(v1)

	// Too large: streamed, never cached.
	big := randBody(4, MaxCachedObject/2+1) // the 8 MiB budget caps objects at 512 KiB
	mustPut(t, writer, "b", key, big)
	read(big)
	read(big)
	if s := g.CacheStats(); s.Entries != 0 {
		t.Fatalf("a %d-byte object was cached with a %d-byte budget: %+v", len(big), s.Budget, s)
	}
}

// TestObjectCacheQuorumPartition: with R=2, a gateway that cached V1 and cannot reach one
// holder reads V2 (written while another holder missed it) and never its cached V1: the
// freshness check asks the read quorum as an uncached read does.
func TestObjectCacheQuorumPartition(t *testing.T) {
	c, key, rd, holders := cacheCluster(t, clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 2, D: 2})
	ctx := context.Background()
	g := c.nodes[rd].gw
	w := c.nodes[holders[0]].gw
	v1 := randBody(1, 4<<10)
	mustPut(t, w, "b", key, v1)
	for range 2 {
		if b, _, err := get(ctx, g, "b", key, 0, -1); err != nil || !bytes.Equal(b, v1) {
			t.Fatalf("read V1: %v", err)
		}
	}
	if g.CacheStats().Hits != 1 {
		t.Fatalf("V1 not cached: %+v", g.CacheStats())
	}
	// V2 reaches holders 0 and 1 only; the reader cannot reach holder 1, so it sees
	// holder 0 (V2) and holder 2 (V1).
	id := func(i int) string { return c.nodes[i].id }
	c.faults(id(holders[0]), id(holders[2])).Partition()
	v2 := randBody(2, 4<<10)
	mustPut(t, w, "b", key, v2)
	c.faults(c.nodes[rd].id, id(holders[1])).Partition()
	for range 3 {
		b, _, err := get(ctx, g, "b", key, 0, -1)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(b, v2) {
			t.Fatalf("stale read: got V1 from %+v", g.CacheStats())
		}
	}
	// A read quorum that cannot be had is an error, not the cached body.
	c.faults(c.nodes[rd].id, id(holders[0])).Partition()
	if _, _, err := get(ctx, g, "b", key, 0, -1); err == nil {
		t.Fatal("read with one reachable holder and R=2 answered")
	}
}

// TestObjectCacheHistory: clients overwrite, delete and read a few keys through random
// gateways of a 5-node cluster (N=3, W=2, R=2) with the cache on everywhere; no read may
// return a value an acknowledged write had replaced before the read began. Reads through
// non-holders are most of them, and some must be hits.
func TestObjectCacheHistory(t *testing.T) {
	cacheHistory(t, clusterConfig{class: clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 2, D: 2}, cache: 8 << 20}, 0)
}

// cacheHistory runs TestObjectCacheHistory's clients and checker on a 5-node cluster
// made with cfg, its map at feature level; it returns the cluster once checked.
func cacheHistory(t *testing.T, cfg clusterConfig, level int) *testCluster {
	c := newCluster(t, 5, cfg)
	if level > 0 {
		c.setLevel(level)
	}
	c.createBucket("h")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	type hop struct {
		key, kind, value string
		start, end       time.Time
		ok               bool
	}
	keys := []string{"k0", "k1", "k2"}
	var mu sync.Mutex
	var ops []*hop
	dur := 4 * time.Second
	if testing.Short() {
		dur = 2 * time.Second
	}
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for cl := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			r := rand.New(rand.NewPCG(seed, uint64(cl)))
			for seq := 0; time.Now().Before(deadline); seq++ {
				g := c.nodes[r.IntN(len(c.nodes))].gw
				o := &hop{key: keys[r.IntN(len(keys))], start: time.Now()}
				switch p := r.IntN(100); {
				case p < 20:
					o.kind, o.value = "put", fmt.Sprintf("c%d-%d", cl, seq)
					_, err := put(ctx, g, "h", o.key, []byte(o.value), int64(len(o.value)))
					o.ok = err == nil
				case p < 30:
					o.kind = "del"
					o.ok = g.DeleteObject(ctx, "h", o.key) == nil
				default:
					o.kind = "get"
					b, _, err := get(ctx, g, "h", o.key, 0, -1)
					switch {
					case err == nil:
						o.ok, o.value = true, string(b)
					case errors.Is(errors.NotExist, err):
						o.ok = true
					}
				}
				o.end = time.Now()
				mu.Lock()
				ops = append(ops, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var hits int64
	for _, nd := range c.nodes {
		hits += nd.gw.CacheStats().Hits
	}
	reads := 0
	for _, r := range ops {
		if r.kind != "get" || !r.ok {
			continue
		}
		reads++
		// The read must return a write (or the initial absence) not superseded before it
		// began: superseded means an acknowledged write started after it ended and
		// ended before the read started.
		fine := false
		cands := []*hop{{kind: "del", ok: true}} // initial: absent
		for _, w := range ops {
			if w.kind != "get" && w.key == r.key && w.start.Before(r.end) {
				cands = append(cands, w)
			}
		}
		for _, w := range cands {
			if (r.value == "") != (w.kind == "del") || (w.kind == "put" && w.value != r.value) {
				continue
			}
			superseded := false
			for _, y := range ops {
				if y.kind != "get" && y.key == r.key && y != w && y.ok && (w.end.IsZero() || w.end.Before(y.start)) && y.end.Before(r.start) {
					superseded = true
					break
				}
			}
			if !superseded {
				fine = true
				break
			}
		}
		if !fine {
			t.Errorf("stale read of %s: %q at %s", r.key, r.value, r.start.Format("15:04:05.000000"))
		}
	}
	t.Logf("%d operations, %d answered reads, %d cache hits", len(ops), reads, hits)
	if reads < 50 || hits == 0 {
		t.Fatalf("too little to check: %d reads, %d hits", reads, hits)
	}
	return c
}

// heldAnswers holds the answer of every Stat made while hold is set (after the holder
// answered) until release is closed, so that a freshness check can be made to read a
// version and report it late.
type heldAnswers struct {
	replica.Replica
	hold     *atomic.Bool
	release  chan struct{}
	answered *atomic.Int64 // Stats the holder answered while hold was set
}

func (s heldAnswers) Stat(ctx context.Context, bucket, key string) (*object.Object, error) {
	o, err := s.Replica.Stat(ctx, bucket, key)
	if s.hold.Load() {
		s.answered.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return o, err
}

// TestObjectCacheCheckNotShared: a GET that arrives while a freshness check is running
// does not take that check's answer (it may predate a write acknowledged since): a check
// reads V1 and is held, V2 is written and acknowledged meanwhile through another gateway,
// a GET begun after that acknowledgement joins the checks (it waits for the next one),
// the held check is let go, and that GET returns V2.
func TestObjectCacheCheckNotShared(t *testing.T) {
	var hold atomic.Bool
	var answered atomic.Int64
	release := make(chan struct{})
	c := newCluster(t, 5, clusterConfig{cache: 8 << 20, wrap: func(from string, r replica.Replica) replica.Replica {
		if from != "n1" {
			return r
		}
		return heldAnswers{Replica: r, hold: &hold, release: release, answered: &answered}
	}})
	c.createBucket("b")
	key := c.keyWhere("b", "k", func(r []int) bool { return !containsInt(r, 0) })
	holders, _ := c.replicaSet("b", key)
	ctx := context.Background()
	g := c.nodes[0].gw
	v1, v2 := randBody(1, 4<<10), randBody(2, 4<<10)
	mustPut(t, c.nodes[holders[0]].gw, "b", key, v1)
	for range 2 {
		if b, _, err := get(ctx, g, "b", key, 0, -1); err != nil || !bytes.Equal(b, v1) {
			t.Fatalf("read V1: %v", err)
		}
	}
	if g.CacheStats().Hits != 1 {
		t.Fatalf("V1 not cached: %+v", g.CacheStats())
	}
	hold.Store(true)
	first := make(chan []byte, 1)
	go func() {
		b, _, err := get(ctx, g, "b", key, 0, -1)
		if err != nil {
			t.Errorf("first read: %v", err)
		}
		first <- b
	}()
	// The first read's check is running: the holder has answered V1, and the answer is
	// held.
	if !waitFor(5*time.Second, func() bool { return answered.Load() >= 1 }) {
		t.Fatalf("no check answered: %+v", g.CacheStats())
	}
	hold.Store(false)
	mustPut(t, c.nodes[holders[1]].gw, "b", key, v2)
	second := make(chan []byte, 1)
	go func() {
		b, _, err := get(ctx, g, "b", key, 0, -1)
		if err != nil {
			t.Errorf("second read: %v", err)
		}
		second <- b
	}()
	// The second read is waiting for the next check (it must not take the held one's).
	k := cacheKey{"b", key}
	if !waitFor(5*time.Second, func() bool {
		g.cache.fmu.Lock()
		defer g.cache.fmu.Unlock()
		f := g.cache.flights[k]
		return f != nil && f.running && f.next != nil
	}) {
		t.Fatal("the second read did not join the checks")
	}
	close(release)
	if b := <-second; !bytes.Equal(b, v2) {
		t.Fatalf("a read begun after V2 was acknowledged returned V1 (it shared a check begun before): %+v", g.CacheStats())
	}
	if b := <-first; !bytes.Equal(b, v1) && !bytes.Equal(b, v2) {
		t.Fatal("the first read returned neither version")
	}
}

// TestObjectCacheSharedChecks: concurrent GETs of one cached object share freshness
// checks (fewer checks than GETs), and all of them are hits.
func TestObjectCacheSharedChecks(t *testing.T) {
	c, key, rd, holders := cacheCluster(t, clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2})
	ctx := context.Background()
	g := c.nodes[rd].gw
	v := randBody(1, 4<<10)
	mustPut(t, c.nodes[holders[0]].gw, "b", key, v)
	if _, _, err := get(ctx, g, "b", key, 0, -1); err != nil {
		t.Fatal(err)
	}
	c.faults(c.nodes[rd].id, c.nodes[holders[0]].id).Delay(20 * time.Millisecond)
	before := g.CacheStats()
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if b, _, err := get(ctx, g, "b", key, 0, -1); err != nil || !bytes.Equal(b, v) {
					t.Errorf("read: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := g.CacheStats()
	hits, checks := s.Hits-before.Hits, s.Checks-before.Checks
	t.Logf("160 GETs: %d hits, %d checks", hits, checks)
	if hits != 160 || checks >= 80 {
		t.Fatalf("160 concurrent GETs: %d hits, %d checks; want 160 hits and fewer than 80 checks", hits, checks)
	}
}

// TestObjectCacheErasureCoded: a small erasure-coded object is cached like a replicated
// one (its reader keeps Prepare), served fresh after an overwrite through another
// gateway, and a range of it is served from memory.
func TestObjectCacheErasureCoded(t *testing.T) {
	c := newCluster(t, 6, clusterConfig{cache: 8 << 20})
	if _, err := c.maps.Update(func(m *clustermap.Map) error {
		m.Classes["EC42"] = clustermap.Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.createBucket("b")
	ctx := context.Background()
	g, other := c.nodes[0].gw, c.nodes[3].gw
	v1, v2 := randBody(1, 100<<10), randBody(2, 90<<10)
	if _, err := putClass(ctx, other, "b", "ec", "EC42", v1); err != nil {
		t.Fatal(err)
	}
	rd, err := g.OpenObject(ctx, "b", "ec")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rd.(Preparer); !ok {
		t.Fatal("the filling reader of an erasure-coded object lost Prepare")
	}
	var buf bytes.Buffer
	if _, err := rd.WriteRange(ctx, &buf, 0, int64(len(v1))); err != nil || !bytes.Equal(buf.Bytes(), v1) {
		t.Fatalf("first read: %v", err)
	}
	rd.Close()
	if b, info, err := get(ctx, g, "b", "ec", 1000, 5000); err != nil || !bytes.Equal(b, v1[1000:6000]) || !info.Striped {
		t.Fatalf("range read: %v", err)
	}
	if s := g.CacheStats(); s.Hits != 1 {
		t.Fatalf("the erasure-coded object was not served from memory: %+v", s)
	}
	if _, err := putClass(ctx, other, "b", "ec", "EC42", v2); err != nil {
		t.Fatal(err)
	}
	if b, _, err := get(ctx, g, "b", "ec", 0, -1); err != nil || !bytes.Equal(b, v2) {
		t.Fatalf("read after an overwrite elsewhere: %v", err)
	}
}

// TestObjectCacheCheckOtherQuorum: a GET does not join a waiting check that reads with
// another quorum or other holders (made by a request that saw another map): it checks on
// its own, with its own R, and gets the newest version.
func TestObjectCacheCheckOtherQuorum(t *testing.T) {
	c, key, rd, holders := cacheCluster(t, clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2})
	ctx := context.Background()
	g := c.nodes[rd].gw
	mustPut(t, c.nodes[holders[0]].gw, "b", key, randBody(1, 4<<10))
	_, ts, err := g.topo.Replicas("b", key)
	if err != nil {
		t.Fatal(err)
	}
	other := append([]topology.Target(nil), ts...)
	other[0], other[1] = other[1], other[0]
	k := cacheKey{"b", key}
	for _, tt := range []struct {
		name string
		ts   []topology.Target
		r    int
		join bool
	}{
		{"same quorum and holders", ts, 2, true},
		{"another quorum", ts, 1, false},
		{"other holders", other, 2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// A check is running and another waits to start, made by a request with R=2.
			waiting := &check{done: make(chan struct{}), ts: ts, r: 2}
			g.cache.fmu.Lock()
			g.cache.flights[k] = &flight{running: true, next: waiting}
			g.cache.fmu.Unlock()
			defer func() {
				g.cache.fmu.Lock()
				delete(g.cache.flights, k)
				g.cache.fmu.Unlock()
			}()
			// The waiting check never starts: a request that wrongly joins it waits until
			// this context ends, and then fails.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if tt.join {
				cancel() // it waits for the check it joined: only its context ends the wait
			}
			before := g.cache.checks.Load()
			o, _, err := g.freshVersion(cctx, tt.ts, tt.r, "b", key, 0)
			sent := g.cache.checks.Load() - before
			switch {
			case tt.join && (sent != 0 || err != context.Canceled):
				t.Fatalf("did not wait for the check it should have joined: %d checks sent, %v", sent, err)
			case !tt.join && (sent != 1 || err != nil || o == nil):
				t.Fatalf("own check: %d sent, %v, %+v", sent, err, o)
			}
		})
	}
}
