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

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// condPut stores body as bucket/key through g under the conditions of opts.
func condPut(ctx context.Context, g *Gateway, bucket, key string, body []byte, opts object.PutOptions) (*object.Object, error) {
	return condPutClass(ctx, g, bucket, key, "", body, opts)
}

// condPutClass is condPut in a storage class.
func condPutClass(ctx context.Context, g *Gateway, bucket, key, class string, body []byte, opts object.PutOptions) (*object.Object, error) {
	src, fin := md5Finish(bytes.NewReader(body))
	opts.Finish = fin
	return g.PutObject(ctx, bucket, key, &object.Object{StorageClass: class}, src, int64(len(body)), opts)
}

// lost reports whether err is how a conditional write that lost a race is answered: 412
// PreconditionFailed or 409 ConditionalRequestConflict.
func lost(err error) bool {
	return errors.Is(errors.Precondition, err) || errors.IsErr(err, ErrConditionalConflict)
}

// race runs n races of two conditional writes of one key (in class) through two
// gateways, w workers at a time on distinct keys: prepare(i) returns the key and each
// writer's body and options. Every race must have exactly one winner, a loser that lost
// as S3 answers, and the winner's object stored.
func race(t *testing.T, c *testCluster, n, w int, class string, prepare func(i int) (key string, bodies [2][]byte, opts object.PutOptions)) {
	t.Helper()
	ctx := context.Background()
	gws := [2]*Gateway{c.nodes[0].gw, c.nodes[1].gw}
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				key, bodies, opts := prepare(i)
				var errs [2]error
				var objs [2]*object.Object
				start := make(chan struct{})
				var both sync.WaitGroup
				for j := range 2 {
					both.Go(func() {
						<-start
						objs[j], errs[j] = condPutClass(ctx, gws[j], "b", key, class, bodies[j], opts)
					})
				}
				close(start)
				both.Wait()
				winner := -1
				for j := range 2 {
					switch {
					case errs[j] == nil && winner < 0:
						winner = j
					case errs[j] == nil:
						t.Errorf("race %d (%s): both writes won (ETags %s, %s)", i, key, objs[0].ETag, objs[1].ETag)
						failed.Store(true)
						return
					case !lost(errs[j]):
						t.Errorf("race %d (%s): writer %d failed: %v", i, key, j, errs[j])
						failed.Store(true)
						return
					}
				}
				if winner < 0 {
					t.Errorf("race %d (%s): no winner: %v; %v", i, key, errs[0], errs[1])
					failed.Store(true)
					return
				}
				// Every holder comes to hold the winner's version (the third may take a
				// moment: the write answered once two had it).
				if !waitFor(10*time.Second, func() bool { return converged(c.replicaStates(2, "b", key), objs[winner].HLC, false) }) {
					t.Errorf("race %d (%s): the holders do not all come to the winner's version %d: %+v", i, key, objs[winner].HLC, c.replicaStates(2, "b", key))
					failed.Store(true)
					return
				}
				got, o, err := get(ctx, c.nodes[2].gw, "b", key, 0, -1)
				if err != nil || !bytes.Equal(got, bodies[winner]) || o.HLC != objs[winner].HLC {
					t.Errorf("race %d (%s): stored %d bytes at %v (%v); want the winner's (%d at %d)", i, key, len(got), o, err, len(bodies[winner]), objs[winner].HLC)
					failed.Store(true)
					return
				}
			}
		})
	}
	wg.Wait()
}

// raceCount is how many races a race test runs: 1,000, or 100 with -short.
func raceCount() int {
	if testing.Short() {
		return 100
	}
	return 1000
}

// TestConditionalPutRace: two gateways of a 3-node cluster each PUT the same fresh key
// with If-None-Match: * at the same moment, 1,000 times (keys spread over every node as
// the lease holder, the racers' own and another): exactly one wins each time, the other
// gets 412 (or 409), and the stored object is the winner's.
func TestConditionalPutRace(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	race(t, c, raceCount(), 4, "", func(i int) (string, [2][]byte, object.PutOptions) {
		return "fresh/" + strconv.Itoa(i), [2][]byte{[]byte("first writer " + strconv.Itoa(i)), []byte("second writer " + strconv.Itoa(i))},
			object.PutOptions{IfNoneMatch: true}
	})
}

// TestConditionalPutRaceEC is TestConditionalPutRace in an erasure-coded class (4+2 on a
// 6-node cluster), fewer times: half with the version fixed before the body (below
// feature level 9), half with stripes named by a tag and the version taken under the
// lease.
func TestConditionalPutRaceEC(t *testing.T) {
	c := newECCluster(t)
	for _, level := range []int{0, LevelTaggedStripes} {
		t.Run(fmt.Sprintf("level%d", level), func(t *testing.T) {
			c.setLevel(level)
			race(t, c, raceCount()/20, 4, "EC42", func(i int) (string, [2][]byte, object.PutOptions) {
				return fmt.Sprintf("fresh/%d/%d", level, i), [2][]byte{randBody(uint64(i), 100<<10), randBody(uint64(i)+1<<32, 100<<10)}, object.PutOptions{IfNoneMatch: true}
			})
		})
	}
}

// TestConditionalIfMatchRace: two gateways both PUT with If-Match of the object's current
// ETag and different bodies: exactly one wins; bodies of 4 KiB (sent whole) and of 2 MiB
// (streamed to the replicas, the condition evaluated once the body is complete).
func TestConditionalIfMatchRace(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	n := raceCount() / 4
	for _, size := range []int{4 << 10, 2 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			if size > smallBody && testing.Short() {
				n = 10
			} else if size > smallBody {
				n = 40
			}
			race(t, c, n, 4, "", func(i int) (string, [2][]byte, object.PutOptions) {
				key := fmt.Sprintf("match/%d/%d", size, i)
				o := mustPut(t, c.nodes[2].gw, "b", key, randBody(uint64(i), size))
				return key, [2][]byte{randBody(uint64(i)+1<<32, size), randBody(uint64(i)+2<<32, size)}, object.PutOptions{IfMatch: `"` + o.ETag + `"`}
			})
		})
	}
}

// TestConditionalSemantics: the answers of conditional writes, as S3 gives them, on
// PUT, on an erasure-coded PUT and on CompleteMultipartUpload, through a gateway that is
// not the key's lease holder.
func TestConditionalSemantics(t *testing.T) {
	c := newECCluster(t)
	ctx := context.Background()
	for _, class := range []string{"", "EC42"} {
		t.Run("class="+class, func(t *testing.T) {
			key := c.keyWhere("b", "sem"+class, func(r []int) bool { return r[0] != 0 })
			g := c.nodes[0].gw
			p := func(body string, opts object.PutOptions) (*object.Object, error) {
				src, fin := md5Finish(bytes.NewReader([]byte(body)))
				opts.Finish = fin
				return g.PutObject(ctx, "b", key, &object.Object{StorageClass: class}, src, int64(len(body)), opts)
			}
			if _, err := p("one", object.PutOptions{IfMatch: "*"}); !errors.Is(errors.NotExist, err) || !errors.IsErr(err, object.ErrNoSuchKey) {
				t.Fatalf("If-Match on no object: %v, want NoSuchKey", err)
			}
			one, err := p("one", object.PutOptions{IfNoneMatch: true})
			if err != nil {
				t.Fatalf("If-None-Match on no object: %v", err)
			}
			if _, err := p("two", object.PutOptions{IfNoneMatch: true}); !errors.Is(errors.Precondition, err) {
				t.Fatalf("If-None-Match on an object: %v, want Precondition", err)
			}
			if _, err := p("two", object.PutOptions{IfMatch: `"0123", "4567"`}); !errors.Is(errors.Precondition, err) {
				t.Fatalf("If-Match of other ETags: %v, want Precondition", err)
			}
			two, err := p("two", object.PutOptions{IfMatch: `"0123", "` + one.ETag + `"`})
			if err != nil || two.HLC <= one.HLC {
				t.Fatalf("If-Match of the ETag: %+v, %v", two, err)
			}
			if got, _, err := get(ctx, c.nodes[1].gw, "b", key, 0, -1); err != nil || string(got) != "two" {
				t.Fatalf("read %q, %v; want two", got, err)
			}
			// A deleted key holds no object.
			if err := c.nodes[1].gw.DeleteObject(ctx, "b", key); err != nil {
				t.Fatal(err)
			}
			if _, err := p("three", object.PutOptions{IfMatch: "*"}); !errors.Is(errors.NotExist, err) {
				t.Fatalf("If-Match on a deleted object: %v, want NotExist", err)
			}
			if _, err := p("three", object.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatalf("If-None-Match on a deleted object: %v", err)
			}
			for _, nd := range c.nodes { // leases are given back in the background
				if !waitFor(10*time.Second, func() bool { return nd.gw.Leases().Held() == 0 }) {
					t.Fatalf("%s holds %d leases after the writes", nd.id, nd.gw.Leases().Held())
				}
			}
		})
	}
	t.Run("complete", func(t *testing.T) {
		key := c.keyWhere("b", "mpu", func(r []int) bool { return r[0] != 0 })
		g := c.nodes[0].gw
		upload := func() (string, []object.CompletePart) {
			id, err := g.CreateUpload(ctx, "b", key, &object.Object{})
			if err != nil {
				t.Fatal(err)
			}
			body := randBody(9, 1000)
			src, fin := md5Finish(bytes.NewReader(body))
			pt, err := g.PutPart(ctx, "b", key, id, 1, src, int64(len(body)), fin)
			if err != nil {
				t.Fatal(err)
			}
			return id, []object.CompletePart{{Number: 1, ETag: pt.ETag}}
		}
		mustPut(t, c.nodes[1].gw, "b", key, []byte("there"))
		id, list := upload()
		if _, err := g.CompleteUploadIf(ctx, "b", key, id, list, 0, object.PutOptions{IfNoneMatch: true}, nil); !errors.Is(errors.Precondition, err) {
			t.Fatalf("completion with If-None-Match over an object: %v", err)
		}
		cur, err := g.StatObject(ctx, "b", key)
		if err != nil {
			t.Fatal(err)
		}
		o, err := g.CompleteUploadIf(ctx, "b", key, id, list, 0, object.PutOptions{IfMatch: cur.ETag}, nil)
		if err != nil || o.HLC <= cur.HLC {
			t.Fatalf("completion with If-Match of the ETag: %+v, %v", o, err)
		}
		// A retried completion answers its result again, whatever the condition says now.
		if r, err := g.CompleteUploadIf(ctx, "b", key, id, list, 0, object.PutOptions{IfNoneMatch: true}, nil); err != nil || r.ETag != o.ETag {
			t.Fatalf("retried completion: %+v, %v", r, err)
		}
	})
}

// TestConditionalHolderDown: when the node that grants a key's leases (its first holder,
// not marked down) cannot be reached, a conditional write of the key is a Transient error
// (503) and writes nothing, while a plain write still has its quorum.
func TestConditionalHolderDown(t *testing.T) {
	c := newCluster(t, 3, clusterConfig{})
	c.createBucket("b")
	ctx := context.Background()
	key := c.keyWhere("b", "down", func(r []int) bool { return r[0] == 2 })
	mustPut(t, c.nodes[0].gw, "b", key, []byte("before"))
	c.stop(2)
	for _, opts := range []object.PutOptions{{IfNoneMatch: true}, {IfMatch: "*"}} {
		for _, size := range []int{100, 2 << 20} {
			_, err := condPut(ctx, c.nodes[0].gw, "b", key, randBody(3, size), opts)
			if !errors.Is(errors.Transient, err) || lost(err) {
				t.Fatalf("%+v, %d bytes, with the lease holder down: %v; want a Transient error", opts, size, err)
			}
		}
	}
	for _, i := range []int{0, 1} {
		if o, err := c.nodes[i].store.StatObject("b", key); err != nil || o.Size != int64(len("before")) {
			t.Fatalf("%s after refused conditional writes: %+v, %v", c.nodes[i].id, o, err)
		}
	}
	if _, err := condPut(ctx, c.nodes[0].gw, "b", key, []byte("plain"), object.PutOptions{}); err != nil {
		t.Fatalf("a plain write with one holder down: %v", err)
	}
}
