package bench

import (
	"cmp"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Config is one benchmark run. Zero fields take the workload's defaults (see WorkloadHelp);
// Validate fills them in.
type Config struct {
	// Workload names what to run: one of WorkloadNames.
	Workload string
	// Endpoint is the S3 endpoint, http://host:port or https://host. Requests are
	// path-style and signed with SigV4 (UNSIGNED-PAYLOAD).
	Endpoint  string
	AccessKey string
	SecretKey string
	// Region is the SigV4 signing region (default us-east-1).
	Region string
	// Bucket holds the run's objects. An existing bucket is used as it is; a missing one
	// is created and deleted at the end. Empty: a new bucket named cairn-bench-<time>-<random>.
	Bucket string
	// Prefix starts every key the run writes or reads (default "cairn-bench/").
	Prefix string

	// Duration is the length of each measured phase: of each level for spreadshirt-4k, of
	// each repetition for the ClawIO workloads. Zero: the workload's default (for delete:
	// until every object is gone), unless Ops is set.
	Duration time.Duration
	// Ops bounds each measured phase by a number of operations instead of a duration.
	Ops int64
	// Concurrency is the number of clients (concurrent requests).
	Concurrency int
	// Levels are the concurrencies of spreadshirt-4k and the ClawIO workloads.
	Levels []int
	// Reps is how often each level is measured.
	Reps int
	// Keys is the number of objects prepared (or, for clawio-upload, of target keys).
	Keys int
	// Size is the object size or size distribution: "4KiB", "leofs", "afs", "clawio" or
	// ranges such as "1KiB-10KiB:24,10KiB-100KiB:30" (see ParseDist).
	Size string
	// MaxSize caps the sizes drawn: larger ones are redrawn, so the sizes below the cap
	// keep their relative shares (0: the workload's default, 64 MiB for afs-sizes, no cap
	// for the others).
	MaxSize int64
	// ReadRatio is the share of GETs in the mixed workload (0 to 1; 0 means only PUTs).
	// The LeoFS workloads fix their own.
	ReadRatio float64
	// PageSize is the max-keys of a listing page (default 1000).
	PageSize int
	// Seed makes key choice and sizes reproducible (0: one below 10^9 is chosen and
	// reported; the JSON report holds seeds exactly up to 2^53).
	Seed uint64
	// Keep leaves the objects (and a created bucket) in place.
	Keep bool
	// NoPrepare reads the objects already under Prefix instead of writing a fresh set
	// (for get, head, list, mixed, delete and the workloads built on them).
	NoPrepare bool
	// NoVerify skips comparing GET bodies with what was written (their length is
	// always checked).
	NoVerify bool
	// Timeout bounds each request (default 5m).
	Timeout time.Duration
	// Insecure skips TLS certificate verification.
	Insecure bool
	// RootCAs, if set, are the only CAs trusted for an https endpoint (default: the
	// system's).
	RootCAs *x509.CertPool `json:"-"`

	// Version is the bench tool's version, for the report.
	Version string
	// Live rewrites the progress line in place (for a terminal); otherwise a plain line is
	// written every ProgressEvery (default 5s).
	Live          bool
	ProgressEvery time.Duration

	dist *Dist // parsed Size
}

// Validate fills in the workload's defaults and reports the first invalid setting. The
// messages name the command-line flags.
func (c *Config) Validate() error {
	wl, ok := lookupWorkload(c.Workload)
	if !ok {
		return fmt.Errorf("unknown workload %q (want one of %s)", c.Workload, strings.Join(WorkloadNames(), ", "))
	}
	if err := c.validateTarget(); err != nil {
		return err
	}
	if err := c.validateLoad(wl); err != nil {
		return err
	}
	return c.validateSizes(wl)
}

func (c *Config) validateTarget() error {
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("bad --endpoint %q: want http://host:port or https://host", c.Endpoint)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return fmt.Errorf("missing credentials: set --access-key and --secret-key")
	}
	c.Region = cmp.Or(c.Region, "us-east-1")
	if c.Prefix == "" {
		c.Prefix = "cairn-bench/"
	}
	if c.Bucket == "" {
		var b [4]byte
		rand.Read(b[:])
		c.Bucket = fmt.Sprintf("cairn-bench-%d-%s", time.Now().Unix(), hex.EncodeToString(b[:]))
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Minute
	}
	if c.Timeout < 0 {
		return fmt.Errorf("bad --timeout %s", c.Timeout)
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 5 * time.Second
	}
	return nil
}

func (c *Config) validateLoad(wl *workload) error {
	switch {
	case c.Duration < 0:
		return fmt.Errorf("bad --duration %s", c.Duration)
	case c.Ops < 0:
		return fmt.Errorf("bad --ops %d", c.Ops)
	case c.Duration > 0 && c.Ops > 0:
		return fmt.Errorf("--duration and --ops exclude each other")
	case c.Duration == 0 && c.Ops == 0:
		c.Duration = wl.duration
	}
	if wl.levels != nil {
		if err := c.validateLevels(wl); err != nil {
			return err
		}
	}
	if c.Concurrency == 0 {
		c.Concurrency = wl.concurrency
	}
	if c.Concurrency < 1 || c.Concurrency > 10000 {
		return fmt.Errorf("bad --concurrency %d (want 1 to 10000)", c.Concurrency)
	}
	if wl.keys > 0 {
		c.Keys = cmp.Or(c.Keys, wl.keys)
		if c.Keys < 1 {
			return fmt.Errorf("bad --keys %d", c.Keys)
		}
	}
	if c.ReadRatio < 0 || c.ReadRatio > 1 || math.IsNaN(c.ReadRatio) {
		return fmt.Errorf("bad --read-ratio %g (want 0 to 1)", c.ReadRatio)
	}
	c.PageSize = cmp.Or(c.PageSize, 1000)
	if c.PageSize < 1 || c.PageSize > 1000 {
		return fmt.Errorf("bad --page-size %d (want 1 to 1000)", c.PageSize)
	}
	if c.NoPrepare && !wl.readsData {
		return fmt.Errorf("--no-prepare: %s writes its own objects", wl.name)
	}
	if c.Seed == 0 { // short, so that it is easy to type and exact as a JSON number
		c.Seed = uint64(time.Now().UnixNano()%999_999_999) + 1
	}
	return nil
}

// validateLevels fills in the levels of a workload that has them: --concurrency alone
// means that one level.
func (c *Config) validateLevels(wl *workload) error {
	switch {
	case c.Levels == nil && c.Concurrency > 0:
		c.Levels = []int{c.Concurrency}
	case c.Levels == nil:
		c.Levels = wl.levels
	}
	c.Reps = cmp.Or(c.Reps, wl.reps)
	for _, l := range c.Levels {
		if l < 1 || l > 10000 {
			return fmt.Errorf("bad --levels: %d (want concurrencies from 1 to 10000)", l)
		}
	}
	if len(c.Levels) == 0 || c.Reps < 1 {
		return fmt.Errorf("bad --levels or --reps: need at least one level and one repetition")
	}
	c.Concurrency = slices.Max(c.Levels)
	return nil
}

func (c *Config) validateSizes(wl *workload) error {
	c.Size = cmp.Or(c.Size, wl.size)
	d, err := ParseDist(c.Size)
	if err != nil {
		return fmt.Errorf("bad --size %q: %v; want e.g. 4KiB, 16MiB, leofs, afs, clawio or 1KiB-10KiB:24,10KiB-100KiB:30", c.Size, err)
	}
	c.dist = d
	if c.MaxSize == 0 {
		c.MaxSize = wl.maxSize
	}
	if c.MaxSize < 0 {
		return fmt.Errorf("bad --max-size %d", c.MaxSize)
	}
	if c.MaxSize > 0 && d.ShareAbove(c.MaxSize) > 0.99 {
		return fmt.Errorf("--max-size %s leaves (almost) no sizes of --size %s", FormatSize(c.MaxSize), c.Size)
	}
	if c.MaxSize == 0 && d.Max() > 64*GiB {
		return fmt.Errorf("--size %s reaches %s: set --max-size", c.Size, FormatSize(d.Max()))
	}
	return nil
}
