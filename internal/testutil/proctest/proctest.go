// Package proctest is internal/proc for tests: Start runs a cairn server process that
// the test's cleanup stops, whose log tail is printed when the test fails, and whose
// errors fail the test; WaitFor and Holds wait on conditions instead of sleeping.
//
// It is a leaf (it imports only internal/proc), so that tests of any package may use
// WaitFor. It builds nothing but the cairn binary (Bin).
package proctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Bin returns the cairn binary under test: $CAIRN_BIN, or one built (once per test
// binary) from ./cmd/cairn of this module.
func Bin(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("CAIRN_BIN"); p != "" {
		return p
	}
	binOnce.Do(func() {
		sweepStaleBins(os.TempDir(), time.Now().Add(-staleBinAge))
		dir, err := os.MkdirTemp("", binDirPrefix)
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "cairn")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/cairnfs/cairn/cmd/cairn").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		tb.Fatal(binErr)
	}
	return binPath
}

// binDirPrefix names the temporary directories Bin builds into. No hook runs when a test
// binary exits, so each one is left behind (55 MB); the next Bin removes those older than
// staleBinAge, far longer than any test run (the suites' timeout is 20 minutes).
const (
	binDirPrefix = "cairn-bin"
	staleBinAge  = 6 * time.Hour
)

// sweepStaleBins removes Bin's directories under dir last changed before cutoff.
// Failures are ignored: the sweep only saves disk space.
func sweepStaleBins(dir string, cutoff time.Time) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), binDirPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.ModTime().After(cutoff) {
			continue
		}
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// SkipIfShort skips a process-level test under -short: `go test -short ./...` is the
// fast loop, without a cairn binary to build or processes to start.
func SkipIfShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("process test: skipped in -short")
	}
}

// Proc is a cairn server process started by Start.
type Proc struct {
	*proc.Proc
	tb testing.TB
}

// LogLines is how much of a process's log a failed test prints.
const LogLines = 60

// Start starts a cairn server process and waits until it is ready, failing the test if
// it does not get ready. cfg.Bin defaults to Bin(tb), cfg.Dir to a new tb.TempDir().
// When the test ends the process is killed, and if the test failed the end of its log
// is printed.
func Start(tb testing.TB, cfg proc.Config) *Proc {
	tb.Helper()
	if cfg.Bin == "" {
		cfg.Bin = Bin(tb)
	}
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	p, err := proc.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("%s log (last %d lines of %s):\n%s", p.Name(), LogLines, p.LogPath(), p.LogTail(LogLines))
		}
	})
	tb.Cleanup(p.Kill) // runs first: the log is complete when it is printed
	return &Proc{Proc: p, tb: tb}
}

// Restart kills the process if it runs and starts it again on the same addresses, with
// extra flags from now on; it fails the test if the process does not get ready.
func (p *Proc) Restart(extra ...string) {
	p.tb.Helper()
	if err := p.Proc.Restart(context.Background(), extra...); err != nil {
		p.tb.Fatal(err)
	}
}

// Pause stops the process (SIGSTOP) and Resume continues it; they fail the test if the
// process is not running.
func (p *Proc) Pause() {
	p.tb.Helper()
	if err := p.Proc.Pause(); err != nil {
		p.tb.Fatal(err)
	}
}

// Resume: see Pause.
func (p *Proc) Resume() {
	p.tb.Helper()
	if err := p.Proc.Resume(); err != nil {
		p.tb.Fatal(err)
	}
}

// WaitFor calls cond until it returns nil. After timeout it fails the test with cond's
// last error; an error made by proc.Permanent fails it at once.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	if err := proc.Until(context.Background(), timeout, cond); err != nil {
		tb.Fatal(err)
	}
}

// Holds calls cond repeatedly during the whole window and fails the test as soon as it
// returns an error: it checks that something does not happen within a time, the one
// case where a test has to let the time pass.
func Holds(tb testing.TB, window time.Duration, cond func() error) {
	tb.Helper()
	end := time.Now().Add(window)
	err := proc.Until(context.Background(), window+time.Minute, func() error {
		if err := cond(); err != nil {
			return proc.Permanent(err)
		}
		if time.Now().Before(end) {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("within %s: %v", window, err)
	}
}

var errNotYet = fmt.Errorf("window not over")
