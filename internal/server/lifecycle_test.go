package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/sigv4"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// lockedBuffer is a log sink shared by a node's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// keyState is what a key may hold: the content of its last acknowledged write ("" after
// an acknowledged delete, nil if never written), and that of an operation whose answer
// was lost when the node stopped (it may or may not have been applied).
type keyState struct {
	acked   *string
	pending *string
}

// TestShutdownUnderLoad stops a node many times while clients write, read and delete and
// its background loops (hints, sync, scrub, apply) run at short intervals. Each stop must
// be clean: Run returns nil, nothing panics (an in-process panic fails the test binary),
// and no write reaches the store after it is closed (the store logs any that does). Each
// restart must find every acknowledged write and delete.
func TestShutdownUnderLoad(t *testing.T) {
	cycles := 5
	if testing.Short() {
		cycles = 2
	}
	dir := t.TempDir()
	const ak, sk = "LIFECYCLETESTKEY0001", "lifecycleTestSecret0123456789abcdefghijk"
	var mu sync.Mutex
	keys := map[string]*keyState{}
	nodeAddr := "127.0.0.1:0"
	rng := rand.New(rand.NewPCG(1, 2))
	for cycle := range cycles {
		logs := &lockedBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan Ready, 1)
		done := make(chan error, 1)
		cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", NodeAddr: nodeAddr,
			AccessKey: ak, SecretKey: sk, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			HintInterval: 5 * time.Millisecond, SyncInterval: 20 * time.Millisecond, ScrubInterval: 30 * time.Millisecond, ScrubRate: 4 << 20, // a scrub pass is under way at most stops
			ShutdownTimeout: 5 * time.Second, Ready: func(r Ready) { ready <- r }}
		go func() { done <- Run(ctx, cfg) }()
		var r Ready
		select {
		case r = <-ready:
		case err := <-done:
			cancel()
			t.Fatalf("cycle %d: node exited: %v\n%s", cycle, err, logs)
		case <-time.After(60 * time.Second):
			cancel()
			t.Fatalf("cycle %d: node not ready in 60s", cycle)
		}
		nodeAddr = r.NodeAddr // a restart keeps its node address
		s3 := func(method, path string, body []byte) (int, []byte, error) {
			req, _ := http.NewRequest(method, "http://"+r.S3Addr+path, bytes.NewReader(body))
			if body == nil {
				req.Body = http.NoBody
			}
			sigv4.SignRequest(req, ak, sk, "us-east-1", "UNSIGNED-PAYLOAD", time.Now())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, nil, err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			return resp.StatusCode, b, err
		}
		if cycle == 0 {
			if st, b, err := s3("PUT", "/bkt", nil); err != nil || st != 200 {
				t.Fatalf("create bucket: %d %s %v", st, b, err)
			}
		}
		// What the previous cycles acknowledged is here.
		mu.Lock()
		for k, ks := range keys {
			st, b, err := s3("GET", "/bkt/"+k, nil)
			if err != nil {
				t.Fatalf("cycle %d: GET %s: %v", cycle, k, err)
			}
			got := ""
			if st == 200 {
				got = string(b)
			} else if st != 404 {
				t.Fatalf("cycle %d: GET %s: %d %s", cycle, k, st, b)
			}
			ok := (ks.acked != nil && got == *ks.acked) || (ks.acked == nil && got == "") || (ks.pending != nil && got == *ks.pending)
			if !ok {
				t.Fatalf("cycle %d: %s holds %d bytes (%x), acknowledged %v, pending %v", cycle, k, len(got), sha256.Sum256([]byte(got)), short(ks.acked), short(ks.pending))
			}
			s := got
			ks.acked, ks.pending = &s, nil
		}
		mu.Unlock()

		// Load: each worker owns its keys, so a key's operations are sequential.
		var ops atomic.Int64
		stopLoad := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 6 {
			seed := rng.Uint64()
			wg.Go(func() {
				rr := rand.New(rand.NewPCG(seed, uint64(w)))
				for i := 0; ; i++ {
					select {
					case <-stopLoad:
						return
					default:
					}
					k := fmt.Sprintf("w%d/k%d", w, rr.IntN(12))
					mu.Lock()
					ks := keys[k]
					if ks == nil {
						ks = &keyState{}
						keys[k] = ks
					}
					mu.Unlock()
					switch op := rr.IntN(10); {
					case op < 6:
						body := make([]byte, rr.IntN(300<<10))
						for j := range body {
							body[j] = byte(rr.Uint32())
						}
						s := string(body)
						mu.Lock()
						ks.pending = &s
						mu.Unlock()
						st, _, err := s3("PUT", "/bkt/"+k, body)
						if err != nil || st != 200 {
							return // the node is stopping: the outcome stays pending
						}
						mu.Lock()
						ks.acked, ks.pending = &s, nil
						mu.Unlock()
					case op < 8:
						empty := ""
						mu.Lock()
						ks.pending = &empty
						mu.Unlock()
						st, _, err := s3("DELETE", "/bkt/"+k, nil)
						if err != nil || st != 204 {
							return
						}
						mu.Lock()
						ks.acked, ks.pending = &empty, nil
						mu.Unlock()
					default:
						if _, _, err := s3("GET", "/bkt/"+k, nil); err != nil {
							return
						}
					}
					ops.Add(1)
				}
			})
		}
		// Stop once the load is under way, at a different point each cycle.
		target := int64(20 + rng.IntN(60))
		proctest.WaitFor(t, 60*time.Second, func() error {
			if n := ops.Load(); n < target {
				return fmt.Errorf("cycle %d: %d operations done, waiting for %d", cycle, n, target)
			}
			return nil
		})
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("cycle %d: the node did not stop in 60s", cycle)
		}
		close(stopLoad)
		wg.Wait()
		if err != nil {
			t.Fatalf("cycle %d: Run: %v\n%s", cycle, err, logs)
		}
		// Every goroutine the node started has ended: no loop outlives the store.
		proctest.WaitFor(t, 10*time.Second, func() error {
			if left := nodeGoroutines(); left != "" {
				return fmt.Errorf("cycle %d: goroutines of the node outlive Run:\n%s", cycle, left)
			}
			return nil
		})
		out := logs.String()
		for _, bad := range []string{"after it was closed", "panic", "stopped cleanly"} {
			has := strings.Contains(out, bad)
			if has != (bad == "stopped cleanly") {
				t.Fatalf("cycle %d (%d ops): log has %q = %v:\n%s", cycle, ops.Load(), bad, has, out)
			}
		}
	}
}

// nodeGoroutines returns the stacks of running goroutines that are in cairn's packages,
// other than this test's own.
func nodeGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "cairnfs/cairn/internal/") && !strings.Contains(g, "TestShutdownUnderLoad") && !strings.Contains(g, "testing.tRunner") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

func short(s *string) string {
	if s == nil {
		return "nothing"
	}
	return fmt.Sprintf("%d bytes (%x)", len(*s), sha256.Sum256([]byte(*s)))
}

// TestAssembleFailureCloses: a node that cannot start (here: joining without the cluster
// secret) returns a clear error, and what it opened is closed (its listeners are free).
func TestAssembleFailureCloses(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0", NodeAddr: "127.0.0.1:0", Join: "127.0.0.1:1",
		Logger: slog.New(slog.DiscardHandler)}
	err := Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "needs its secret") {
		t.Fatalf("Run without the secret: %v", err)
	}
	if left := nodeGoroutines(); left != "" {
		t.Fatalf("goroutines of the failed node remain:\n%s", left)
	}
	// A failure after the store was opened (the S3 address is taken) closes it: the same
	// data directory opens again at once.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg = Config{DataDir: t.TempDir(), Listen: taken.Addr().String(), AdminListen: "127.0.0.1:0", NodeAddr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)}
	if err := Run(context.Background(), cfg); err == nil {
		t.Fatal("Run on a taken address succeeded")
	}
	cfg.Listen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	cfg.Ready = func(Ready) { close(ready) }
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the data directory of the failed start does not open again: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
