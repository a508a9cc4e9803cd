package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	accessKey = "LISTBENCHACCESSKEY01"
	secretKey = "listbenchSecretKey0123456789abcdefghijkl"
	region    = "us-east-1"
)

// proc is a cairn server running as a child process.
type proc struct {
	cmd     *exec.Cmd
	addr    string
	admin   string
	exited  chan struct{}
	waitErr error

	mu   sync.Mutex
	logs []string
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startServer runs bin server on dataDir and waits (at most timeout) until it prints its
// S3 endpoint. It returns the time that took.
func startServer(ctx context.Context, bin, dataDir string, timeout time.Duration, extra []string) (*proc, time.Duration, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, 0, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, 0, err
	}
	p := &proc{addr: addr, admin: admin, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"server", "--data", dataDir, "--listen", addr, "--admin-listen", admin}, extra...)...)
	p.cmd.Env = append(os.Environ(), "CAIRN_ACCESS_KEY="+accessKey, "CAIRN_SECRET_KEY="+secretKey)
	p.cmd.SysProcAttr = childAttr()
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, 0, err
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start %s: %w", bin, err)
	}
	ready := make(chan struct{})
	var once sync.Once
	var readers sync.WaitGroup
	read := func(r io.Reader) {
		defer readers.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs = append(p.logs, line)
			p.mu.Unlock()
			if strings.Contains(line, "S3 endpoint:") {
				once.Do(func() { close(ready) })
			}
		}
	}
	readers.Add(2)
	go read(stdout)
	go read(stderr)
	go func() {
		readers.Wait() // Wait closes the pipes: read them to the end first
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return p, time.Since(start), nil
	case <-p.exited:
		return nil, 0, fmt.Errorf("cairn exited before it was ready: %v\n%s", p.waitErr, p.output(40))
	case <-t.C:
		p.kill()
		return nil, 0, fmt.Errorf("cairn not ready after %v\n%s", timeout, p.output(40))
	case <-ctx.Done():
		p.kill()
		return nil, 0, ctx.Err()
	}
}

// output is the last n lines the server printed.
func (p *proc) output(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.logs
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// problems returns the server's log lines at WARN or ERROR level.
func (p *proc) problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.logs {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGTERM and waits up to timeout for the exit, then kills the server. It
// returns how long the exit took.
func (p *proc) stop(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	select {
	case <-p.exited:
		return 0, fmt.Errorf("cairn had already exited: %v", p.waitErr)
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		d := time.Since(start)
		if p.waitErr != nil {
			return d, fmt.Errorf("cairn exit: %v\n%s", p.waitErr, p.output(20))
		}
		return d, nil
	case <-t.C:
		p.kill()
		return time.Since(start), fmt.Errorf("cairn did not exit %v after SIGTERM; killed", timeout)
	}
}

// GoMemory is the server's Go runtime memory, from its /metrics (Go collector), in bytes.
type GoMemory struct {
	HeapInuse int64 `json:"heap_inuse_bytes"`
	HeapAlloc int64 `json:"heap_alloc_bytes"`
	Sys       int64 `json:"sys_bytes"`
	NextGC    int64 `json:"next_gc_bytes"`
}

// goMemory scrapes the server's /metrics; zero figures if they are not there.
func (p *proc) goMemory(ctx context.Context, timeout time.Duration) (GoMemory, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/metrics", nil)
	if err != nil {
		return GoMemory{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return GoMemory{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return GoMemory{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var m GoMemory
	fields := map[string]*int64{
		"go_memstats_heap_inuse_bytes": &m.HeapInuse,
		"go_memstats_heap_alloc_bytes": &m.HeapAlloc,
		"go_memstats_sys_bytes":        &m.Sys,
		"go_memstats_next_gc_bytes":    &m.NextGC,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if ptr := fields[name]; ok && ptr != nil {
			f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err == nil {
				*ptr = int64(f)
			}
		}
	}
	return m, sc.Err()
}
