package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/wire"
)

// upgradeBaseline is the release a cluster is upgraded from in TestRollingUpgrade: the
// last commit of the architecture issue (internode protocol version 1). Move it forward
// when a release is cut (docs/operations.md: upgrades); the test fails, it does not skip,
// when the commit is not in the repository.
const upgradeBaseline = "12cbcb6aaf6f7df0cf939b3bcc42abb0870f8175"

// baselineBin builds cairn at upgradeBaseline in a git worktree (kept in the user's cache
// directory between runs) and returns the binary's path.
func baselineBin(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "cairn-test", "cairn-"+upgradeBaseline[:12])
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		return bin
	}
	git := func(args ...string) (string, error) {
		out, err := exec.Command("git", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := git("cat-file", "-e", upgradeBaseline+"^{commit}"); err != nil {
		t.Fatalf("the upgrade baseline %s is not in this repository (a shallow clone? run git fetch --unshallow): %v %s", upgradeBaseline, err, out)
	}
	src := filepath.Join(t.TempDir(), "baseline")
	if out, err := git("worktree", "add", "--detach", src, upgradeBaseline); err != nil {
		t.Fatalf("git worktree add: %v %s", err, out)
	}
	defer git("worktree", "remove", "--force", src)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "./cmd/cairn")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the baseline: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestRollingUpgrade starts a 3-node cluster on the baseline release, upgrades its nodes
// one at a time to the build under test (SIGTERM, then the new binary on the same data
// directory and addresses) while clients write and read through the nodes that are up,
// and checks that no client saw an error, that every acknowledged object reads back byte
// for byte through every node, and that a map change the old managers do not know is
// refused until the last node is upgraded, then accepted; and that the secret key the
// baseline kept in the clear is then sealed and gone from every node's files.
func TestRollingUpgrade(t *testing.T) {
	skipShort(t)
	t.Parallel() // one of the longest: see heavyParallel
	old := baselineBin(t)
	tc := &testCluster{t: t, bin: old}
	for range 3 {
		tc.add()
	}
	tc.createBucket(0, "upg")
	ctx := context.Background()

	var (
		gate   [3]sync.RWMutex // held for writing while a node is being upgraded
		mu     sync.Mutex
		acked  = map[string][]byte{}
		keys   []string
		failed []string
		seq    atomic.Int64
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	// with runs fn against a node that is up (not being upgraded), chosen at random.
	with := func(r *rand.Rand, fn func(i int, c *s3.Client) error) {
		for {
			i := r.IntN(3)
			if !gate[i].TryRLock() {
				continue
			}
			err := fn(i, tc.procs[i].client())
			gate[i].RUnlock()
			if err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("node %d: %v", i, err))
				mu.Unlock()
			}
			return
		}
	}
	worker := func(w int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				if w == 2 { // a reader (started once objects exist)
					mu.Lock()
					k := keys[r.IntN(len(keys))]
					want := acked[k]
					mu.Unlock()
					with(r, func(i int, c *s3.Client) error {
						got, err := getBody(ctx, c, "upg", k)
						if err == nil && !bytes.Equal(got, want) {
							err = fmt.Errorf("%s: read %d bytes that differ from the %d written", k, len(got), len(want))
						}
						return err
					})
					continue
				}
				k := fmt.Sprintf("k%05d", seq.Add(1))
				data := bytes.Repeat([]byte(k), 1+r.IntN(40000)) // up to 240 KiB: small and streamed bodies
				with(r, func(i int, c *s3.Client) error {
					if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("upg"), Key: aws.String(k), Body: bytes.NewReader(data)}); err != nil {
						return fmt.Errorf("put %s: %w", k, err)
					}
					mu.Lock()
					acked[k] = data
					keys = append(keys, k)
					mu.Unlock()
					return nil
				})
			}
		}()
	}
	// writes waits until n more objects were acknowledged.
	writes := func(n int) {
		mu.Lock()
		target := len(keys) + n
		mu.Unlock()
		proctest.WaitFor(t, time.Minute, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(keys) < target {
				return fmt.Errorf("%d of %d objects written", len(keys), target)
			}
			return nil
		})
	}
	cors := func(i int) error {
		_, err := tc.procs[i].client().PutBucketCors(ctx, &s3.PutBucketCorsInput{Bucket: aws.String("upg"), CORSConfiguration: &types.CORSConfiguration{
			CORSRules: []types.CORSRule{{AllowedMethods: []string{"GET"}, AllowedOrigins: []string{"https://example.com"}}}}})
		return err
	}
	worker(0)
	worker(1)
	writes(30)
	worker(2)
	for i := range tc.procs {
		gate[i].Lock()
		if err := tc.procs[i].Stop(); err != nil {
			t.Fatalf("node %d (baseline) did not stop cleanly: %v", i, err)
		}
		tc.procs[i].SetBin(proctest.Bin(t))
		tc.procs[i].Restart()
		gate[i].Unlock()
		writes(30)
		if i < len(tc.procs)-1 {
			// Old managers do not know bucket configurations: refused, whoever leads.
			var ae interface{ ErrorCode() string }
			if err := cors(i); !errors.As(err, &ae) || ae.ErrorCode() != "ServiceUnavailable" {
				t.Fatalf("bucket CORS with %d of 3 nodes upgraded: %v, want ServiceUnavailable", i+1, err)
			}
		}
	}
	// Every node upgraded: accepted once the leader has heard from every node.
	proctest.WaitFor(t, 30*time.Second, func() error { return cors(0) })
	close(stop)
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d client errors during the upgrade, first: %s", len(failed), strings.Join(failed[:min(5, len(failed))], "\n"))
	}
	for i, p := range tc.procs {
		c := p.client()
		for k, want := range acked {
			got, err := getBody(ctx, c, "upg", k)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("node %d: %s: %v (%d bytes, want %d)", i, k, err, len(got), len(want))
			}
		}
	}
	t.Logf("%d objects written during the upgrade, all read back through every node", len(acked))

	// The baseline kept the access key's secret in the clear in the map, its Raft log and
	// snapshots. Every node upgraded, the leader seals it and every node compacts its log:
	// the secret is in no file of any node, and the key still signs requests.
	proctest.WaitFor(t, 30*time.Second, func() error {
		for i, p := range tc.procs {
			if files := filesHolding(t, p.DataDir(), testSecret); len(files) > 0 {
				return fmt.Errorf("node %d holds the secret key in the clear in %v", i, files)
			}
		}
		return nil
	})
	for i, p := range tc.procs {
		if _, err := p.client().ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
			t.Fatalf("node %d: the sealed key: %v", i, err)
		}
	}

	// Every node upgraded, the map's feature level is this build's: a node of the baseline
	// build is refused at the door (its join says no level, which counts as an older
	// one) with the reason, and exits, instead of joining a cluster whose maps and records
	// it misreads.
	_, err := proc.Start(ctx, proc.Config{Bin: old, Dir: t.TempDir(), Name: "n-old",
		Args: []string{"--node-id", "n-old", "--zone", "z1", "--join", tc.addrs[0]},
		Env:  []string{"CAIRN_ACCESS_KEY=" + testAccess, "CAIRN_SECRET_KEY=" + testSecret, "CAIRN_CLUSTER_SECRET=" + testClusterSecret}})
	if err == nil || !strings.Contains(err.Error(), "older cairn") {
		t.Fatalf("a baseline node joining the upgraded cluster: %v; want it refused as an older cairn", err)
	}

	// The upgraded cluster's internode traffic is plain until the operator turns TLS on:
	// every node enrols, then plain connections are refused, and objects written before
	// read back through every node over mutual TLS.
	secret, _ := rpc.NewSecret(testClusterSecret)
	plainMap := func() error {
		c := &rpc.Client{Secret: secret, Node: "probe", HTTP: &http.Client{Transport: rpc.NewTransport(), Timeout: 5 * time.Second}}
		return c.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: tc.addrs[1], Path: wire.PathMap}, nil)
	}
	if err := plainMap(); err != nil {
		t.Fatalf("plain internode request before internode TLS is on: %v", err)
	}
	if out, err := tc.admin(0, "internode-tls", "enable"); err != nil || !strings.Contains(out, "required") {
		t.Fatalf("cairn admin internode-tls enable: %v\n%s", err, out)
	}
	if err := plainMap(); err == nil {
		t.Fatal("a plain internode request was accepted after internode TLS was enabled")
	}
	n := 0
	for k, want := range acked {
		if n++; n > 20 {
			break
		}
		for i, p := range tc.procs {
			got, err := getBody(ctx, p.client(), "upg", k)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("with internode TLS, node %d: %s: %v (%d bytes, want %d)", i, k, err, len(got), len(want))
			}
		}
	}
	if _, err := tc.procs[2].client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("upg"), Key: aws.String("after-tls"), Body: bytes.NewReader(make([]byte, 300<<10))}); err != nil {
		t.Fatalf("a write with internode TLS: %v", err)
	}
}
