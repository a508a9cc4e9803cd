package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

const (
	accessKey = "LISTBENCHACCESSKEY01"
	secretKey = "listbenchSecretKey0123456789abcdefghijkl"
	region    = "us-east-1"
)

// server is a cairn server running as a child process (internal/proc): its output is in
// DATADIR.log beside its data directory.
type server struct{ *proc.Proc }

// startServer runs bin server on dataDir and waits (at most timeout) until it is ready
// (its ready file). It returns the time that took.
func startServer(ctx context.Context, bin, dataDir string, timeout time.Duration, extra []string) (*server, time.Duration, error) {
	start := time.Now()
	p, err := proc.Start(ctx, proc.Config{Bin: bin, Name: filepath.Base(dataDir), Dir: filepath.Dir(dataDir), DataDir: dataDir,
		Args: extra, Env: []string{"CAIRN_ACCESS_KEY=" + accessKey, "CAIRN_SECRET_KEY=" + secretKey}, StartTimeout: timeout})
	if err != nil {
		return nil, 0, err
	}
	return &server{p}, time.Since(start), nil
}

// problems returns the server's log lines at WARN or ERROR level.
func (p *server) problems() []string {
	var out []string
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return out
}

// stop sends SIGTERM and waits for the exit (SIGKILL after a minute). It returns how
// long the exit took.
func (p *server) stop() (time.Duration, error) {
	start := time.Now()
	err := p.Stop()
	return time.Since(start), err
}

// GoMemory is the server's Go runtime memory, from its /metrics (Go collector), in bytes.
type GoMemory struct {
	HeapInuse int64 `json:"heap_inuse_bytes"`
	HeapAlloc int64 `json:"heap_alloc_bytes"`
	Sys       int64 `json:"sys_bytes"`
	NextGC    int64 `json:"next_gc_bytes"`
}

// goMemory scrapes the server's /metrics; zero figures if they are not there.
func (p *server) goMemory(ctx context.Context, timeout time.Duration) (GoMemory, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.AdminAddr()+"/metrics", nil)
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
