package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// allPhases are the phases in the order they run.
var allPhases = []string{"bare-get", "bare-put", "put-4k", "get-4k", "put-16m", "get-16m"}

// config is the parsed command line.
type config struct {
	cairnBin     string
	dir          string
	endpoint     string
	accessKey    string
	secretKey    string
	region       string
	duration     time.Duration
	timeout      time.Duration
	startTimeout time.Duration
	smallClients int
	largeClients int
	smallSize    int64
	largeSize    int64
	verify       int
	hotLarge     int
	jsonPath     string
	phases       []string
	tls          bool
}

func (c *config) has(phase string) bool { return slices.Contains(c.phases, phase) }

// sizeFlag is a byte count written as 4096, 4KiB, 4k, 16MiB or 16m.
type sizeFlag struct{ p *int64 }

func (s sizeFlag) String() string {
	if s.p == nil {
		return ""
	}
	return formatSize(*s.p)
}

func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s.p = n
	return nil
}

func parseSize(v string) (int64, error) {
	num := strings.TrimRight(v, "KMGiBkmgb")
	unit := strings.ToLower(v[len(num):])
	mult := map[string]int64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1 << 10,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gib": 1 << 30, "gb": 1 << 30}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || mult == 0 || n <= 0 {
		return 0, fmt.Errorf("bad size %q (want e.g. 4096, 4KiB, 16MiB)", v)
	}
	return n * mult, nil
}

func formatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// parseFlags parses args; it returns flag.ErrHelp for -h.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{smallSize: 4 << 10, largeSize: 16 << 20}
	fs := flag.NewFlagSet("s3bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported in one line by main
	fs.StringVar(&c.cairnBin, "cairn", "bin/cairn", "cairn binary to start (ignored with --endpoint)")
	fs.StringVar(&c.dir, "dir", os.TempDir(), "where the started server's temporary data directory goes")
	fs.StringVar(&c.endpoint, "endpoint", "", "bench this running S3 server (http://host:port) instead of starting cairn")
	fs.StringVar(&c.accessKey, "access-key", "", "access key for --endpoint")
	fs.StringVar(&c.secretKey, "secret-key", "", "secret key for --endpoint")
	fs.StringVar(&c.region, "region", "us-east-1", "region requests are signed for")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "duration of each phase")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "timeout of one request")
	fs.DurationVar(&c.startTimeout, "start-timeout", 30*time.Second, "how long the started server may take to become ready")
	fs.IntVar(&c.smallClients, "small-clients", 16, "concurrent clients of the small-object and bare phases")
	fs.IntVar(&c.largeClients, "large-clients", 4, "concurrent clients of the large-object phases")
	fs.Var(sizeFlag{&c.smallSize}, "small-size", "size of small objects and of the bare server's GET body")
	fs.Var(sizeFlag{&c.largeSize}, "large-size", "size of large objects")
	fs.IntVar(&c.verify, "verify", 100, "GETs per phase whose body is compared with what was PUT")
	fs.IntVar(&c.hotLarge, "hot-large", 0, "large GETs read only this many of the written objects (0: all); a set that fits in RAM measures warm reads")
	fs.StringVar(&c.jsonPath, "json", "", "also write all figures as JSON to this file")
	fs.BoolVar(&c.tls, "tls", false, "then run the cairn phases again against a second started node serving HTTPS (a throwaway CA), as PHASE-tls, with HTTPS/HTTP ratios")
	phases := fs.String("phases", "all", "comma-separated phases: "+strings.Join(allPhases, ","))
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stderr, "Usage: go run ./tools/s3bench [flags]\n\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if c.phases, err = parsePhases(*phases); err != nil {
		return nil, err
	}
	return c, c.validate()
}

func parsePhases(v string) ([]string, error) {
	if v == "all" || v == "" {
		return allPhases, nil
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPhases, p) {
			return nil, fmt.Errorf("unknown phase %q (known: %s)", p, strings.Join(allPhases, ","))
		}
		out = append(out, p)
	}
	// Run in the canonical order: GET phases read what the PUT phases wrote.
	return slices.DeleteFunc(slices.Clone(allPhases), func(p string) bool { return !slices.Contains(out, p) }), nil
}

func (c *config) validate() error {
	switch {
	case c.duration <= 0 || c.timeout <= 0 || c.startTimeout <= 0:
		return errors.New("--duration, --timeout and --start-timeout must be positive")
	case c.smallClients < 1 || c.largeClients < 1:
		return errors.New("--small-clients and --large-clients must be at least 1")
	case c.endpoint != "" && c.tls:
		return errors.New("--tls starts its own HTTPS node: not with --endpoint (give it an https:// endpoint instead)")
	case c.endpoint != "" && (c.accessKey == "" || c.secretKey == ""):
		return errors.New("--endpoint needs --access-key and --secret-key")
	case c.endpoint != "" && !strings.HasPrefix(c.endpoint, "http://") && !strings.HasPrefix(c.endpoint, "https://"):
		return fmt.Errorf("--endpoint %q: want http://host:port", c.endpoint)
	}
	c.endpoint = strings.TrimRight(c.endpoint, "/")
	return nil
}
