package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	testAccess = "CAIRNPROCTEST0000001"
	testSecret = "procTestSecret0123456789abcdefghijklmnop"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// cairnBin returns the cairn binary under test: $CAIRN_BIN, or one built once per run.
func cairnBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CAIRN_BIN"); p != "" {
		return p
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cairn-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "cairn")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a cairn server running as a separate process.
type proc struct {
	t       testing.TB
	args    []string
	env     []string
	cmd     *exec.Cmd
	addr    string
	admin   string
	dataDir string
	exited  chan struct{}
	logs    *strings.Builder
	logsMu  sync.Mutex
	waitErr error
}

func startProc(t testing.TB, dataDir string, extra ...string) *proc {
	t.Helper()
	return startProcEnv(t, dataDir, nil, extra...)
}

// startProcEnv is startProc with more environment variables.
func startProcEnv(t testing.TB, dataDir string, env []string, extra ...string) *proc {
	t.Helper()
	p := &proc{t: t, addr: freePort(t), admin: freePort(t), dataDir: dataDir}
	p.args = append([]string{"server", "--data", dataDir, "--listen", p.addr, "--admin-listen", p.admin}, extra...)
	p.env = append(append(os.Environ(), "CAIRN_ACCESS_KEY="+testAccess, "CAIRN_SECRET_KEY="+testSecret), env...)
	p.start()
	t.Cleanup(p.kill)
	return p
}

// restart starts a stopped or killed proc again with the same arguments.
func (p *proc) restart() {
	p.t.Helper()
	p.kill()
	p.start()
}

func (p *proc) start() {
	t := p.t
	t.Helper()
	p.exited = make(chan struct{})
	p.logsMu.Lock()
	p.logs = &strings.Builder{}
	p.logsMu.Unlock()
	p.cmd = exec.Command(cairnBin(t), p.args...)
	p.cmd.Env = p.env
	stdout, _ := p.cmd.StdoutPipe()
	stderr, _ := p.cmd.StderrPipe()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	var once sync.Once
	scan := func(r *bufio.Scanner) {
		for r.Scan() {
			line := r.Text()
			p.logsMu.Lock()
			p.logs.WriteString(line + "\n")
			p.logsMu.Unlock()
			if strings.Contains(line, "S3 endpoint:") {
				once.Do(func() { close(ready) })
			}
		}
	}
	go scan(bufio.NewScanner(stdout))
	go scan(bufio.NewScanner(stderr))
	cmd, exited := p.cmd, p.exited
	go func() {
		err := cmd.Wait()
		p.logsMu.Lock()
		p.waitErr = err
		p.logsMu.Unlock()
		close(exited)
	}()
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("cairn exited before it was ready: %v\n%s", p.waitErr, p.output())
	case <-time.After(60 * time.Second):
		p.kill()
		t.Fatalf("cairn not ready after 60s\n%s", p.output())
	}
}

func (p *proc) output() string {
	p.logsMu.Lock()
	defer p.logsMu.Unlock()
	return p.logs.String()
}

func (p *proc) url() string { return "http://" + p.addr }

func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(60 * time.Second):
		p.kill()
		return fmt.Errorf("no exit 60s after SIGTERM")
	}
}

var hwmRe = regexp.MustCompile(`VmHWM:\s+(\d+) kB`)

// peakRSS returns the process's peak resident set size in bytes.
func (p *proc) peakRSS() int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	m := hwmRe.FindSubmatch(data)
	if m == nil {
		p.t.Fatal("no VmHWM in /proc status")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

func (p *proc) client() *s3.Client {
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(p.url()),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(testAccess, testSecret, ""),
		RetryMaxAttempts: 1,
		HTTPClient:       &http.Client{Timeout: 60 * time.Second},
	})
}

func TestServerStartStop(t *testing.T) {
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
	resp, err := http.Get("http://" + p.admin + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get("http://" + p.admin + "/metrics")
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
	if err := p.stop(); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, p.output())
	}
	if !strings.Contains(p.output(), "stopped cleanly") {
		t.Fatalf("no clean stop in logs:\n%s", p.output())
	}
	// Restart on the same data: the object is there.
	p2 := startProc(t, dir)
	out, err := p2.client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	out.Body.Close()
}

func TestGeneratedCredentials(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(cairnBin(t), "server", "--data", dir, "--listen", freePort(t), "--admin-listen", "off")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	var access, secret string
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() && (access == "" || secret == "") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "access key:"); ok {
			access = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "secret key:"); ok {
			secret = strings.TrimSpace(v)
		}
	}
	if access == "" || secret == "" {
		t.Fatal("credentials not printed")
	}
	data, err := os.ReadFile(filepath.Join(dir, "credentials.json"))
	if err != nil || !strings.Contains(string(data), access) || !strings.Contains(string(data), secret) {
		t.Fatalf("credentials not stored: %v %s", err, data)
	}
	st, _ := os.Stat(filepath.Join(dir, "credentials.json"))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode %v", st.Mode())
	}
}
