package proc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config describes a cairn server process.
type Config struct {
	// Bin is the cairn binary (required).
	Bin string
	// Name names the process in errors and its files (default "cairn").
	Name string
	// Dir holds the log (NAME.log) and the ready file (NAME.ready.json) (required).
	Dir string
	// DataDir is --data (default Dir/NAME).
	DataDir string
	// LogPath is where stdout and stderr go, appended to (default Dir/NAME.log).
	LogPath string
	// Listen, AdminListen and NodeAddr are the first start's --listen, --admin-listen
	// and --node-addr (default 127.0.0.1:0; AdminListen may be "off"). Restarts use the
	// addresses the first start bound.
	Listen, AdminListen, NodeAddr string
	// LowPorts makes the first start bind random loopback ports below the kernel's
	// ephemeral port range instead of port 0, trying other ones while a port is taken:
	// then the source port of some outgoing connection cannot take a node's port while
	// it is down between a kill and its restart (for runs with many restarts, the soak).
	LowPorts bool
	// Args are more `cairn server` flags.
	Args []string
	// Env is added to this process's environment (a later NAME=value overrides).
	Env []string
	// Wrap, if set, is a command the server is run through: Wrap[0] with Wrap[1:], then
	// Bin and its flags (e.g. `ip netns exec NS`, which runs it in a network namespace;
	// the wrapper must exec the server, so that signals reach it).
	Wrap []string
	// StartTimeout bounds the wait for the ready file (default 60s); StopTimeout the wait
	// for the exit after SIGTERM before SIGKILL (default 60s).
	StartTimeout, StopTimeout time.Duration
	// SysProcAttr is the process's attributes (default on Linux: killed when this
	// process dies).
	SysProcAttr *syscall.SysProcAttr
	// OnExit, if set, is called in its own goroutine when the process exits without
	// having been told to (Stop, Kill).
	OnExit func(p *Proc, err error)
}

// ErrStopTimeout is wrapped by Stop's error when the process had to be killed.
var ErrStopTimeout = errors.New("no exit after SIGTERM: killed")

// Proc is a cairn server process; its methods may be called from several goroutines.
type Proc struct {
	cfg       Config
	readyPath string

	mu       sync.Mutex
	cmd      *exec.Cmd
	args     []string
	exited   chan struct{} // closed when the current process has exited
	waitErr  error
	expected bool // the current process was told to exit
	paused   bool
	ready    Ready
	addrs    [3]string // --listen, --admin-listen, --node-addr of the next start
	extra    []string  // flags added by Restart
	starts   int
	logFrom  int64 // size of the log when the current process started
}

// Start starts a cairn server and waits until it is ready: its ready file appears. If it
// exits first, or is not ready within cfg.StartTimeout or before ctx ends, it is killed
// and the error says why, with the end of its log.
func Start(ctx context.Context, cfg Config) (*Proc, error) {
	if cfg.Bin == "" || cfg.Dir == "" {
		return nil, errors.New("proc: Config.Bin and Config.Dir are required")
	}
	if cfg.Name == "" {
		cfg.Name = "cairn"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(cfg.Dir, cfg.Name)
	}
	if cfg.LogPath == "" {
		cfg.LogPath = filepath.Join(cfg.Dir, cfg.Name+".log")
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 60 * time.Second
	}
	if cfg.SysProcAttr == nil {
		cfg.SysProcAttr = defaultSysProcAttr()
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	p := &Proc{cfg: cfg, readyPath: filepath.Join(cfg.Dir, cfg.Name+".ready.json")}
	for i, a := range []string{cfg.Listen, cfg.AdminListen, cfg.NodeAddr} {
		if a == "" {
			a = "127.0.0.1:0"
		}
		p.addrs[i] = a
	}
	if !cfg.LowPorts {
		if err := p.run(ctx); err != nil {
			return nil, err
		}
		return p, nil
	}
	var err error
	for try := 0; try < 10; try++ {
		for i, a := range p.addrs {
			if a != "off" {
				p.addrs[i] = lowPort()
			}
		}
		if err = p.run(ctx); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// lowPort returns a random loopback address with a port between 10000 and the start
// of the ephemeral range, or port 0 if there is no such range.
func lowPort() string {
	lo := 32768
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(data), &lo)
	}
	if lo <= 12000 {
		return "127.0.0.1:0"
	}
	return fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(lo-10000))
}

var errAddrInUse = errors.New("address in use")

// run starts the process once on p.addrs and waits for its ready file.
func (p *Proc) run(ctx context.Context) error {
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	if err := os.Remove(p.readyPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	logf, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	var logFrom int64
	if st, err := logf.Stat(); err == nil {
		logFrom = st.Size()
	}
	p.mu.Lock()
	p.starts++
	p.logFrom = logFrom
	args := append([]string{"server", "--data", cfg.DataDir, "--listen", p.addrs[0], "--admin-listen", p.addrs[1],
		"--node-addr", p.addrs[2], "--ready-file", p.readyPath}, cfg.Args...)
	args = append(args, p.extra...)
	starts := p.starts
	p.mu.Unlock()
	fmt.Fprintf(logf, "=== proc: start %d of %s at %s: %s %s\n", starts, cfg.Name, time.Now().Format("15:04:05.000"), cfg.Bin, strings.Join(args, " "))
	name, argv := cfg.Bin, args
	if len(cfg.Wrap) > 0 {
		name, argv = cfg.Wrap[0], append(append(slices.Clone(cfg.Wrap[1:]), cfg.Bin), args...)
	}
	cmd := exec.Command(name, argv...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = cfg.SysProcAttr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", cfg.Name, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.args, p.exited, p.waitErr, p.expected, p.paused = cmd, args, exited, nil, false, false
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		if f, ferr := os.OpenFile(cfg.LogPath, os.O_WRONLY|os.O_APPEND, 0); ferr == nil {
			fmt.Fprintf(f, "=== proc: %s (pid %d) exited at %s: %v\n", cfg.Name, cmd.Process.Pid, time.Now().Format("15:04:05.000"), exitString(err))
			f.Close()
		}
		p.mu.Lock()
		p.waitErr = err
		expected := p.expected
		close(exited)
		p.mu.Unlock()
		if !expected && cfg.OnExit != nil {
			go cfg.OnExit(p, err)
		}
	}()
	var r Ready
	err = Until(ctx, cfg.StartTimeout, func() error {
		select {
		case <-exited:
			return Permanent(fmt.Errorf("%s exited before it was ready (%s)", cfg.Name, exitString(p.ExitErr())))
		default:
		}
		var err error
		if r, err = ReadReadyFile(p.readyPath); err != nil {
			return err
		}
		if r.PID != cmd.Process.Pid {
			return fmt.Errorf("%s: the ready file is of pid %d, not %d", p.readyPath, r.PID, cmd.Process.Pid)
		}
		return nil
	})
	if err != nil {
		p.Kill()
		tail := p.runLog()
		if strings.Contains(tail, "address already in use") {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("%s not ready: %w; log %s:\n%s", cfg.Name, err, cfg.LogPath, lastLines(tail, 30))
	}
	p.mu.Lock()
	p.ready = r
	p.addrs = [3]string{r.S3, r.Admin, r.Node}
	if r.Admin == "" {
		p.addrs[1] = "off"
	}
	p.mu.Unlock()
	return nil
}

// Restart starts the process again on the addresses it bound first (killing it first
// if it runs), with extra flags added to its arguments from now on, and waits until it
// is ready. While one of its addresses is still taken (a connection in TIME_WAIT), it
// waits for it up to 15 s; then the address in use is reported as the error.
func (p *Proc) Restart(ctx context.Context, extra ...string) error {
	p.Kill()
	p.mu.Lock()
	p.extra = append(p.extra, extra...)
	addrs := p.addrs
	wrapped := len(p.cfg.Wrap) > 0
	p.mu.Unlock()
	var err error
	for try := 0; try < 3; try++ {
		// A wrapped server may listen in another network namespace, where this process
		// cannot check its addresses; its start then reports an address in use.
		if err = Until(ctx, 15*time.Second, func() error {
			if wrapped {
				return nil
			}
			return bindable(addrs)
		}); err != nil {
			return fmt.Errorf("restart %s: %w", p.cfg.Name, err)
		}
		if err = p.run(ctx); err == nil || !errors.Is(err, errAddrInUse) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("restart %s: %w", p.cfg.Name, err)
	}
	return nil
}

// SetBin makes the next start (Restart) run another cairn binary on the same data and
// addresses: an upgrade or a downgrade of this node.
func (p *Proc) SetBin(bin string) {
	p.mu.Lock()
	p.cfg.Bin = bin
	p.mu.Unlock()
}

// bindable returns an error naming the first of addrs that cannot be listened on.
func bindable(addrs [3]string) error {
	for i, a := range addrs {
		if a == "off" || strings.HasSuffix(a, ":0") {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("the %s address %s is in use by another process: %w", [...]string{"S3", "admin", "node"}[i], a, err)
		}
		ln.Close()
	}
	return nil
}

// Stop sends SIGTERM (after SIGCONT, if paused) and waits for the exit; after
// cfg.StopTimeout it kills the process and returns an error wrapping ErrStopTimeout.
// It returns the exit's error: nil for a clean exit (status 0).
func (p *Proc) Stop() error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	select {
	case <-exited:
		p.mu.Unlock()
		return fmt.Errorf("%s is not running (it exited: %s)", p.cfg.Name, exitString(p.waitErr))
	default:
	}
	p.expected = true
	if p.paused {
		cmd.Process.Signal(syscall.SIGCONT)
		p.paused = false
	}
	cmd.Process.Signal(syscall.SIGTERM)
	p.mu.Unlock()
	t := time.NewTimer(p.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-exited:
		return p.ExitErr()
	case <-t.C:
		p.Kill()
		return fmt.Errorf("%s: %w after %s", p.cfg.Name, ErrStopTimeout, p.cfg.StopTimeout)
	}
}

// Kill sends SIGKILL and waits for the process to be gone; it does nothing if the
// process is not running.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return
	}
	select {
	case <-exited:
	default:
		p.expected = true
		cmd.Process.Signal(syscall.SIGKILL)
	}
	p.mu.Unlock()
	<-exited
}

// Signal sends sig to the running process. SIGSTOP and SIGCONT are noted: Stop resumes
// a paused process first.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("%s is not running", p.cfg.Name)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cmd.Process.Signal(sig)
}

// Pause stops the process (SIGSTOP): its sockets accept connections but nothing answers.
func (p *Proc) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

// Running reports whether the process is alive (possibly paused).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

func (p *Proc) runningLocked() bool {
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the current process exits.
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// ExitErr is the error of the last exit (nil: status 0, or still running).
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// ProcessState is that of the last process once it has exited (its resource usage), or
// nil.
func (p *Proc) ProcessState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.runningLocked() {
		return nil
	}
	return p.cmd.ProcessState
}

// Info returns the ready file of the current (or last) process.
func (p *Proc) Info() Ready {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

// S3Addr, AdminAddr and NodeAddr are the addresses the process bound ("" for an admin
// address that is off); URL is the S3 endpoint, http://S3Addr (https:// when the process
// serves TLS), and AdminURL the admin address's.
func (p *Proc) S3Addr() string    { return p.Info().S3 }
func (p *Proc) AdminAddr() string { return p.Info().Admin }
func (p *Proc) NodeAddr() string  { return p.Info().Node }
func (p *Proc) NBDAddr() string   { return p.Info().NBD }
func (p *Proc) URL() string       { return p.scheme() + p.S3Addr() }
func (p *Proc) AdminURL() string  { return p.scheme() + p.AdminAddr() }

func (p *Proc) scheme() string {
	if p.Info().TLS {
		return "https://"
	}
	return "http://"
}

// NodeID is the node's id; PID the process id of the current (or last) process.
func (p *Proc) NodeID() string { return p.Info().NodeID }
func (p *Proc) PID() int       { return p.Info().PID }

// Name, DataDir and LogPath are those of the configuration (defaults applied).
func (p *Proc) Name() string    { return p.cfg.Name }
func (p *Proc) DataDir() string { return p.cfg.DataDir }
func (p *Proc) LogPath() string { return p.cfg.LogPath }

// Args returns the arguments of the current (or last) process, without the binary.
func (p *Proc) Args() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.args...)
}

// Output returns the whole log, every start included.
func (p *Proc) Output() string {
	data, _ := os.ReadFile(p.cfg.LogPath)
	return string(data)
}

// LogTail returns the last n lines of the log.
func (p *Proc) LogTail(n int) string { return lastLines(p.Output(), n) }

// runLog is the log of the current (or last) process.
func (p *Proc) runLog() string {
	out := p.Output()
	p.mu.Lock()
	from := int(p.logFrom)
	p.mu.Unlock()
	if from <= len(out) {
		out = out[from:]
	}
	return out
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
