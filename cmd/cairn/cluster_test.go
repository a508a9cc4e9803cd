package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/server"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

const testClusterSecret = "test-cluster-secret-0123456789abcdef"

// testCluster is a cluster of cairn processes on loopback.
type testCluster struct {
	t     testing.TB
	procs []*testProc
	addrs []string // node addresses
	bin   string   // the cairn binary (default: the one under test)
	// wrap runs the admin commands through a command (ip netns exec NS: the namespace
	// the nodes are reached from), as proc.Config.Wrap runs the servers.
	wrap []string
}

// startCluster starts n nodes: the first bootstraps, the others join it. It is a long
// process test: skipped in -short.
func startCluster(t testing.TB, n int, extra ...string) *testCluster {
	t.Helper()
	skipShort(t)
	tc := &testCluster{t: t}
	for i := 0; i < n; i++ {
		tc.add(extra...)
	}
	return tc
}

// add starts one more node, joining the first. Its first start binds port 0 for each
// address; restarts keep the ports it got.
func (tc *testCluster) add(extra ...string) *testProc {
	tc.t.Helper()
	i := len(tc.procs)
	args := []string{"--node-id", nodeID(i), "--zone", fmt.Sprintf("z%d", i%3+1)}
	if i > 0 {
		args = append(args, "--join", tc.addrs[0])
	}
	p := startTestProc(tc.t, proc.Config{Bin: tc.bin, Name: nodeID(i), Args: append(args, extra...), Env: []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret}})
	tc.procs = append(tc.procs, p)
	tc.addrs = append(tc.addrs, p.NodeAddr())
	return p
}

// createBucket creates bucket through node i.
func (tc *testCluster) createBucket(i int, bucket string) {
	tc.t.Helper()
	if _, err := tc.procs[i].client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		tc.t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// waitVoters waits until the Raft group has n voting managers.
func (tc *testCluster) waitVoters(n int) *server.Status {
	tc.t.Helper()
	var st *server.Status
	proctest.WaitFor(tc.t, 20*time.Second, func() error {
		st = tc.status(0)
		voters := 0
		for _, m := range st.Managers {
			if m.Voter {
				voters++
			}
		}
		if voters != n {
			return fmt.Errorf("%d voting managers, want %d: %+v", voters, n, st.Managers)
		}
		return nil
	})
	return st
}

// waitState waits until node 1's map has node id in state want.
func (tc *testCluster) waitState(id string, want clustermap.NodeState, timeout time.Duration) {
	tc.t.Helper()
	proctest.WaitFor(tc.t, timeout, func() error {
		if s := tc.nodeState(id); s != want {
			return fmt.Errorf("node %s is %q, want %s", id, s, want)
		}
		return nil
	})
}

// nodeState returns node id's state in the map, as node 1 reports it ("" if absent).
func (tc *testCluster) nodeState(id string) clustermap.NodeState {
	for _, n := range tc.status(0).Nodes {
		if n.ID == id {
			return n.State
		}
	}
	return ""
}

// admin runs `cairn admin` against node i.
func (tc *testCluster) admin(i int, args ...string) (string, error) {
	name, argv := proctest.Bin(tc.t), append([]string{"admin", "--admin", tc.procs[i].AdminAddr()}, args...)
	if len(tc.wrap) > 0 {
		name, argv = tc.wrap[0], append(append(slices.Clone(tc.wrap[1:]), name), argv...)
	}
	cmd := exec.Command(name, argv...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (tc *testCluster) status(i int) *server.Status {
	tc.t.Helper()
	out, err := tc.admin(i, "--json", "status")
	if err != nil {
		tc.t.Fatalf("admin status: %v\n%s", err, out)
	}
	var st server.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		tc.t.Fatalf("admin status --json: %v\n%s", err, out)
	}
	return &st
}

type replicaView struct {
	Nodes    []string `json:"nodes"`
	Replicas []struct {
		Node    string `json:"node"`
		HLC     uint64 `json:"hlc"`
		ETag    string `json:"etag"`
		Size    int64  `json:"size"`
		Deleted bool   `json:"deleted"`
		Missing bool   `json:"missing"`
		Error   string `json:"error"`
		Layout  string `json:"layout"`
	} `json:"replicas"`
}

// replicas reads each replica of bucket/key directly, through node i's admin API.
func (tc *testCluster) replicas(i int, bucket, key string) *replicaView {
	tc.t.Helper()
	out, err := tc.admin(i, "--json", "placement", bucket, key)
	if err != nil {
		tc.t.Fatalf("admin placement: %v\n%s", err, out)
	}
	var v replicaView
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		tc.t.Fatalf("admin placement --json: %v\n%s", err, out)
	}
	return &v
}

// waitAllReplicas waits until every replica of each key holds the expected ETag ("" for
// deleted), and fails the test after timeout.
func (tc *testCluster) waitAllReplicas(via int, bucket string, want map[string]string, n int, timeout time.Duration) {
	tc.t.Helper()
	proctest.WaitFor(tc.t, timeout, func() error {
		for k, etag := range want {
			v := tc.replicas(via, bucket, k)
			if len(v.Replicas) != n {
				return fmt.Errorf("replicas not converged: %s: %d replicas, want %d", k, len(v.Replicas), n)
			}
			for _, r := range v.Replicas {
				ok := (etag == "" && (r.Deleted || r.Missing)) || (etag != "" && r.ETag == etag && !r.Deleted && r.Error == "")
				if !ok {
					return fmt.Errorf("replicas not converged: %s on %s: %+v, want etag %q", k, r.Node, r, etag)
				}
			}
		}
		return nil
	})
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

func getBody(ctx context.Context, c *s3.Client, bucket, key string) ([]byte, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

func listAll(ctx context.Context, t *testing.T, c *s3.Client, bucket, delim string, page int32) []string {
	t.Helper()
	var out []string
	var token *string
	for {
		in := &s3.ListObjectsV2Input{Bucket: aws.String(bucket), MaxKeys: aws.Int32(page), ContinuationToken: token}
		if delim != "" {
			in.Delimiter = aws.String(delim)
		}
		res, err := c.ListObjectsV2(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Contents {
			out = append(out, *o.Key+"="+strings.Trim(aws.ToString(o.ETag), `"`))
		}
		for _, p := range res.CommonPrefixes {
			out = append(out, *p.Prefix+"/")
		}
		if !aws.ToBool(res.IsTruncated) {
			return out
		}
		token = res.NextContinuationToken
	}
}

// listVersions pages through ListObjectVersions: every object is its one version, null.
func listVersions(ctx context.Context, t *testing.T, c *s3.Client, bucket string, page int32) []string {
	t.Helper()
	var out []string
	p := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), MaxKeys: aws.Int32(page)})
	for p.HasMorePages() {
		res, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Versions {
			if aws.ToString(v.VersionId) != "null" || !aws.ToBool(v.IsLatest) {
				t.Fatalf("version %s: id %q latest %v", aws.ToString(v.Key), aws.ToString(v.VersionId), aws.ToBool(v.IsLatest))
			}
			out = append(out, *v.Key+"="+strings.Trim(aws.ToString(v.ETag), `"`))
		}
	}
	return out
}

// Objects written through one gateway are read through every other; listings agree.
func TestClusterReadWriteEverywhere(t *testing.T) {
	skipShort(t)
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			tc := startCluster(t, n)
			ctx := context.Background()
			if _, err := tc.procs[0].client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bkt")}); err != nil {
				t.Fatal(err)
			}
			want := map[string][]byte{}
			for i := 0; i < 40; i++ {
				key := fmt.Sprintf("dir%d/obj%03d", i%4, i)
				size := 100 + i*37
				if i%10 == 3 {
					size = 2<<20 + i // streamed through pipes, chunked on disk
				}
				data := bytes.Repeat([]byte{byte(i)}, size)
				if _, err := tc.procs[i%n].client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
					t.Fatalf("put %s via node %d: %v", key, i%n, err)
				}
				want[key] = data
			}
			// A multipart upload through one gateway, completed through another.
			c1, c2 := tc.procs[1].client(), tc.procs[2%n].client()
			mp, err := c1.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("big/mp")})
			if err != nil {
				t.Fatal(err)
			}
			var parts []types.CompletedPart
			var whole []byte
			for pn := int32(1); pn <= 2; pn++ {
				data := bytes.Repeat([]byte{byte('a' + pn)}, 5<<20+int(pn))
				up, err := c1.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("big/mp"), UploadId: mp.UploadId, PartNumber: aws.Int32(pn), Body: bytes.NewReader(data)})
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(pn), ETag: up.ETag})
				whole = append(whole, data...)
			}
			if _, err := c2.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("big/mp"), UploadId: mp.UploadId,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
				t.Fatal(err)
			}
			want["big/mp"] = whole
			var lists [][]string
			for i, p := range tc.procs {
				c := p.client()
				for k, data := range want {
					got, err := getBody(ctx, c, "bkt", k)
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("get %s via node %d: %v (%d bytes, want %d)", k, i, err, len(got), len(data))
					}
				}
				l := listAll(ctx, t, c, "bkt", "", 7)
				if len(l) != len(want) {
					t.Fatalf("node %d lists %d keys, want %d", i, len(l), len(want))
				}
				if v := listVersions(ctx, t, c, "bkt", 7); strings.Join(v, ",") != strings.Join(l, ",") {
					t.Fatalf("node %d: the versions listing differs from the objects listing:\n%v\n%v", i, v, l)
				}
				lists = append(lists, append(l, listAll(ctx, t, c, "bkt", "/", 2)...))
			}
			for i := 1; i < len(lists); i++ {
				if strings.Join(lists[i], ",") != strings.Join(lists[0], ",") {
					t.Fatalf("listing through node %d differs from node 0:\n%v\n%v", i, lists[i], lists[0])
				}
			}
			// Deletes are seen everywhere, including in listings.
			if _, err := tc.procs[n-1].client().DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("bkt"), Key: aws.String("dir0/obj000")}); err != nil {
				t.Fatal(err)
			}
			for i, p := range tc.procs {
				if _, err := getBody(ctx, p.client(), "bkt", "dir0/obj000"); err == nil || !strings.Contains(err.Error(), "NoSuchKey") {
					t.Fatalf("deleted object via node %d: %v", i, err)
				}
				if l := listAll(ctx, t, p.client(), "bkt", "", 1000); len(l) != len(want)-1 {
					t.Fatalf("node %d lists %d keys after a delete, want %d", i, len(l), len(want)-1)
				}
			}
			st := tc.status(0)
			if len(st.Nodes) != n || st.Effective.N != 3 || st.Effective.W != 2 {
				t.Fatalf("status: %d nodes, class %+v", len(st.Nodes), st.Effective)
			}
			tc.waitVoters(3)
			// Each object is on 3 distinct nodes.
			v := tc.replicas(0, "bkt", "dir1/obj001")
			if len(v.Nodes) != 3 {
				t.Fatalf("placement: %v", v.Nodes)
			}
			if n == 3 {
				checkTaggingEverywhere(t, tc)
			}
		})
	}
}

// checkTaggingEverywhere: object tags set with a PUT through one gateway and changed
// through another are read through every gateway; bucket tags set through one gateway
// (a Raft command) are read through every gateway once the map reaches it.
func checkTaggingEverywhere(t *testing.T, tc *testCluster) {
	ctx := context.Background()
	n := len(tc.procs)
	if _, err := tc.procs[0].client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("tagged"),
		Body: strings.NewReader("tagged"), Tagging: aws.String("a=1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.procs[1].client().PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("bkt"), Key: aws.String("tagged"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("env"), Value: aws.String("prod")}}}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		out, err := tc.procs[i].client().GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("bkt"), Key: aws.String("tagged")})
		if err != nil || len(out.TagSet) != 1 || aws.ToString(out.TagSet[0].Key) != "env" {
			t.Fatalf("object tags via node %d: %+v, %v", i, out, err)
		}
	}
	// Every replica holds the change: one tag, changed in place ("1@" and its MetaHLC).
	proctest.WaitFor(t, 10*time.Second, func() error {
		out, err := tc.admin(0, "placement", "bkt", "tagged")
		if err != nil || strings.Count(out, " 1@") != 3 {
			return fmt.Errorf("admin placement: %s %v", out, err)
		}
		return nil
	})
	if _, err := tc.procs[2].client().PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String("bkt"),
		Tagging: &types.Tagging{TagSet: []types.Tag{{Key: aws.String("team"), Value: aws.String("storage")}}}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		proctest.WaitFor(t, 10*time.Second, func() error {
			out, err := tc.procs[i].client().GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String("bkt")})
			if err != nil || len(out.TagSet) != 1 || aws.ToString(out.TagSet[0].Value) != "storage" {
				return fmt.Errorf("bucket tags via node %d: %+v, %v", i, out, err)
			}
			return nil
		})
	}
}

// N=3, W=2: one node killed mid-load, writes and reads go on; two killed, writes fail
// with a clear error and reads still work; after restarts every acknowledged write is on
// all three replicas.
func TestClusterNodeFailures(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	ctx := context.Background()
	c0, c1 := tc.procs[0].client(), tc.procs[1].client()
	tc.createBucket(0, "bkt")
	acked := map[string]string{}
	var mu sync.Mutex
	put := func(c *s3.Client, key string, size int) error {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rand.Uint32())
		}
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(data)})
		if err == nil {
			mu.Lock()
			acked[key] = md5hex(data)
			mu.Unlock()
		}
		return err
	}
	// Load through the gateways of nodes 0 and 1 while node 2 is killed: some writes
	// before the kill, and as many after.
	acks := func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < 20 {
			return fmt.Errorf("%d writes acknowledged", len(acked))
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := []*s3.Client{c0, c1}[w%2]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				size := 1000
				if i%7 == 0 {
					size = 1<<20 + 5000
				}
				if err := put(c, fmt.Sprintf("w%d/k%d", w, i), size); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	failed := func() error {
		select {
		case err := <-errs:
			return proc.Permanent(fmt.Errorf("a write failed with every node up or one down: %w", err))
		default:
			return nil
		}
	}
	proctest.WaitFor(t, 30*time.Second, func() error { return errors.Join(failed(), acks()) })
	tc.procs[2].Kill()
	mu.Lock()
	before := len(acked)
	mu.Unlock()
	proctest.WaitFor(t, 30*time.Second, func() error {
		if err := failed(); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < before+20 {
			return fmt.Errorf("%d writes acknowledged since the kill", len(acked)-before)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a write failed with one of three nodes down: %v", err)
	}
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n < 20 {
		t.Fatalf("only %d writes during the test", n)
	}
	// Reads of everything acknowledged, with one node down.
	for k, etag := range acked {
		got, err := getBody(ctx, c1, "bkt", k)
		if err != nil || md5hex(got) != etag {
			t.Fatalf("read %s with one node down: %v", k, err)
		}
	}
	// Two of three down: writes are refused with a clear error, reads still work (R=1).
	tc.procs[1].Kill()
	err := put(c0, "refused", 100)
	if err == nil || !(strings.Contains(err.Error(), "ServiceUnavailable") && strings.Contains(err.Error(), "503")) {
		t.Fatalf("write with 2 of 3 nodes down: %v, want 503 SlowDown", err)
	}
	delete(acked, "refused")
	for k, etag := range acked {
		got, err := getBody(ctx, c0, "bkt", k)
		if err != nil || md5hex(got) != etag {
			t.Fatalf("read %s with two nodes down: %v", k, err)
		}
	}
	// Restart both; the retry queue brings every replica up to date.
	tc.procs[1].Restart()
	tc.procs[2].Restart()
	tc.waitAllReplicas(0, "bkt", acked, 3, 90*time.Second)
}

// Killing the Raft leader: a new leader is elected, the map can still change (a node
// joins), and S3 traffic through the other gateways never stops.
func TestClusterManagerFailover(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	leader := tc.waitVoters(3).Leader
	li := -1
	for i := range tc.procs {
		if fmt.Sprintf("node%d", i+1) == leader {
			li = i
		}
	}
	if li < 0 {
		t.Fatalf("leader %q is not one of the nodes", leader)
	}
	others := []int{}
	for i := range tc.procs {
		if i != li {
			others = append(others, i)
		}
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	var ops atomic.Int64
	go func() {
		c := tc.procs[others[0]].client()
		for i := 0; ; i++ {
			ops.Store(int64(i))
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			key := fmt.Sprintf("k%d", i)
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: strings.NewReader(key)}); err != nil {
				done <- fmt.Errorf("put %s during failover: %w", key, err)
				return
			}
			if _, err := getBody(ctx, c, "bkt", key); err != nil {
				done <- fmt.Errorf("get %s during failover: %w", key, err)
				return
			}
		}
	}()
	// Traffic flows before the leader is killed.
	proctest.WaitFor(t, 30*time.Second, func() error {
		if n := ops.Load(); n < 5 {
			return fmt.Errorf("%d PUT and GET pairs done", n)
		}
		return nil
	})
	tc.procs[li].Kill()
	proctest.WaitFor(t, 30*time.Second, func() error {
		if st := tc.status(others[0]); st.Leader == "" || st.Leader == leader {
			return fmt.Errorf("no new leader since %s was killed (leader %q)", leader, st.Leader)
		}
		return nil
	})
	// The map still changes: a fourth node joins through a surviving node.
	tc.addrs[0] = tc.addrs[others[0]]
	tc.add()
	if st := tc.status(others[1]); len(st.Nodes) != 4 {
		t.Fatalf("after the join: %d nodes in the map", len(st.Nodes))
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Joining with a wrong secret, a duplicate node id, or an address that does not answer
// fails with a clear error and leaves the cluster unchanged.
func TestClusterBadJoin(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 1)
	before := tc.status(0)
	cases := []struct {
		name   string
		env    string
		args   []string
		expect string
	}{
		{"wrong secret", "CAIRN_CLUSTER_SECRET=not-the-right-secret-at-all", []string{"--join", tc.addrs[0]}, "refused"},
		{"duplicate id", "CAIRN_CLUSTER_SECRET=" + testClusterSecret, []string{"--join", tc.addrs[0], "--node-id", "node1"}, "duplicate node id"},
		// Port 1 on loopback: nothing listens there (tcpmux is long gone).
		{"no answer", "CAIRN_CLUSTER_SECRET=" + testClusterSecret, []string{"--join", "127.0.0.1:1", "--join-timeout", "2s"}, "cannot join"},
		{"no secret", "CAIRN_CLUSTER_SECRET=", []string{"--join", tc.addrs[0]}, "needs its secret"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A start that must fail at once: run to its exit, no ready file awaited.
			args := append([]string{"server", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--admin-listen", "off", "--node-addr", "127.0.0.1:0"}, c.args...)
			cmd := exec.Command(proctest.Bin(t), args...)
			cmd.Env = []string{c.env, "PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("join succeeded:\n%s", out)
			}
			if !strings.Contains(string(out), c.expect) {
				t.Fatalf("error does not say %q:\n%s", c.expect, out)
			}
		})
	}
	after := tc.status(0)
	if len(after.Nodes) != len(before.Nodes) {
		t.Fatalf("the map changed: %d nodes, was %d", len(after.Nodes), len(before.Nodes))
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// `cairn dev cluster` starts a working cluster on the ports --base-port gives, prints its
// endpoints, kills, starts and restarts a node on command (the node keeps its ports and
// data), and on Ctrl-C stops every node, those started again included, and with --clean
// removes its directory.
func TestDevCluster(t *testing.T) {
	skipShort(t)
	dir := filepath.Join(t.TempDir(), "dev")
	// A base port below the ephemeral range, away from the other tests' ports (port 0).
	base := 20000 + 10*rand.IntN(1000)
	cmd := exec.Command(proctest.Bin(t), "dev", "cluster", "--nodes", "3", "--dir", dir, "--base-port", strconv.Itoa(base), "--clean")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	// The dev cluster writes cluster.json and then says it is ready.
	proctest.WaitFor(t, 120*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			return proc.Permanent(fmt.Errorf("dev cluster exited (%v) before it was ready:\n%s\n%s", err, stdout.String(), stderr.String()))
		default:
		}
		if !strings.Contains(stdout.String(), "cluster ready") {
			return fmt.Errorf("dev cluster not ready:\n%s", stdout.String())
		}
		return nil
	})
	out := &stdout
	data, err := os.ReadFile(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dc devCluster
	if err := json.Unmarshal(data, &dc); err != nil || len(dc.Nodes) != 3 {
		t.Fatalf("cluster.json: %v %s", err, data)
	}
	for _, n := range dc.Nodes {
		if !strings.Contains(out.String(), "http://"+n.S3) {
			t.Fatalf("endpoint %s not printed:\n%s", n.S3, out.String())
		}
	}
	client := func(i int) *s3.Client {
		return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + dc.Nodes[i].S3), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(dc.AccessKey, dc.SecretKey, ""), RetryMaxAttempts: 1})
	}
	ctx := context.Background()
	if _, err := client(0).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("dev")}); err != nil {
		t.Fatal(err)
	}
	if _, err := client(0).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("dev"), Key: aws.String("hello"), Body: strings.NewReader("world")}); err != nil {
		t.Fatal(err)
	}
	if b, err := getBody(ctx, client(2), "dev", "hello"); err != nil || string(b) != "world" {
		t.Fatalf("get via node 3: %q %v", b, err)
	}
	for i, n := range dc.Nodes {
		if want := fmt.Sprintf("127.0.0.1:%d", base+10*i); n.S3 != want {
			t.Fatalf("node %d serves S3 on %s, want %s (--base-port %d)", i+1, n.S3, want, base)
		}
	}
	ctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(proctest.Bin(t), append([]string{"dev", "cluster"}, append(args, "--dir", dir)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dev cluster %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if st, err := os.Stat(filepath.Join(dir, "control.sock")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v %v, want mode 0600", err, st)
	}
	if out, err := exec.Command(proctest.Bin(t), "dev", "cluster", "--dir", dir, "--base-port", "0").CombinedOutput(); err == nil || !strings.Contains(string(out), "already runs") {
		t.Fatalf("a second dev cluster in the same directory: %v\n%s", err, out)
	}
	ctl("kill", "node2")
	if syscall.Kill(dc.Nodes[1].PID, 0) == nil {
		t.Fatalf("node2 (pid %d) runs after kill", dc.Nodes[1].PID)
	}
	if _, err := getBody(ctx, client(1), "dev", "hello"); err == nil {
		t.Fatal("a killed node answered")
	}
	if out, err := exec.Command(proctest.Bin(t), "dev", "cluster", "stop", "node2", "--dir", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "not running") {
		t.Fatalf("stop of a killed node: %v %s", err, out)
	}
	if out := ctl("start", "node2"); !strings.Contains(out, "http://"+dc.Nodes[1].S3) {
		t.Fatalf("start: %s", out)
	}
	if b, err := getBody(ctx, client(1), "dev", "hello"); err != nil || string(b) != "world" {
		t.Fatalf("get via node 2 started again: %q %v", b, err)
	}
	ctl("restart", "node3")
	if b, err := getBody(ctx, client(2), "dev", "hello"); err != nil || string(b) != "world" {
		t.Fatalf("get via node 3 restarted: %q %v", b, err)
	}
	if data, err = os.ReadFile(filepath.Join(dir, "cluster.json")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &dc); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("dev cluster exit: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dev cluster did not stop 60s after Ctrl-C")
	}
	for _, n := range dc.Nodes {
		if syscall.Kill(n.PID, 0) == nil {
			t.Fatalf("node %s (pid %d) still running after the dev cluster stopped", n.ID, n.PID)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) || !strings.Contains(stdout.String(), "removed "+dir) {
		t.Fatalf("--clean: %s still there (%v); output:\n%s", dir, err, stdout.String())
	}
	if strings.Contains(stderr.String(), "died") {
		t.Fatalf("a node was reported dead:\n%s", stderr.String())
	}
}

// A paused node (SIGSTOP: connections accepted, nothing answered) neither blocks writes,
// small or streamed, nor reads; after it resumes it receives what it missed.
func TestClusterPausedNode(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	ctx := context.Background()
	c := tc.procs[0].client()
	tc.createBucket(0, "bkt")
	paused := tc.procs[2]
	paused.Pause()
	want := map[string]string{}
	for i := 0; i < 6; i++ {
		size := 2000 + i
		if i%2 == 1 {
			size = 3<<20 + i // streamed
		}
		data := bytes.Repeat([]byte{byte('a' + i)}, size)
		key := fmt.Sprintf("p%d", i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			t.Fatalf("put %s with a paused replica: %v", key, err)
		}
		want[key] = md5hex(data)
		got, err := getBody(ctx, tc.procs[1].client(), "bkt", key)
		if err != nil || md5hex(got) != want[key] {
			t.Fatalf("get %s via node 2 with a paused replica: %v", key, err)
		}
	}
	paused.Resume()
	tc.waitAllReplicas(0, "bkt", want, 3, 90*time.Second)
}

// The node-state monitor marks a killed node down and a returning node up; a returning
// node catches up: no read it serves returns the data it missed, even before the queued
// writes reach it.
func TestClusterNodeStateMonitor(t *testing.T) {
	skipShort(t)
	// Queued writes are retried only every 8 s, so that the returning node's first reads
	// happen before they reach it.
	tc := startCluster(t, 3, "--hint-interval", "8s")
	ctx := context.Background()
	c := tc.procs[0].client()
	tc.createBucket(0, "bkt")
	put := func(key, val string) string {
		t.Helper()
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(key), Body: strings.NewReader(val)}); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return md5hex([]byte(val))
	}
	old := map[string]string{}
	for i := 0; i < 20; i++ {
		old[fmt.Sprintf("k%02d", i)] = put(fmt.Sprintf("k%02d", i), "old")
	}
	tc.waitAllReplicas(0, "bkt", old, 3, 30*time.Second)
	waitState := func(id string, want clustermap.NodeState) {
		t.Helper()
		tc.waitState(id, want, 30*time.Second)
	}
	tc.procs[2].Kill()
	waitState("node3", clustermap.StateDown)
	now := map[string]string{}
	for k := range old {
		now[k] = put(k, "new "+k)
	}
	tc.procs[2].Restart()
	c3 := tc.procs[2].client()
	for k, etag := range now {
		got, err := getBody(ctx, c3, "bkt", k)
		if err != nil || md5hex(got) != etag {
			t.Fatalf("read of %s through the returning node: %q, %v; want the write it missed", k, got, err)
		}
	}
	waitState("node3", clustermap.StateUp)
	tc.waitAllReplicas(0, "bkt", now, 3, 60*time.Second)
}

// writeObjects puts n objects of mixed sizes through node via and returns their ETags.
func (tc *testCluster) writeObjects(via int, bucket string, n int) map[string]string {
	tc.t.Helper()
	ctx := context.Background()
	c := tc.procs[via].client()
	want := map[string]string{}
	for i := 0; i < n; i++ {
		size := 500 + 97*i
		if i%9 == 4 {
			size = 1<<20 + 3000 // a streamed, chunked object
		}
		data := bytes.Repeat([]byte{byte(i)}, size)
		key := fmt.Sprintf("obj/%03d", i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			tc.t.Fatalf("put %s: %v", key, err)
		}
		want[key] = md5hex(data)
	}
	return want
}

// A node marked out: the partitions it held get a new holder, which copies the objects from
// the survivors, until every object has N copies again.
func TestClusterNodeOutRecovers(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 4)
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	want := tc.writeObjects(0, "bkt", 40)
	tc.waitAllReplicas(0, "bkt", want, 3, 30*time.Second)
	for _, bad := range []string{"0", "-5", "fast"} {
		if out, err := tc.admin(0, "recovery", "set", "--rate", bad); err == nil {
			t.Fatalf("recovery set --rate %s accepted:\n%s", bad, out)
		}
	}
	if out, err := tc.admin(0, "recovery", "set", "--rate", "16KiB"); err != nil {
		t.Fatalf("recovery set: %v\n%s", err, out)
	}
	tc.procs[3].Kill()
	if out, err := tc.admin(0, "mark", "node4", "out"); err != nil {
		t.Fatalf("mark out: %v\n%s", err, out)
	}
	// Throttled to 16 KiB/s, the copying is visible while it runs: node1 takes over
	// node4's copies in zone z1, small objects only (placement puts every large one on
	// node1), about 47 KB: 3 s.
	var rec server.Recovery
	proctest.WaitFor(t, 30*time.Second, func() error {
		out, err := tc.admin(0, "--json", "recovery")
		if err != nil {
			return proc.Permanent(fmt.Errorf("recovery: %v\n%s", err, out))
		}
		if err := json.Unmarshal([]byte(out), &rec); err != nil {
			return proc.Permanent(fmt.Errorf("recovery --json: %v\n%s", err, out))
		}
		if rec.ObjectsToDo == 0 || rec.ObjectsDone >= rec.ObjectsToDo {
			return fmt.Errorf("no recovery in progress seen: %+v", rec)
		}
		return nil
	})
	for _, n := range rec.Nodes {
		if n.Error == "" && n.RateBytes != 16<<10 {
			t.Fatalf("node %s copies at %d bytes/s, want the 16 KiB/s set", n.Node, n.RateBytes)
		}
	}
	if out, err := tc.admin(0, "recovery", "set", "--rate", "unlimited"); err != nil {
		t.Fatalf("recovery set unlimited: %v\n%s", err, out)
	}
	// Placement now uses the three survivors; each must hold every object.
	tc.waitAllReplicas(0, "bkt", want, 3, 90*time.Second)
	for k, etag := range want {
		got, err := getBody(ctx, tc.procs[1].client(), "bkt", k)
		if err != nil || md5hex(got) != etag {
			t.Fatalf("read %s after recovery: %v", k, err)
		}
	}
}

// A node that joins gets its share: the objects whose placement now includes it are
// copied to it.
func TestClusterNodeAddGetsShare(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	tc.createBucket(0, "bkt")
	want := tc.writeObjects(1, "bkt", 40)
	tc.add()
	moved := 0
	for k := range want {
		for _, n := range tc.replicas(0, "bkt", k).Nodes {
			if n == "node4" {
				moved++
			}
		}
	}
	if moved == 0 || moved == len(want) {
		t.Fatalf("%d of %d objects placed on the new node; want a share", moved, len(want))
	}
	tc.waitAllReplicas(0, "bkt", want, 3, 90*time.Second)
	// Two more at once: some objects now have no replica left on the nodes that hold them
	// (all their copies move), and still reach their new holders.
	tc.add()
	tc.add()
	allNew := 0
	for k := range want {
		fresh := true
		for _, n := range tc.replicas(0, "bkt", k).Nodes {
			fresh = fresh && n != "node1" && n != "node2" && n != "node3"
		}
		if fresh {
			allNew++
		}
	}
	t.Logf("%d of %d objects have all their replicas on nodes added after they were written", allNew, len(want))
	tc.waitAllReplicas(0, "bkt", want, 3, 90*time.Second)
}

// A node down past --out-after is marked out and its copies are re-created on the others;
// a second failure that would leave fewer than N storage nodes is not taken out.
func TestClusterAutoOut(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 4, "--down-after", "2s", "--out-after", "5s")
	tc.createBucket(0, "bkt")
	want := tc.writeObjects(0, "bkt", 30)
	tc.waitAllReplicas(0, "bkt", want, 3, 30*time.Second)
	tc.procs[3].Kill()
	tc.waitState("node4", clustermap.StateOut, 60*time.Second)
	tc.waitAllReplicas(0, "bkt", want, 3, 90*time.Second)
	tc.procs[2].Kill()
	tc.waitState("node3", clustermap.StateDown, 30*time.Second)
	// Marked down means silent for more than --down-after (2 s); it would be marked out
	// once silent for more than --out-after (5 s). That must not happen: watch the state
	// for the whole time it would take, and a few probe rounds (1 s each) more.
	proctest.Holds(t, 6*time.Second, func() error {
		if s := tc.nodeState("node3"); s != clustermap.StateDown {
			return fmt.Errorf("node3 is %s; want down (marking it out would leave 2 storage nodes for 3 copies)", s)
		}
		return nil
	})
}

// The whole cluster stops and restarts one node at a time: a node waits for a majority of
// managers without exiting, and every object is readable afterwards. A node that was
// marked out while it was stopped comes back up.
func TestClusterFullRestart(t *testing.T) {
	skipShort(t)
	t.Parallel() // one of the longest: see heavyParallel
	tc := startCluster(t, 4)
	tc.waitVoters(3)
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	want := tc.writeObjects(0, "bkt", 12)
	tc.waitAllReplicas(0, "bkt", want, 3, 30*time.Second)
	tc.procs[3].Kill()
	if out, err := tc.admin(0, "mark", "node4", "out"); err != nil {
		t.Fatalf("mark out: %v\n%s", err, out)
	}
	for _, p := range tc.procs[:3] {
		if err := p.Stop(); err != nil {
			t.Fatalf("stop: %v", err)
		}
	}
	// Alone, node1 has no majority: it finds no leader and no peer to join through (it
	// says so), and keeps running.
	tc.procs[0].Restart()
	proctest.WaitFor(t, 60*time.Second, func() error {
		select {
		case <-tc.procs[0].Exited():
			return proc.Permanent(fmt.Errorf("a node restarted without a majority exited"))
		default:
		}
		if out := tc.procs[0].Output(); !strings.Contains(out[strings.LastIndex(out, "=== proc: start"):], "hears no leader") {
			return fmt.Errorf("node1 has not yet given up finding a leader")
		}
		return nil
	})
	tc.procs[1].Restart()
	tc.procs[2].Restart()
	tc.procs[3].Restart()
	proctest.WaitFor(t, 60*time.Second, func() error {
		st := tc.status(0)
		up := 0
		for _, n := range st.Nodes {
			if n.State == clustermap.StateUp {
				up++
			}
		}
		if up != 4 {
			return fmt.Errorf("not all nodes up after the restart: %+v", st.Nodes)
		}
		return nil
	})
	tc.waitAllReplicas(0, "bkt", want, 3, 60*time.Second)
	for i, p := range tc.procs {
		for k, etag := range want {
			got, err := getBody(ctx, p.client(), "bkt", k)
			if err != nil || md5hex(got) != etag {
				t.Fatalf("read %s via node %d after the restart: %v", k, i+1, err)
			}
		}
	}
}

// A replica whose copy fails its checksum: the read goes on from another replica (the
// client gets every byte, correct), and the damaged copy is replaced by a good one.
func TestClusterBitRotFailover(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	ctx := context.Background()
	c := tc.procs[0].client()
	tc.createBucket(0, "bkt")
	data := make([]byte, 2<<20)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("rot"), Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	tc.waitAllReplicas(0, "bkt", map[string]string{"rot": md5hex(data)}, 3, 30*time.Second)
	if flipped := flipSegmentByte(t, tc.procs[0].DataDir()); flipped == 0 {
		t.Fatal("no segment holds the object's bytes")
	}
	got, err := getBody(ctx, c, "bkt", "rot")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read through the node with the damaged copy: %d bytes, %v; want all %d, correct", len(got), err, len(data))
	}
	// The damaged copy is replaced: with the two other nodes gone it still reads right.
	proctest.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(tc.procs[0].Output(), "repaired a damaged copy") {
			return fmt.Errorf("the damaged copy is not repaired")
		}
		return nil
	})
	tc.procs[1].Kill()
	tc.procs[2].Kill()
	got, err = getBody(ctx, c, "bkt", "rot")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read of the repaired copy alone: %d bytes, %v", len(got), err)
	}
}

// Deep scrub: a damaged copy nobody reads is found, counted and repaired from a replica.
func TestClusterDeepScrub(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3)
	ctx := context.Background()
	c := tc.procs[0].client()
	tc.createBucket(0, "bkt")
	data := make([]byte, 2<<20)
	for i := range data {
		data[i] = byte(i * 5 / 3)
	}
	want := map[string]string{"big": md5hex(data)}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("big"), Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		k := fmt.Sprintf("small%d", i)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
		want[k] = md5hex([]byte(k))
	}
	tc.waitAllReplicas(0, "bkt", want, 3, 30*time.Second)
	if flipped := flipSegmentByte(t, tc.procs[1].DataDir()); flipped != 1 {
		t.Fatalf("flipped a byte in %d segments, want the one holding the object", flipped)
	}
	if out, err := tc.admin(0, "scrub", "start", "nosuchnode"); err == nil || !strings.Contains(out, "no storage node") {
		t.Fatalf("scrub of an unknown node: %v\n%s", err, out)
	}
	if out, err := tc.admin(0, "scrub", "start", "node2"); err != nil {
		t.Fatalf("scrub start: %v\n%s", err, out)
	}
	var st []repair.ScrubStatus
	proctest.WaitFor(t, 60*time.Second, func() error {
		out, err := tc.admin(0, "--json", "scrub", "status", "node2")
		if err != nil {
			return proc.Permanent(fmt.Errorf("scrub status: %v\n%s", err, out))
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil || len(st) != 1 {
			return proc.Permanent(fmt.Errorf("scrub status --json: %v\n%s", err, out))
		}
		if st[0].State != "idle" || st[0].Finished.IsZero() {
			return fmt.Errorf("scrub did not finish: %+v", st)
		}
		return nil
	})
	if s := st[0]; s.Objects != 6 || s.Corrupt != 1 || s.Repaired != 1 || s.Errors != 0 || s.Bytes == 0 {
		t.Fatalf("scrub figures: %+v; want 6 objects, 1 damaged copy found and repaired", s)
	}
	tc.procs[0].Kill()
	tc.procs[2].Kill()
	for k, etag := range want {
		got, err := getBody(ctx, tc.procs[1].client(), "bkt", k)
		if err != nil || md5hex(got) != etag {
			t.Fatalf("read %s from the scrubbed node alone: %v", k, err)
		}
	}
}

// flipSegmentByte flips one bit 600 KiB into every segment file of dataDir large enough to
// hold a 2 MiB object's chunks (bit rot), and returns how many files it changed.
func flipSegmentByte(t *testing.T, dataDir string) int {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dataDir, "segments", "*.seg"))
	flipped := 0
	for _, s := range segs {
		if st, err := os.Stat(s); err != nil || st.Size() < 700<<10 {
			continue
		}
		f, err := os.OpenFile(s, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		f.ReadAt(b[:], 600<<10)
		b[0] ^= 0x40
		f.WriteAt(b[:], 600<<10)
		f.Close()
		flipped++
	}
	return flipped
}

// A cluster with fewer storage nodes than STANDARD's copies keeps one copy per node and
// says so as a note, not a warning (no node could hold the missing copies); once it has
// N storage nodes the note is gone. The admin flags work after the command too.
func TestFewerNodesThanCopiesStatus(t *testing.T) {
	tc := startCluster(t, 1)
	check := func(nodes int) {
		t.Helper()
		out, err := tc.admin(0, "status", "--json")
		if err != nil {
			t.Fatalf("admin status --json: %v\n%s", err, out)
		}
		var st server.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if len(st.Warnings) != 0 || st.Effective.N != min(nodes, 3) || st.Class.N != 3 {
			t.Fatalf("%d node(s): warnings %q, N %d in force of %d", nodes, st.Warnings, st.Effective.N, st.Class.N)
		}
		text, err := tc.admin(0, "status")
		if err != nil {
			t.Fatal(err)
		}
		if nodes < 3 {
			if len(st.Notes) != 1 || !strings.Contains(st.Notes[0], fmt.Sprintf("keeps %d cop", nodes)) ||
				!strings.Contains(text, fmt.Sprintf("STANDARD: N=%d W=%d R=1 D=%d in force (configured N=3 W=2 R=1 D=2)", nodes, min(nodes, 2), min(nodes, 2))) {
				t.Fatalf("%d node(s): notes %q, status:\n%s", nodes, st.Notes, text)
			}
		} else if len(st.Notes) != 0 || !strings.Contains(text, "STANDARD: N=3 W=2 R=1 D=2\n") {
			t.Fatalf("3 nodes: notes %q, status:\n%s", st.Notes, text)
		}
		if strings.Contains(text, "warning:") {
			t.Fatalf("%d node(s): a warning in the status:\n%s", nodes, text)
		}
	}
	check(1)
	tc.add()
	proctest.WaitFor(t, 30*time.Second, func() error {
		if n := len(tc.status(0).Nodes); n != 2 {
			return fmt.Errorf("%d nodes in the map, want 2", n)
		}
		return nil
	})
	check(2)
	tc.add()
	proctest.WaitFor(t, 30*time.Second, func() error {
		if n := len(tc.status(0).Nodes); n != 3 {
			return fmt.Errorf("%d nodes in the map, want 3", n)
		}
		return nil
	})
	check(3)
}

// With two of three managers killed there is no Raft leader: creating a bucket fails
// within seconds with 503 ServiceUnavailable naming the cause (not SlowDown after minutes
// of retries); reading an object the survivor holds still works; a write fails honestly
// (its quorum cannot be reached) and so does a listing that would miss objects only the
// dead nodes hold. With one of three killed (not yet marked down), listings route around
// it at once.
func TestClusterQuorumLoss(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitVoters(3)
	ctx := context.Background()
	c := tc.procs[0].client()
	tc.createBucket(0, "bkt")
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"), Body: strings.NewReader("kept")}); err != nil {
		t.Fatal(err)
	}
	// Every holder has it before the kills (the write waits W=2; the third may be on its way).
	proctest.WaitFor(t, 30*time.Second, func() error {
		for i, p := range tc.procs {
			if b, err := getBody(ctx, p.client(), "bkt", "k"); err != nil || string(b) != "kept" {
				return fmt.Errorf("node %d: %q %v", i, b, err)
			}
		}
		return nil
	})
	tc.procs[2].Kill()
	if l := listAll(ctx, t, c, "bkt", "", 100); len(l) != 1 {
		t.Fatalf("listing with one node killed: %v", l)
	}
	tc.procs[1].Kill()
	start := time.Now()
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("new")})
	took := time.Since(start)
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ServiceUnavailable" || !strings.Contains(ae.ErrorMessage(), "no Raft leader") {
		t.Fatalf("CreateBucket without a leader: %v, want 503 ServiceUnavailable naming the missing leader", err)
	}
	// A bound, not a timing measurement: without the fast answer it took the whole 15 s
	// commit budget, times the client's retries.
	if took > 14*time.Second {
		t.Fatalf("CreateBucket without a leader took %s", took)
	}
	t.Logf("CreateBucket without a leader: %s: %s", took.Round(100*time.Millisecond), ae.ErrorMessage())
	if b, err := getBody(ctx, c, "bkt", "k"); err != nil || string(b) != "kept" {
		t.Fatalf("read without a leader: %q %v", b, err)
	}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k2"), Body: strings.NewReader("x")})
	if !errors.As(err, &ae) || ae.ErrorCode() != "ServiceUnavailable" {
		t.Fatalf("write with two of three holders gone: %v, want 503 ServiceUnavailable", err)
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("bkt")}); err == nil {
		t.Fatal("a listing with two of three nodes gone succeeded: it could miss objects only they hold")
	}
	out, err := tc.admin(0, "status")
	if err != nil || !strings.Contains(out, "warning: no Raft leader") || strings.Contains(out, "*leader*") {
		t.Fatalf("status without a leader: %v\n%s", err, out)
	}
}
