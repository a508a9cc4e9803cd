package gateway

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
)

// Gateway behaviour under replica faults injected through the replica seam
// (replica.Faults), without stopping nodes: a holder that hangs in the middle of a body,
// one that fails after the quorum was reached, and one cut off from the coordinating
// gateway but not from the others.

// holds reports whether node i's store has bucket/key at version with body want.
func (c *testCluster) holds(i int, bucket, key string, version uint64, want []byte) bool {
	rd, err := c.nodes[i].store.OpenObject(bucket, key)
	if err != nil {
		return false
	}
	defer rd.Close()
	var buf bytes.Buffer
	if _, err := rd.WriteRange(context.Background(), &buf, 0, rd.Object.Size); err != nil {
		return false
	}
	return rd.Object.HLC == version && bytes.Equal(buf.Bytes(), want)
}

func TestFaultReplicaHangsMidBody(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{timeout: 300 * time.Millisecond})
	c.createBucket("b")
	// Node n3 stops taking the body 100 KiB into a 3 MiB write coordinated by n1.
	c.faults("n1", "n3").HangBodyAfter(100 << 10)
	body := randBody(1, 3<<20)
	o, err := put(context.Background(), c.nodes[0].gw, "b", "k", body, -1)
	if err != nil {
		t.Fatalf("put with one replica hung mid-body: %v (two replicas took it: W=2 holds)", err)
	}
	if !c.holds(0, "b", "k", o.HLC, body) || !c.holds(1, "b", "k", o.HLC, body) {
		t.Fatal("the replicas that took the body do not hold it")
	}
	if _, err := c.nodes[2].store.StatVersion("b", "k"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("the hung replica holds a record of a body it never finished: %v", err)
	}
	if got, _, err := get(context.Background(), c.nodes[2].gw, "b", "k", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read through the hung replica's own gateway: %v", err)
	}
	// Once healed, the queued hint brings the hung replica up to date.
	c.healAll()
	c.runHints(0, 20*time.Millisecond)
	if !waitFor(20*time.Second, func() bool { return c.holds(2, "b", "k", o.HLC, body) }) {
		t.Fatal("the replica that hung did not receive the object after it healed")
	}
}

func TestFaultReplicaFailsAfterQuorum(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inject func(c *testCluster)
		// applied: the failing replica applied the write although it answered an error.
		applied bool
	}{
		{"answers an error after the quorum", func(c *testCluster) {
			f := c.faults("n1", "n3")
			f.Delay(600 * time.Millisecond) // past the straggler wait (200ms): the client has its answer
			f.Fail(errors.E(errors.Transient, "injected failure"))
		}, false},
		{"applies the write, its answer is lost", func(c *testCluster) { c.faults("n1", "n3").LoseAnswers() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, clusterConfig{})
			c.createBucket("b")
			tc.inject(c)
			for i, size := range []int{5 << 10, 2 << 20} { // in memory, and streamed
				key := "k" + string(rune('0'+i))
				body := randBody(uint64(i), size)
				o, err := put(context.Background(), c.nodes[0].gw, "b", key, body, int64(size))
				if err != nil {
					t.Fatalf("put %d bytes: %v", size, err)
				}
				if !waitFor(10*time.Second, func() bool { return len(c.hintsFor(0, "n3", "b", key)) > 0 }) {
					t.Fatalf("no hint queued for the replica that failed (%d bytes)", size)
				}
				if got := c.holds(2, "b", key, o.HLC, body); got != tc.applied {
					t.Fatalf("failing replica holds the object: %v, want %v", got, tc.applied)
				}
				if got, _, err := get(context.Background(), c.nodes[1].gw, "b", key, 0, -1); err != nil || !bytes.Equal(got, body) {
					t.Fatalf("read after the write: %v", err)
				}
				c.faults("n1", "n3").Heal()
				c.runHints(0, 20*time.Millisecond)
				if !waitFor(20*time.Second, func() bool { return c.holds(2, "b", key, o.HLC, body) && len(c.hintsFor(0, "n3", "b", key)) == 0 }) {
					t.Fatalf("the hint was not delivered (%d bytes)", size)
				}
				tc.inject(c)
			}
		})
	}
}

func TestFaultPartitionedFromGatewayOnly(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	c.faults("n1", "n3").Partition() // n1 cannot reach n3; n2 can, and n3 can reach both
	b1, b2 := randBody(1, 40<<10), randBody(2, 2<<20)
	o1, err := put(context.Background(), c.nodes[0].gw, "b", "k1", b1, int64(len(b1)))
	if err != nil {
		t.Fatalf("put through n1: %v", err)
	}
	if _, err := c.nodes[2].store.StatVersion("b", "k1"); !errors.Is(errors.NotExist, err) {
		t.Fatalf("n3 got a write from a gateway partitioned from it: %v", err)
	}
	if len(c.hintsFor(0, "n3", "b", "k1")) == 0 {
		t.Fatal("no hint queued at n1 for n3")
	}
	o2, err := put(context.Background(), c.nodes[1].gw, "b", "k2", b2, int64(len(b2)))
	if err != nil || !c.holds(2, "b", "k2", o2.HLC, b2) {
		t.Fatalf("put through n2, which reaches n3: %v", err)
	}
	// n3's own gateway lacks k1 locally and reads it from the others.
	if got, _, err := get(context.Background(), c.nodes[2].gw, "b", "k1", 0, -1); err != nil || !bytes.Equal(got, b1) {
		t.Fatalf("read of k1 through n3: %v", err)
	}
	// n1 still reads k2 (n3's copy is out of its reach, the others are not).
	if got, _, err := get(context.Background(), c.nodes[0].gw, "b", "k2", 0, -1); err != nil || !bytes.Equal(got, b2) {
		t.Fatalf("read of k2 through n1: %v", err)
	}
	c.healAll()
	c.runHints(0, 20*time.Millisecond)
	if !waitFor(20*time.Second, func() bool { return c.holds(2, "b", "k1", o1.HLC, b1) }) {
		t.Fatal("n3 did not receive k1 once the partition healed")
	}
}

// A listing goes on without storage nodes that do not answer (not marked down yet) while
// they are fewer than min(W, D): every acknowledged write and delete is on at least that
// many nodes. Here a node is partitioned from the listing gateway only, after writes and
// deletes it missed in part; the listing is complete and current. With two of three
// partitioned (more than W-1), it is refused rather than incomplete.
func TestFaultListWithoutUnreachableNode(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	g := c.nodes[0].gw
	ctx := context.Background()
	live := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprintf("d%d/k%02d", i%3, i)
		if i == 20 {
			c.faults("n1", "n3").Partition() // n3 misses the rest from n1 (hinted)
		}
		mustPut(t, g, "b", k, []byte(k))
		live[k] = true
	}
	for i := 0; i < 40; i += 7 {
		k := fmt.Sprintf("d%d/k%02d", i%3, i)
		if err := g.DeleteObject(ctx, "b", k); err != nil {
			t.Fatal(err)
		}
		delete(live, k)
	}
	for _, opts := range []object.ListOptions{{Max: 1000}, {Max: 3}, {Max: 2, Delimiter: "/"}, {Max: 1000, Prefix: "d1/"}} {
		keys, prefixes := listKeys(t, g, "b", opts)
		wantKeys, wantPrefixes := modelList(live, opts)
		if !slices.Equal(keys, wantKeys) || !slices.Equal(prefixes, wantPrefixes) {
			t.Fatalf("%+v without n3: keys %q prefixes %q; want %q %q", opts, keys, prefixes, wantKeys, wantPrefixes)
		}
	}
	c.faults("n1", "n2").Partition()
	if _, err := g.List(ctx, "b", object.ListOptions{Max: 1000}); !errors.Is(errors.Transient, err) {
		t.Fatalf("listing with two of three nodes unreachable: %v, want a Transient error", err)
	}
}

// With one copy per object (N = 1) the gateway writes that copy on the request's own
// goroutine (fanOutAt). A copy that fails fails the PUT with the holder's error and
// leaves nothing behind; one that hangs is bounded by the write's timeout and answered
// as of unknown outcome; once the holder answers again, a retry with another body
// succeeds and is what every gateway reads.
func TestFaultOneCopy(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, 3, clusterConfig{timeout: 300 * time.Millisecond,
		class: clustermap.Class{Name: clustermap.StandardClass, N: 1, W: 1, R: 1, D: 1}})
	c.createBucket("b")
	local := c.keyWhere("b", "local", func(r []int) bool { return r[0] == 0 })
	body := randBody(3, 5000)
	if o, err := put(ctx, c.nodes[0].gw, "b", local, body, int64(len(body))); err != nil || !c.holds(0, "b", local, o.HLC, body) {
		t.Fatalf("put of a key the gateway holds alone: %v", err)
	}
	for i, tc := range []struct {
		name    string
		inject  func(*replica.Faults)
		applied bool // the failed copy may have been applied (the error says so)
	}{
		{"fails", func(f *replica.Faults) { f.Fail(errors.E(errors.Transient, "injected failure")) }, false},
		{"hangs", func(f *replica.Faults) { f.Hang() }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := c.keyWhere("b", "remote"+tc.name, func(r []int) bool { return r[0] == 2 })
			tc.inject(c.faults("n1", "n3"))
			_, err := put(ctx, c.nodes[0].gw, "b", key, body, int64(len(body)))
			if err == nil {
				t.Fatal("a PUT whose one copy failed was acknowledged")
			}
			if !errors.Is(errors.Transient, err) || !strings.Contains(err.Error(), "outcome is unknown") {
				t.Fatalf("PUT error %v: want a transient one saying the outcome is unknown", err)
			}
			c.healAll()
			if _, err := c.nodes[2].store.StatVersion("b", key); !tc.applied && !errors.Is(errors.NotExist, err) {
				t.Fatalf("the failed copy left a record (%v)", err)
			}
			retry := randBody(uint64(10+i), 6000)
			o, err := put(ctx, c.nodes[0].gw, "b", key, retry, int64(len(retry)))
			if err != nil {
				t.Fatalf("the PUT retried once the holder answers: %v", err)
			}
			for g := range c.nodes {
				if got, _, err := get(ctx, c.nodes[g].gw, "b", key, 0, -1); err != nil || !bytes.Equal(got, retry) {
					t.Fatalf("read through %s after the retried PUT: %v", c.nodes[g].id, err)
				}
			}
			if !c.holds(2, "b", key, o.HLC, retry) {
				t.Fatal("the holder does not hold the retried body")
			}
		})
	}
}
