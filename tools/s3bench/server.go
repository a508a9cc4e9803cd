package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/testutil/testcert"
)

// stopTimeout bounds the wait for the started server to exit after SIGTERM.
const stopTimeout = 30 * time.Second

// cairnProc is a cairn server started by the harness (internal/proc).
type cairnProc struct {
	p         *proc.Proc
	bin       string
	tmp       string // removed by stop
	endpoint  string
	adminAddr string
	accessKey string
	secretKey string
	version   string
	startup   time.Duration
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
// With ca, it serves HTTPS with a certificate for 127.0.0.1 that ca issues.
func startCairn(ctx context.Context, bin, dir string, timeout time.Duration, ca *testcert.CA) (*cairnProc, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("cairn binary %s not found (build it: go build -o bin/cairn ./cmd/cairn)", bin)
	}
	tmp, err := os.MkdirTemp(dir, "s3bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	c := &cairnProc{bin: bin, tmp: tmp, accessKey: "S3BENCH" + randHex(7), secretKey: randHex(20)}
	var args []string
	if ca != nil {
		cert, key := filepath.Join(tmp, "cert.pem"), filepath.Join(tmp, "key.pem")
		pair, err := ca.Issue(1, "127.0.0.1")
		if err == nil {
			err = pair.Write(cert, key)
		}
		if err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("certificate: %w", err)
		}
		args = []string{"--tls-cert", cert, "--tls-key", key}
	}
	start := time.Now()
	c.p, err = proc.Start(ctx, proc.Config{Bin: bin, Name: "cairn", Dir: tmp, DataDir: filepath.Join(tmp, "data"), Args: args,
		Env: []string{"CAIRN_ACCESS_KEY=" + c.accessKey, "CAIRN_SECRET_KEY=" + c.secretKey}, StartTimeout: timeout, StopTimeout: stopTimeout})
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	c.startup = time.Since(start)
	r := c.p.Info()
	c.endpoint, c.adminAddr, c.version = c.p.URL(), r.Admin, r.Version
	return c, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// stop sends SIGTERM, waits for the exit (SIGKILL after stopTimeout) and removes the
// temporary directory. It is safe to call more than once.
func (c *cairnProc) stop() serverReport {
	c.stopOnce.Do(func() {
		r := &c.stopInfo
		r.Version = c.version
		r.Binary = c.bin
		r.DataFS = fsType(c.tmp)
		r.StartupMs = ms(c.startup)
		if cpu := procCPU(c.p.PID()); cpu >= 0 {
			r.ServerCPUSecs = cpu.Seconds()
		}
		start := time.Now()
		err := c.p.Stop()
		if errors.Is(err, proc.ErrStopTimeout) {
			r.StopError = fmt.Sprintf("no exit %v after SIGTERM; killed", stopTimeout)
		}
		r.ShutdownMs = ms(time.Since(start))
		r.ExitStatus = exitStatus(c.p.ExitErr())
		if ps := c.p.ProcessState(); ps != nil {
			if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
				r.MaxRSSKiB = ru.Maxrss
			}
		}
		r.LogWarnings, r.LogErrors, r.LogSamples = logProblems(c.p.Output())
		if err := os.RemoveAll(c.tmp); err != nil && r.StopError == "" {
			r.StopError = "removing data dir: " + err.Error()
		}
	})
	return c.stopInfo
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

const maxSamples = 8

// logProblems counts the warnings and errors of a slog text log and keeps a few.
func logProblems(log string) (warnings, errors int, samples []string) {
	for _, s := range strings.Split(log, "\n") {
		isWarn, isErr := strings.Contains(s, "level=WARN"), strings.Contains(s, "level=ERROR")
		if isWarn {
			warnings++
		}
		if isErr {
			errors++
		}
		if (isWarn || isErr) && len(samples) < maxSamples {
			samples = append(samples, s)
		}
	}
	return warnings, errors, samples
}
