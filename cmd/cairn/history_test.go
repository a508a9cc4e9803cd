package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// histOp is one client operation of the history checker.
type histOp struct {
	client     int
	key        string
	kind       string // put, del, get
	value      string // put: the value written; get: the value read ("" = not found)
	start, end time.Time
	ok         bool // acknowledged (put, del) or answered (get)
}

// superseded reports whether write x was overwritten, before time t, by an acknowledged
// write y that started after x ended: then no read starting at t may return x.
func superseded(x *histOp, writes []*histOp, t time.Time) bool {
	for _, y := range writes {
		if y != x && y.ok && x.ok && x.end.Before(y.start) && y.end.Before(t) {
			return true
		}
	}
	return false
}

// checkRead reports an error if read r returned a value no write could explain: a value
// never written, or one that an acknowledged later write had replaced before r started.
func checkRead(r *histOp, writes []*histOp) error {
	var candidates []*histOp
	for _, w := range writes {
		if !w.start.Before(r.end) {
			continue // not yet invoked when the read returned
		}
		if (r.value == "" && w.kind == "del") || (r.value != "" && w.kind == "put" && w.value == r.value) {
			candidates = append(candidates, w)
		}
	}
	initial := &histOp{kind: "del", ok: true} // the key starts absent, as if deleted at time 0
	if r.value == "" {
		candidates = append(candidates, initial)
	}
	for _, c := range candidates {
		if !superseded(c, writes, r.start) {
			return nil
		}
	}
	if len(candidates) == 0 || (len(candidates) == 1 && candidates[0] == initial && r.value != "") {
		return fmt.Errorf("read of %s at %s returned %q, which no write produced", r.key, r.start.Format("15:04:05.000"), r.value)
	}
	return fmt.Errorf("stale read of %s: returned %q at %s although a later acknowledged write had completed", r.key, r.value, r.start.Format("15:04:05.000"))
}

// A history checker: clients write, overwrite, delete and read a few keys through random
// gateways while nodes are killed and restarted, or paused and resumed, one at a time. With N=3, W=2, R=2 no read
// may return data older than a write acknowledged before it started, and after recovery
// every key reads as its last acknowledged write (or a write whose outcome was unknown)
// from every gateway, with all three replicas equal.
func TestClusterHistory(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	if out, err := tc.admin(0, "class", "set", "STANDARD", "--replicas", "3", "--w", "2", "--r", "2", "--d", "2"); err != nil {
		t.Fatalf("class set: %v\n%s", err, out)
	}
	ctx := context.Background()
	if _, err := tc.procs[0].client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("hist")}); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	keys := []string{"k0", "k1", "k2", "k3", "k4"}
	var mu sync.Mutex
	var ops []*histOp
	var alive [3]bool
	for i := range alive {
		alive[i] = true
	}
	var aliveMu sync.Mutex
	pickNode := func(r *rand.Rand) int {
		aliveMu.Lock()
		defer aliveMu.Unlock()
		for {
			if i := r.IntN(3); alive[i] {
				return i
			}
		}
	}
	clients := make([]*s3.Client, 3)
	for i := range clients {
		c := tc.procs[i].client()
		clients[i] = s3.New(c.Options(), func(o *s3.Options) { o.HTTPClient = &http.Client{Timeout: 10 * time.Second} })
	}
	deadline := time.Now().Add(14 * time.Second)
	var wg sync.WaitGroup
	for cl := 0; cl < 4; cl++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(cl)))
			for seq := 0; time.Now().Before(deadline); seq++ {
				c := clients[pickNode(r)]
				op := &histOp{client: cl, key: keys[r.IntN(len(keys))], start: time.Now()}
				switch p := r.IntN(100); {
				case p < 55:
					op.kind, op.value = "put", fmt.Sprintf("c%d-%d", cl, seq)
					_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("hist"), Key: aws.String(op.key), Body: strings.NewReader(op.value)})
					op.ok = err == nil
				case p < 70:
					op.kind = "del"
					_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("hist"), Key: aws.String(op.key)})
					op.ok = err == nil
				default:
					op.kind = "get"
					b, err := getBody(ctx, c, "hist", op.key)
					switch {
					case err == nil:
						op.ok, op.value = true, string(b)
					case strings.Contains(err.Error(), "NoSuchKey"):
						op.ok = true
					}
				}
				op.end = time.Now()
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}
		}()
	}
	// Kill and restart, or pause (SIGSTOP) and resume, one node at a time.
	r := rand.New(rand.NewPCG(seed, 99))
	kills, pauses := 0, 0
	// The sleeps are the fault schedule (seeded): how long the cluster runs whole, and how
	// long a node stays down or paused while the clients go on.
	for time.Now().Add(4 * time.Second).Before(deadline) {
		time.Sleep(time.Duration(500+r.IntN(1000)) * time.Millisecond)
		v := r.IntN(3)
		aliveMu.Lock()
		alive[v] = false
		aliveMu.Unlock()
		if r.IntN(3) == 0 {
			tc.procs[v].Pause()
			pauses++
			time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
			tc.procs[v].Resume()
		} else {
			tc.procs[v].Kill()
			kills++
			time.Sleep(time.Duration(500+r.IntN(1500)) * time.Millisecond)
			tc.procs[v].Restart()
		}
		aliveMu.Lock()
		alive[v] = true
		aliveMu.Unlock()
	}
	wg.Wait()

	byKey := map[string][]*histOp{}
	acked, reads := 0, 0
	for _, o := range ops {
		byKey[o.key] = append(byKey[o.key], o)
		if o.ok && o.kind != "get" {
			acked++
		}
		if o.ok && o.kind == "get" {
			reads++
		}
	}
	t.Logf("%d operations (%d acknowledged writes, %d answered reads), %d node kills, %d pauses", len(ops), acked, reads, kills, pauses)
	// The object cache is on (the default --object-cache): reads it served count as any.
	var hits, stale float64
	for _, p := range tc.procs {
		hits += metricValue(t, p, "cairn_object_cache_hits_total")
		stale += metricValue(t, p, "cairn_object_cache_stale_total")
	}
	t.Logf("object cache since each node's last start: %.0f hits, %.0f stale entries dropped", hits, stale)
	if acked < 50 || reads < 20 {
		t.Fatalf("too little traffic to check: %d writes, %d reads", acked, reads)
	}
	for _, k := range keys {
		var writes []*histOp
		for _, o := range byKey[k] {
			if o.kind != "get" {
				writes = append(writes, o)
			}
		}
		for _, o := range byKey[k] {
			if o.kind == "get" && o.ok {
				if err := checkRead(o, writes); err != nil {
					t.Error(err)
				}
			}
		}
		// After recovery: the replicas converge, and every gateway reads a value that no
		// acknowledged write has replaced.
		final := time.Now().Add(time.Hour)
		tc.waitConverged(0, "hist", k, 60*time.Second)
		for i := range tc.procs {
			got := &histOp{key: k, kind: "get", start: final, end: final, ok: true}
			b, err := getBody(ctx, tc.procs[i].client(), "hist", k)
			if err == nil {
				got.value = string(b)
			} else if !strings.Contains(err.Error(), "NoSuchKey") {
				t.Fatalf("final read of %s via node %d: %v", k, i+1, err)
			}
			if err := checkRead(got, writes); err != nil {
				t.Errorf("after recovery, via node %d: %v", i+1, err)
			}
		}
	}
}

// waitConverged waits until every replica of bucket/key holds the same version.
func (tc *testCluster) waitConverged(via int, bucket, key string, timeout time.Duration) {
	tc.t.Helper()
	proctest.WaitFor(tc.t, timeout, func() error {
		v := tc.replicas(via, bucket, key)
		same := len(v.Replicas) == 3
		for _, r := range v.Replicas {
			a, b := v.Replicas[0], r
			if r.Error != "" || a.ETag != b.ETag || (a.Deleted || a.Missing) != (b.Deleted || b.Missing) {
				same = false
			}
		}
		if !same {
			return fmt.Errorf("replicas of %s/%s differ: %+v", bucket, key, v.Replicas)
		}
		return nil
	})
}

// The checker itself: it accepts what a correct store may return and flags stale reads.
func TestCheckRead(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	w1 := &histOp{key: "k", kind: "put", value: "a", start: at(0), end: at(10), ok: true}
	w2 := &histOp{key: "k", kind: "put", value: "b", start: at(20), end: at(30), ok: true}
	wFail := &histOp{key: "k", kind: "put", value: "c", start: at(40), end: at(45), ok: false}
	d := &histOp{key: "k", kind: "del", start: at(50), end: at(60), ok: true}
	writes := []*histOp{w1, w2, wFail, d}
	cases := []struct {
		name       string
		value      string
		start, end int
		stale      bool
	}{
		{"new value", "b", 35, 36, false},
		{"old value after a newer acknowledged write", "a", 35, 36, true},
		{"value of a concurrent write", "b", 25, 28, false},
		{"old value while the newer write is in flight", "a", 25, 28, false},
		{"unacknowledged write may show", "c", 46, 47, false},
		{"never written", "zzz", 35, 36, true},
		{"absent before any write", "", 1, 2, false},
		{"absent after acknowledged writes", "", 35, 36, true},
		{"absent after the delete", "", 65, 66, false},
		{"value from before the delete", "b", 65, 66, true},
		{"unacknowledged write after the delete may still show", "c", 65, 66, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &histOp{key: "k", kind: "get", value: c.value, start: at(c.start), end: at(c.end), ok: true}
			if err := checkRead(r, writes); (err != nil) != c.stale {
				t.Fatalf("checkRead = %v, want stale=%v", err, c.stale)
			}
		})
	}
}

// metricValue returns the value of the unlabelled metric name on node p (0 if absent).
func metricValue(t *testing.T, p *testProc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
