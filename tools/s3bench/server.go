package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopTimeout bounds the wait for the started server to exit after SIGTERM.
const stopTimeout = 30 * time.Second

// cairnProc is a cairn server started by the harness.
type cairnProc struct {
	cmd       *exec.Cmd
	tmp       string // removed by stop
	endpoint  string
	adminAddr string
	accessKey string
	secretKey string
	version   string
	startup   time.Duration
	out, log  *lineLog
	done      chan struct{} // closed when the process has exited
	waitErr   error
	stopOnce  sync.Once
	stopInfo  serverReport
}

// serverReport is what the harness noticed about the started server.
type serverReport struct {
	Version       string   `json:"version,omitempty"`
	Binary        string   `json:"binary"`
	DataFS        string   `json:"data_fs,omitempty"`
	StartupMs     float64  `json:"startup_ms"`
	ShutdownMs    float64  `json:"shutdown_ms"`
	ExitStatus    string   `json:"exit_status"`
	LogWarnings   int      `json:"log_warnings"`
	LogErrors     int      `json:"log_errors"`
	LogSamples    []string `json:"log_samples,omitempty"`
	StopError     string   `json:"stop_error,omitempty"`
	MaxRSSKiB     int64    `json:"max_rss_kib,omitempty"`
	ServerCPUSecs float64  `json:"server_cpu_seconds"`
}

// startCairn starts bin on free loopback ports with a fresh data directory under dir and
// waits until it serves, at most timeout.
func startCairn(ctx context.Context, bin, dir string, timeout time.Duration) (*cairnProc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("cairn binary %s not found (build it: go build -o bin/cairn ./cmd/cairn)", bin)
	}
	tmp, err := os.MkdirTemp(dir, "s3bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	p := &cairnProc{tmp: tmp, accessKey: "S3BENCH" + randHex(7), secretKey: randHex(20),
		out: newLineLog("S3 endpoint:"), log: newLineLog(), done: make(chan struct{})}
	if err := p.launch(bin); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := p.waitReady(ctx, timeout); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (p *cairnProc) launch(bin string) error {
	s3Addr, err := freeAddr()
	if err != nil {
		return fmt.Errorf("no free port: %w", err)
	}
	if p.adminAddr, err = freeAddr(); err != nil {
		return fmt.Errorf("no free port: %w", err)
	}
	p.cmd = exec.Command(bin, "server", "--data", filepath.Join(p.tmp, "data"),
		"--listen", s3Addr, "--admin-listen", p.adminAddr)
	p.cmd.Env = append(os.Environ(), "CAIRN_ACCESS_KEY="+p.accessKey, "CAIRN_SECRET_KEY="+p.secretKey)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.log
	p.cmd.SysProcAttr = childAttr()
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return nil
}

// waitReady waits for the "S3 endpoint:" line and a 200 from /health.
func (p *cairnProc) waitReady(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case line := <-p.out.match:
		p.endpoint = strings.TrimSpace(line[strings.Index(line, "S3 endpoint:")+len("S3 endpoint:"):])
	case <-p.done:
		return fmt.Errorf("cairn exited before serving (%v): %s", p.waitErr, p.log.last())
	case <-ctx.Done():
		return fmt.Errorf("cairn did not print its S3 endpoint within %v: %s", timeout, p.log.last())
	}
	if err := p.waitHealthy(ctx); err != nil {
		return err
	}
	p.startup = time.Since(start)
	p.version = strings.TrimPrefix(p.out.first(), "cairn ")
	return nil
}

func (p *cairnProc) waitHealthy(ctx context.Context) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	url := "http://" + p.adminAddr + "/health"
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		last = err
		select {
		case <-p.done:
			return fmt.Errorf("cairn exited before it was healthy (%v): %s", p.waitErr, p.log.last())
		case <-ctx.Done():
			return fmt.Errorf("cairn %s not healthy: %v", url, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, waits for the exit (SIGKILL after stopTimeout) and removes the
// temporary directory. It is safe to call more than once.
func (p *cairnProc) stop() serverReport {
	p.stopOnce.Do(func() {
		r := &p.stopInfo
		r.Version = p.version
		r.Binary = p.cmd.Path
		r.DataFS = fsType(p.tmp)
		r.StartupMs = ms(p.startup)
		if cpu := procCPU(p.cmd.Process.Pid); cpu >= 0 {
			r.ServerCPUSecs = cpu.Seconds()
		}
		start := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			r.StopError = fmt.Sprintf("no exit %v after SIGTERM; killed", stopTimeout)
			p.cmd.Process.Kill()
			<-p.done
		}
		r.ShutdownMs = ms(time.Since(start))
		r.ExitStatus = exitStatus(p.waitErr)
		if ps := p.cmd.ProcessState; ps != nil {
			if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
				r.MaxRSSKiB = ru.Maxrss
			}
		}
		r.LogWarnings, r.LogErrors, r.LogSamples = p.log.problems()
		if err := os.RemoveAll(p.tmp); err != nil && r.StopError == "" {
			r.StopError = "removing data dir: " + err.Error()
		}
	})
	return p.stopInfo
}

func exitStatus(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "0"
	case errors.As(err, &ee):
		return ee.ProcessState.String()
	}
	return err.Error()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// lineLog is an io.Writer that watches a process's output line by line: it sends the first
// line containing its pattern on match, and keeps the first line, the last lines and the
// warnings and errors of a slog text log.
type lineLog struct {
	pattern  string
	match    chan string
	mu       sync.Mutex
	partial  []byte
	firstLn  string
	tail     []string
	warnings int
	errors   int
	samples  []string
}

const (
	tailLines  = 5
	maxSamples = 8
)

func newLineLog(pattern ...string) *lineLog {
	l := &lineLog{match: make(chan string, 1)}
	if len(pattern) > 0 {
		l.pattern = pattern[0]
	}
	return l
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := strings.IndexByte(string(l.partial), '\n')
		if i < 0 {
			return len(b), nil
		}
		l.line(string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
}

func (l *lineLog) line(s string) {
	if l.firstLn == "" {
		l.firstLn = s
	}
	l.tail = append(l.tail, s)
	if len(l.tail) > tailLines {
		l.tail = l.tail[1:]
	}
	if l.pattern != "" && strings.Contains(s, l.pattern) {
		select {
		case l.match <- s:
		default:
		}
	}
	isWarn, isErr := strings.Contains(s, "level=WARN"), strings.Contains(s, "level=ERROR")
	if isWarn {
		l.warnings++
	}
	if isErr {
		l.errors++
	}
	if (isWarn || isErr) && len(l.samples) < maxSamples {
		l.samples = append(l.samples, s)
	}
}

func (l *lineLog) first() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstLn
}

// last is the process's last output line, for one-line error messages.
func (l *lineLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tail) == 0 {
		return "(no output)"
	}
	return l.tail[len(l.tail)-1]
}

func (l *lineLog) problems() (warnings, errors int, samples []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.warnings, l.errors, slices.Clone(l.samples)
}
