package proc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the fake cairn the tests start: with PROC_FAKE set it serves
// like `cairn server` does as far as this package can tell (listeners, ready file,
// SIGTERM), in the way PROC_FAKE says.
func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv("PROC_FAKE"); ok {
		os.Exit(fakeServer(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeServer(mode string, args []string) int {
	if len(args) == 0 || args[0] != "server" {
		fmt.Fprintln(os.Stderr, "fake: want the server command")
		return 2
	}
	fs := flag.NewFlagSet("fake", flag.ContinueOnError)
	data := fs.String("data", "", "")
	listen := fs.String("listen", "", "")
	admin := fs.String("admin-listen", "", "")
	node := fs.String("node-addr", "", "")
	ready := fs.String("ready-file", "", "")
	fs.Bool("extra", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "fake: giving up at once")
		return 3
	case "hang":
		select {}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	r := Ready{PID: os.Getpid(), DataDir: *data, NodeID: "fake"}
	for _, l := range []struct {
		addr *string
		out  *string
	}{{listen, &r.S3}, {admin, &r.Admin}, {node, &r.Node}} {
		if *l.addr == "off" {
			continue
		}
		ln, err := net.Listen("tcp", *l.addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake:", err)
			return 1
		}
		*l.out = ln.Addr().String()
	}
	if err := WriteReadyFile(*ready, r); err != nil {
		fmt.Fprintln(os.Stderr, "fake:", err)
		return 1
	}
	fmt.Println("fake: serving")
	for range sigs {
		if mode != "ignore-term" {
			fmt.Println("fake: stopped cleanly")
			return 0
		}
	}
	return 0
}

func fakeConfig(t *testing.T, mode string) Config {
	return Config{Bin: os.Args[0], Name: "fake", Dir: t.TempDir(), Env: []string{"PROC_FAKE=" + mode},
		StartTimeout: 10 * time.Second, StopTimeout: 10 * time.Second}
}

func TestStartRestartStop(t *testing.T) {
	p, err := Start(context.Background(), fakeConfig(t, "serve"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	first := p.Info()
	for _, a := range []string{first.S3, first.Admin, first.Node} {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "0" {
			t.Fatalf("address %q from the ready file: %v", a, err)
		}
	}
	if first.PID == 0 || !p.Running() || p.URL() != "http://"+first.S3 || p.DataDir() != filepath.Join(filepath.Dir(p.LogPath()), "fake") {
		t.Fatalf("info %+v, running %v, url %s, data %s", first, p.Running(), p.URL(), p.DataDir())
	}
	if err := p.Restart(context.Background(), "--extra"); err != nil {
		t.Fatal(err)
	}
	again := p.Info()
	if again.S3 != first.S3 || again.Admin != first.Admin || again.Node != first.Node || again.PID == first.PID {
		t.Fatalf("restart: %+v, was %+v: want the same addresses, another process", again, first)
	}
	if args := strings.Join(p.Args(), " "); !strings.Contains(args, "--listen "+first.S3) || !strings.HasSuffix(args, "--extra") {
		t.Fatalf("restart arguments: %s", args)
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if p.Running() {
		t.Fatal("running after Stop")
	}
	out := p.Output()
	if strings.Count(out, "fake: serving") != 2 || !strings.Contains(out, "fake: stopped cleanly") || !strings.Contains(out, "=== proc: start 2 of fake") {
		t.Fatalf("log:\n%s", out)
	}
	if err := p.Stop(); err == nil {
		t.Fatal("Stop of a stopped process succeeded")
	}
}

func TestExitBeforeReady(t *testing.T) {
	start := time.Now()
	_, err := Start(context.Background(), fakeConfig(t, "exit"))
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready (exit status 3)") || !strings.Contains(err.Error(), "giving up at once") {
		t.Fatalf("err = %v; want the exit and the log's end", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the exit was noticed after %s", d)
	}
}

func TestStartTimeout(t *testing.T) {
	cfg := fakeConfig(t, "hang")
	cfg.StartTimeout = 300 * time.Millisecond
	_, err := Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Fatalf("err = %v", err)
	}
}

func TestStopTimeoutKills(t *testing.T) {
	cfg := fakeConfig(t, "ignore-term")
	cfg.StopTimeout = 300 * time.Millisecond
	p, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); !errors.Is(err, ErrStopTimeout) {
		t.Fatalf("stop: %v, want ErrStopTimeout", err)
	}
	if p.Running() {
		t.Fatal("still running")
	}
}

// A restart whose address another process took fails, naming the address.
func TestRestartAddressTaken(t *testing.T) {
	p, err := Start(context.Background(), fakeConfig(t, "serve"))
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	ln, err := net.Listen("tcp", p.S3Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err = p.Restart(ctx)
	if err == nil || !strings.Contains(err.Error(), "the S3 address "+p.S3Addr()+" is in use by another process") {
		t.Fatalf("err = %v", err)
	}
}

func TestOnExitPauseResume(t *testing.T) {
	var exits atomic.Int32
	cfg := fakeConfig(t, "serve")
	cfg.OnExit = func(*Proc, error) { exits.Add(1) }
	p, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := Until(context.Background(), 5*time.Second, func() error { return procState(p.PID(), 'T') }); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := Until(context.Background(), 5*time.Second, func() error { return procState(p.PID(), 'S') }); err != nil {
		t.Fatal(err)
	}
	p.Kill() // told to exit: no OnExit
	if err := p.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(p.PID(), syscall.SIGKILL) // exits on its own
	if err := Until(context.Background(), 5*time.Second, func() error {
		if n := exits.Load(); n != 1 {
			return fmt.Errorf("OnExit called %d times", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if p.Running() || p.ExitErr() == nil {
		t.Fatalf("running %v, exit %v", p.Running(), p.ExitErr())
	}
}

// procState returns nil if process pid is in state want (/proc/PID/stat).
func procState(pid int, want byte) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return fmt.Errorf("bad stat %q", data)
	}
	if data[i+2] != want {
		return fmt.Errorf("state %c, want %c", data[i+2], want)
	}
	return nil
}

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(context.Background(), 5*time.Second, func() error {
		if n++; n < 3 {
			return fmt.Errorf("try %d", n)
		}
		return nil
	}); err != nil || n != 3 {
		t.Fatalf("err %v after %d tries", err, n)
	}
	last := errors.New("still not")
	err := Until(context.Background(), 50*time.Millisecond, func() error { return last })
	if !errors.Is(err, last) || !strings.Contains(err.Error(), "not so after 50ms") {
		t.Fatalf("timeout: %v", err)
	}
	n = 0
	stop := errors.New("stop")
	err = Until(context.Background(), 5*time.Second, func() error { n++; return Permanent(stop) })
	if err != stop || n != 1 {
		t.Fatalf("permanent: %v after %d tries", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Until(ctx, 5*time.Second, func() error { return last }); !errors.Is(err, context.Canceled) || !errors.Is(err, last) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestReadyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if _, err := ReadReadyFile(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no file: %v", err)
	}
	want := Ready{PID: 7, S3: "127.0.0.1:1", Node: "127.0.0.1:3", NodeID: "n", DataDir: "/d", Version: "v"}
	if err := WriteReadyFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReadyFile(path)
	if err != nil || got != want {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files left: %v", ents)
	}
}
