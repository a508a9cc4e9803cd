// Command soak is a randomized, seeded fault soak of a loopback cairn cluster: clients
// write, overwrite, delete and read while nodes are killed (SIGKILL) and restarted, paused
// (SIGSTOP) and resumed, and have their disk filled; at the end, after healing, a checker
// verifies every acknowledged write is present with full redundancy and no deleted object
// came back. See docs/soak.md.
//
//	go run ./tools/soak --cairn bin/cairn [--nodes 5] [--replicas 3] [--duration 60s] [--seed N]
//	go run ./tools/soak --cairn bin/cairn --nodes 6 --class ec:4+2   # half the PUTs erasure-coded
//
// The seed is printed first; the same seed gives the same sequence of operations, keys,
// sizes, faults and victims (the timing, and so the interleaving, differs between runs).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the soak's flags.
type config struct {
	cairn        string
	nodes        int
	replicas     int
	readQuorum   int // 0: the class default (R = 1)
	duration     time.Duration
	seed         uint64
	dir          string
	maxFaulty    int
	faults       []string
	clients      int
	multipart    int // percent of operations that are multipart uploads (as many again retry finished ones)
	keys         int
	maxSize      int
	tmpfsSize    string
	downAfter    time.Duration
	syncInterval time.Duration
	healTimeout  time.Duration
	clientTO     time.Duration
	sabotage     bool
	// versioned is --versioned: the bucket has versioning enabled, and the final check
	// also reads every acknowledged version by its id.
	versioned bool
	// class is --class: "" (every write STANDARD), "ec:K+M" or "copies:N". With it, the
	// soak creates the storage class SOAK (classK data and classM parity shards, or
	// classCopies copies) and writes about half of its PUTs into it.
	class       string
	classK      int
	classM      int
	classCopies int
}

// soakClass is the name of the storage class --class creates.
const soakClass = "SOAK"

var faultKinds = []string{"kill", "pause", "diskfull"}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	fs.StringVar(&c.cairn, "cairn", "bin/cairn", "cairn binary")
	fs.IntVar(&c.nodes, "nodes", 5, "cluster size")
	fs.IntVar(&c.replicas, "replicas", 3, "copies of each object (N); W and D are a majority of N")
	fs.IntVar(&c.readQuorum, "r", 0, "read quorum R (0: the class default, 1); with W+R > N reads are also checked for freshness")
	fs.DurationVar(&c.duration, "duration", 60*time.Second, "how long clients run under faults (healing and checking come after)")
	seed := fs.Uint64("seed", 0, "random seed (default: from the clock; printed first)")
	fs.StringVar(&c.dir, "dir", "", "directory for data and logs (default: a new temporary directory, removed on success)")
	fs.IntVar(&c.maxFaulty, "max-faulty", 1, "most nodes faulty at once")
	faults := fs.String("faults", strings.Join(faultKinds, ","), "fault kinds to inject: kill, pause, diskfull (comma-separated; empty: none)")
	fs.IntVar(&c.clients, "clients", 4, "concurrent clients")
	fs.IntVar(&c.keys, "keys", 200, "size of the key space")
	fs.IntVar(&c.multipart, "multipart", 2, "percent of operations that are multipart uploads of 5 MiB and a bit (as many again retry a finished upload's Complete or UploadPart, as a client after a timeout would)")
	maxSize := fs.String("max-size", "256KiB", "largest object written (6MiB with --class, so that some objects span stripes)")
	fs.StringVar(&c.class, "class", "", "also write about half of the PUTs into a storage class SOAK: ec:K+M (erasure-coded) or copies:N (replicated); empty: every write STANDARD")
	fs.StringVar(&c.tmpfsSize, "tmpfs-size", "1g", "size of each node's tmpfs data mount (mount(8) syntax); the index's preallocated write-ahead logs take about 250 MiB")
	fs.DurationVar(&c.downAfter, "down-after", 2*time.Second, "server --down-after")
	fs.DurationVar(&c.syncInterval, "sync-interval", 20*time.Second, "server --sync-interval (anti-entropy rounds; healing waits for one)")
	fs.DurationVar(&c.healTimeout, "heal-timeout", 3*time.Minute, "how long healing and convergence may take after the faults stop")
	fs.DurationVar(&c.clientTO, "client-timeout", 10*time.Second, "S3 request timeout")
	fs.BoolVar(&c.versioned, "versioned", false, "enable versioning on the bucket; the final check also reads every acknowledged version by its version id (none may be lost)")
	fs.BoolVar(&c.sabotage, "sabotage", false, "self-test of the checker: after healing, change three keys behind its back; the run must fail")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.seed = *seed
	if !flagSet(fs, "seed") {
		c.seed = uint64(time.Now().UnixNano())
	}
	if c.class != "" && !flagSet(fs, "max-size") {
		*maxSize = "6MiB"
	}
	n, err := parseSize(*maxSize)
	if err != nil {
		return nil, fmt.Errorf("--max-size: %v", err)
	}
	c.maxSize = int(n)
	for _, f := range strings.Split(*faults, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		known := false
		for _, k := range faultKinds {
			known = known || k == f
		}
		if !known {
			return nil, fmt.Errorf("--faults: unknown fault %q (want kill, pause, diskfull)", f)
		}
		c.faults = append(c.faults, f)
	}
	switch {
	case c.nodes < 1:
		return nil, fmt.Errorf("--nodes %d: want at least 1", c.nodes)
	case c.replicas < 1 || c.replicas > c.nodes:
		return nil, fmt.Errorf("--replicas %d: want 1 to --nodes (%d)", c.replicas, c.nodes)
	case c.readQuorum < 0 || c.readQuorum > c.replicas:
		return nil, fmt.Errorf("--r %d: want 0 to --replicas (%d)", c.readQuorum, c.replicas)
	case c.maxFaulty < 0 || c.maxFaulty > c.nodes:
		return nil, fmt.Errorf("--max-faulty %d: want 0 to --nodes", c.maxFaulty)
	case c.clients < 1 || c.keys < 1:
		return nil, fmt.Errorf("--clients and --keys must be positive")
	case c.multipart < 0 || c.multipart > 20:
		return nil, fmt.Errorf("--multipart %d: want 0 to 20 (percent)", c.multipart)
	}
	if err := c.parseClass(); err != nil {
		return nil, fmt.Errorf("--class %s: %v", c.class, err)
	}
	return c, nil
}

// parseClass parses --class and checks it against the cluster size and the faults.
func (c *config) parseClass() error {
	if c.class == "" {
		return nil
	}
	kind, spec, _ := strings.Cut(c.class, ":")
	switch kind {
	case "ec":
		ks, ms, ok := strings.Cut(spec, "+")
		k, err1 := strconv.Atoi(ks)
		m, err2 := strconv.Atoi(ms)
		if !ok || err1 != nil || err2 != nil || k < 1 || m < 1 {
			return fmt.Errorf("want ec:K+M with K and M at least 1, e.g. ec:4+2")
		}
		c.classK, c.classM = k, m
		if c.nodes < k+m {
			return fmt.Errorf("%d+%d shards need %d nodes, --nodes is %d", k, m, k+m, c.nodes)
		}
		if c.maxFaulty > m {
			return fmt.Errorf("--max-faulty %d: more than the %d parity shards a stripe can lose", c.maxFaulty, m)
		}
	case "copies":
		n, err := strconv.Atoi(spec)
		if err != nil || n < 1 {
			return fmt.Errorf("want copies:N with N at least 1, e.g. copies:3")
		}
		c.classCopies = n
		if c.nodes < n {
			return fmt.Errorf("%d copies need %d nodes, --nodes is %d", n, n, c.nodes)
		}
	default:
		return fmt.Errorf("want ec:K+M or copies:N")
	}
	return nil
}

// classArgs are the arguments of `cairn admin class create` for --class.
func (c *config) classArgs() []string {
	if c.classK > 0 {
		return []string{"class", "create", soakClass, "--ec", fmt.Sprintf("%d+%d", c.classK, c.classM)}
	}
	return []string{"class", "create", soakClass, "--replicas", fmt.Sprint(c.classCopies)}
}

// classLayout is how `cairn admin placement` describes the layout of an object of the
// class SOAK (a prefix of it, for copies).
func (c *config) classLayout() string {
	if c.classK > 0 {
		return fmt.Sprintf("EC %d+%d", c.classK, c.classM)
	}
	return fmt.Sprintf("%d copies of ", c.classCopies)
}

// describeClass is the class part of the run's description.
func (c *config) describeClass() string {
	switch {
	case c.classK > 0:
		return fmt.Sprintf("half the PUTs in class %s (EC %d+%d)", soakClass, c.classK, c.classM)
	case c.classCopies > 0:
		return fmt.Sprintf("half the PUTs in class %s (%d copies)", soakClass, c.classCopies)
	}
	return "every PUT STANDARD"
}

func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// w is the write (and delete) quorum the cluster uses: a majority of N.
func (c *config) w() int { return c.replicas/2 + 1 }

// r is the read quorum in force.
func (c *config) r() int { return max(c.readQuorum, 1) }

// fresh reports whether reads must see every write acknowledged before they started.
func (c *config) fresh() bool { return c.w()+c.r() > c.replicas }

// reproduce is the command line that repeats this run's choices.
func (c *config) reproduce() string {
	s := fmt.Sprintf("go run ./tools/soak --cairn %s --nodes %d --replicas %d --duration %s --seed %d", c.cairn, c.nodes, c.replicas, c.duration, c.seed)
	if c.readQuorum > 0 {
		s += fmt.Sprintf(" --r %d", c.readQuorum)
	}
	if c.class != "" {
		s += " --class " + c.class
	}
	if c.sabotage {
		s += " --sabotage"
	}
	if c.maxFaulty != 1 {
		s += fmt.Sprintf(" --max-faulty %d", c.maxFaulty)
	}
	if strings.Join(c.faults, ",") != strings.Join(faultKinds, ",") {
		s += " --faults " + strings.Join(c.faults, ",")
	}
	return s
}

// run is the whole program; it returns the exit code: 0 when every check passed, 1 on a
// violation, 2 when the soak could not run.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 2
	}
	fmt.Fprintf(stdout, "soak: seed %d\n", cfg.seed)
	lg := newLogger(stdout)
	if cfg.cairn, err = filepath.Abs(cfg.cairn); err == nil {
		_, err = os.Stat(cfg.cairn)
	}
	if err != nil {
		lg.printf("cannot use the cairn binary: %v (build it with: go build -o bin/cairn ./cmd/cairn)", err)
		return 2
	}
	ownDir := cfg.dir == ""
	if ownDir {
		if cfg.dir, err = os.MkdirTemp("", "cairn-soak-"); err != nil {
			lg.printf("%v", err)
			return 2
		}
	} else if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		lg.printf("%v", err)
		return 2
	}
	lg.printf("%d nodes, N=%d W=%d R=%d, %d clients on %d keys, %s, objects up to %d KiB, %s of faults (%s, at most %d node(s) at once); data and logs in %s",
		cfg.nodes, cfg.replicas, cfg.w(), cfg.r(), cfg.clients, cfg.keys, cfg.describeClass(), cfg.maxSize>>10, cfg.duration, strings.Join(cfg.faults, ", "), cfg.maxFaulty, cfg.dir)

	s := &soak{cfg: cfg, log: lg}
	code := s.run(ctx)
	keep := code != 0
	s.cl.shutdown(!keep, keep)
	if keep {
		lg.printf("FAIL (seed %d): data and logs kept in %s", cfg.seed, cfg.dir)
		lg.printf("reproduce: %s", cfg.reproduce())
		return code
	}
	if ownDir {
		os.RemoveAll(cfg.dir)
	}
	lg.printf("PASS (seed %d)", cfg.seed)
	return 0
}

// logger prints timestamped lines (wall clock, to match the nodes' logs, and time since start).
type logger struct {
	w     io.Writer
	start time.Time
}

func newLogger(w io.Writer) *logger { return &logger{w: w, start: time.Now()} }

func (l *logger) printf(format string, args ...any) {
	now := time.Now()
	fmt.Fprintf(l.w, "%s +%6.1fs  %s\n", now.Format("15:04:05.000"), now.Sub(l.start).Seconds(), fmt.Sprintf(format, args...))
}

// parseSize parses a byte count with an optional KiB, MiB or GiB suffix.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || n < 0 || fmt.Sprint(n) != strings.TrimSpace(s) {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}
