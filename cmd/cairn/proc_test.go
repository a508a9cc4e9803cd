package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

const (
	testAccess = "CAIRNPROCTEST0000001"
	testSecret = "procTestSecret0123456789abcdefghijklmnop"
)

// heavyParallel: the six longest process tests (TestLargeObjectMemory,
// TestClusterECLargeObjectMemory, TestCrashSafety, TestRollingUpgrade,
// TestClusterECReplacementNodes, TestClusterFullRestart: about 240 s of the suite's 690)
// call t.Parallel, so they run two at a time after the others: each spends most of its
// time waiting on its own processes (streams, restarts, convergence), and none depends
// on heartbeat timing, which a busier machine would upset. Their ports, directories and
// processes are their own.

// skipShort skips a process-level test under -short.
func skipShort(t testing.TB) {
	t.Helper()
	proctest.SkipIfShort(t)
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test reading.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testProc is a cairn server process of a test (internal/testutil/proctest): killed when
// the test ends, its log tail printed if the test failed.
type testProc struct{ *proctest.Proc }

// startTestProc starts a cairn server with the test credentials (cfg.Env may add more
// environment, cfg.Args more flags) and waits until it is ready.
func startTestProc(t testing.TB, cfg proc.Config) *testProc {
	t.Helper()
	cfg.Env = append([]string{"CAIRN_ACCESS_KEY=" + testAccess, "CAIRN_SECRET_KEY=" + testSecret}, cfg.Env...)
	return &testProc{proctest.Start(t, cfg)}
}

// startProc starts a single-node cairn server on dataDir with more flags.
func startProc(t testing.TB, dataDir string, extra ...string) *testProc {
	t.Helper()
	return startTestProc(t, proc.Config{DataDir: dataDir, Args: extra})
}

var hwmRe = regexp.MustCompile(`VmHWM:\s+(\d+) kB`)

// peakRSS returns the process's peak resident set size in bytes.
func (p *testProc) peakRSS(t testing.TB) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		t.Fatal(err)
	}
	m := hwmRe.FindSubmatch(data)
	if m == nil {
		t.Fatal("no VmHWM in /proc status")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

func (p *testProc) client() *s3.Client {
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(p.URL()),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(testAccess, testSecret, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Timeout: 60 * time.Second},
	})
}

func TestServerStartStop(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	p := startProc(t, dir)
	c := p.client()
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + p.AdminAddr() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get("http://" + p.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&body)
	resp.Body.Close()
	for _, m := range []string{`cairn_s3_requests_total{op="PutObject",status="200"} 1`, "cairn_s3_request_duration_seconds_bucket",
		"cairn_disk_free_bytes", "cairn_disk_garbage_bytes", "cairn_store_commit_batch_size_bucket", "cairn_s3_received_bytes_total"} {
		if !strings.Contains(body.String(), m) {
			t.Errorf("metrics lack %q", m)
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if !strings.Contains(p.Output(), "stopped cleanly") {
		t.Fatalf("no clean stop in logs:\n%s", p.Output())
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(p.LogPath()), "cairn.ready.json")); !os.IsNotExist(err) {
		t.Fatalf("the ready file is still there after a clean stop: %v", err)
	}
	// Restart on the same data and addresses: the object is there.
	first := p.Info()
	p.Restart()
	if again := p.Info(); again.S3 != first.S3 || again.Admin != first.Admin || again.Node != first.Node || again.PID == first.PID {
		t.Fatalf("restarted on other addresses: %+v, was %+v", again, first)
	}
	out, err := p.client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	out.Body.Close()
}

// Listeners given port 0 bind a free port each; the ready file reports them, and the
// node advertises the bound addresses in the cluster map.
func TestReadyFilePortZero(t *testing.T) {
	skipShort(t)
	p := startProc(t, t.TempDir()) // --listen, --admin-listen, --node-addr 127.0.0.1:0
	r := p.Info()
	for _, a := range []string{r.S3, r.Admin, r.Node} {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "0" {
			t.Fatalf("ready file address %q: %v", a, err)
		}
	}
	if r.PID == 0 || r.NodeID == "" || r.DataDir != p.DataDir() {
		t.Fatalf("ready file: %+v", r)
	}
	cmd := exec.Command(proctest.Bin(t), "admin", "--admin", r.Admin, "--json", "status")
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + mustRead(t, filepath.Join(p.DataDir(), "cluster-secret"))}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("admin status: %v\n%s", err, out)
	}
	var st server.Status
	if err := json.Unmarshal(out, &st); err != nil || len(st.Nodes) != 1 {
		t.Fatalf("admin status --json: %v\n%s", err, out)
	}
	if n := st.Nodes[0]; n.Addr != r.Node || n.S3Addr != r.S3 || n.AdminAddr != r.Admin {
		t.Fatalf("the map has node %s at %s (S3 %s, admin %s); the ready file says %+v", n.ID, n.Addr, n.S3Addr, n.AdminAddr, r)
	}
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// A server started without credentials generates a pair and prints it; the map holds the
// secret only sealed, so no file of the data directory has it in the clear, and a restart
// prints the same pair again.
func TestGeneratedCredentials(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	p := proctest.Start(t, proc.Config{DataDir: dir, AdminListen: "off", Env: []string{"CAIRN_ACCESS_KEY=", "CAIRN_SECRET_KEY="}})
	printed := func(out string) (access, secret string) {
		out = out[strings.LastIndex(out, "=== proc: start"):]
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "access key:"); ok {
				access = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "secret key:"); ok {
				secret = strings.TrimSpace(v)
			}
		}
		return access, secret
	}
	access, secret := printed(p.Output())
	if access == "" || secret == "" {
		t.Fatalf("credentials not printed:\n%s", p.Output())
	}
	proctest.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(p.Output(), "holds no access key in the clear") {
			return fmt.Errorf("the Raft log was not compacted yet")
		}
		return nil
	})
	if files := filesHolding(t, dir, secret); len(files) > 0 {
		t.Fatalf("the secret key is in the clear in %v", files)
	}
	p.Restart()
	if a, s := printed(p.Output()); a != access || s != secret {
		t.Fatalf("after a restart the printed pair is %s %s, want %s %s", a, s, access, secret)
	}
}

// filesHolding returns the files under dir that contain s.
func filesHolding(t testing.TB, dir, s string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, p)
		}
		return nil
	})
	return found
}
