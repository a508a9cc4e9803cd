package testutil

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Redis is a redis-server process on 127.0.0.1 for a test, its data in a temporary
// directory (append-only file synced at every write, so a stop and start keep what it
// acknowledged).
type Redis struct {
	Addr string
	tb   testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
}

// StartRedis starts Debian's redis-server. Without the binary the test is skipped,
// unless CI is set (make test installs it: deps-apt), where it fails.
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatal("redis-server is not installed (make deps-apt installs Debian's redis-server)")
		}
		tb.Skip("redis-server is not installed: apt-get install redis-server (make deps-apt)")
	}
	r := &Redis{tb: tb, dir: tb.TempDir()}
	var err error
	for try := 0; try < 20; try++ {
		r.port = 20000 + rand.IntN(30000)
		if err = r.Start(); err == nil {
			tb.Cleanup(func() { r.Stop() })
			return r
		}
	}
	tb.Fatalf("redis-server did not start: %v", err)
	return nil
}

// Start starts the server (again) on its port and waits until it accepts connections.
func (r *Redis) Start() error {
	r.Addr = fmt.Sprintf("127.0.0.1:%d", r.port)
	log := filepath.Join(r.dir, "redis.log")
	os.Remove(log)
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", log, "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("redis-server exited: %v: %s", err, tail(log))
		default:
		}
		if strings.Contains(tail(log), "Ready to accept connections") {
			r.cmd = cmd
			go func() { <-done }()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	return fmt.Errorf("redis-server not ready: %s", tail(log))
}

// Stop stops the server (SIGTERM: it syncs its file and exits) and waits until its port
// refuses connections.
func (r *Redis) Stop() {
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(os.Interrupt)
	for i := 0; i < 500; i++ {
		c, err := net.DialTimeout("tcp", r.Addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	r.cmd = nil
}

func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
