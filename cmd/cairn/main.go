// Command cairn is the one binary of the cairn storage system. Run "cairn help".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/sse"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
		v += " " + bi.GoVersion
	}
	return v
}

const usage = `cairn: distributed object and block storage.

Usage:
  cairn server [flags]   run a node (all roles; a complete single-node system by default)
  cairn admin COMMAND    cluster administration: status, nodes, placement, drain, remove ("cairn admin help")
  cairn volume COMMAND   block volumes: create, list, attach (NBD), resize, delete ("cairn volume help")
  cairn mdc COMMAND      multi-data-center replication: link, list, status, investigate ("cairn mdc help")
  cairn dev cluster      start a local multi-node cluster on loopback for trying things and tests
  cairn bench WORKLOAD   benchmark an S3 endpoint (cairn or another); "cairn bench -h" lists workloads
  cairn version          print the version
  cairn help             this text

Run "cairn server -h" for the server's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = runServer(os.Args[2:], os.Stdout, os.Stderr)
	case "bench":
		os.Exit(runBench(os.Args[2:], os.Stdout, os.Stderr))
	case "admin":
		err = runAdmin(os.Args[2:], os.Stdout, os.Stderr)
	case "volume":
		err = runVolume(os.Args[2:], os.Stdout, os.Stderr)
	case "mdc":
		err = runMDC(os.Args[2:], os.Stdout, os.Stderr)
	case "dev":
		err = runDev(os.Args[2:], os.Stdout, os.Stderr)
	case "version", "--version", "-version":
		fmt.Println("cairn", versionString())
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "cairn: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cairn:", err)
		os.Exit(1)
	}
}

// serverUsage heads `cairn server -h`; the flags and their defaults follow.
// mallocTrimInterval is how often the server hands the C allocator's free memory back to
// the kernel (trimMallocEvery).
const mallocTrimInterval = 10 * time.Second

const serverUsage = `Usage: cairn server [FLAGS]

Runs one cairn node: S3 on --listen, metrics, health and the admin API on --admin-listen,
the internode protocol (replicas, Raft) on --node-addr. Without --join it bootstraps a new
cluster, or restarts the member whose data is in --data.

Environment:
  CAIRN_ACCESS_KEY, CAIRN_SECRET_KEY
        the root user's S3 key (set both or neither); unset, a bootstrap generates one.
        The cluster map keeps it sealed with the cluster secret; every start prints it.
        More users and keys: cairn admin user, cairn admin key
  CAIRN_CLUSTER_SECRET
        the secret that signs every internode and admin message (at least 16 characters);
        --cluster-secret-file overrides it; unset on a bootstrap, one is generated and kept
        in DATA/cluster-secret (give it to joining nodes and to cairn admin)

Flags:
`

func runServer(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg server.Config
	fs.StringVar(&cfg.DataDir, "data", "./data", "data directory")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:9000", "S3 API address")
	fs.StringVar(&cfg.AdminListen, "admin-listen", "127.0.0.1:9001", `metrics (/metrics) and health (/health) address, or "off"`)
	fs.StringVar(&cfg.Region, "region", "us-east-1", "region reported to clients")
	fs.IntVar(&cfg.S3Limits.MaxConns, "max-conns", 0, "most open S3 connections (0: 8192, or half the open-file limit if lower); more are closed at once and counted in cairn_s3_connections_refused_total")
	fs.IntVar(&cfg.S3Limits.MaxConnsPerIP, "max-conns-per-ip", 0, "most open S3 connections from one client address (0: 512)")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve Go profiles (/debug/pprof/) on the admin address, without authentication: only on a loopback or management address")
	fs.StringVar(&cfg.AccessLog, "access-log", "", "append the S3 access log (one JSON line per request: user, key, operation, bucket, object key, status, bytes, client address; refused requests too) to FILE, or \"-\" for stdout; reopened on SIGHUP (log rotation); off by default")
	fs.DurationVar(&cfg.PresignMaxAge, "presign-max-age", 7*24*time.Hour, "longest validity accepted for a Signature Version 2 presigned URL (Version 4 allows 7 days at most)")
	fs.StringVar(&cfg.NBDListen, "nbd-listen", "", "serve block volumes over NBD on this address (off by default; e.g. 127.0.0.1:10809); an address that is not loopback needs --nbd-tls require or --nbd-allow")
	nbdAllow := fs.String("nbd-allow", "", "comma-separated networks (CIDR) NBD clients may connect from besides loopback (plain NBD has no authentication)")
	nbdTLS := fs.String("nbd-tls", "off", "NBD over TLS: off, or require (TLS 1.3 via NBD_OPT_STARTTLS before anything else, a client certificate of the cluster CA naming the volume: cairn volume client-cert; the node presents its internode certificate)")
	fs.DurationVar(&cfg.VolumeFreshWait, "volume-fresh-wait", 30*time.Second, "how long a volume I/O waits for this node's cluster map to be confirmed by the Raft leader when the last confirmation is over 2 s old (a node short of CPU); past it the I/O fails with EPERM")
	domains := fs.String("domain", "localhost", "comma-separated base domains for virtual-host-style requests (bucket.DOMAIN)")
	capacity := fs.String("capacity", "", "capacity of this node's storage the device class's water marks refer to (e.g. 500GiB; default: the data disk's size)")
	cacheSize := fs.String("cache-size", "64MiB", "index block cache (bounds the metadata memory; e.g. 16MiB, 1GiB)")
	volumeJournal := fs.String("volume-journal", "256MiB", "volume journal: the most bytes of replicated volumes' unsynced writes (NBD writes without FUA) held before they are applied; a write waits for room, it never fails (0: off, every volume write is synced before it is answered)")
	objectCache := fs.String("object-cache", "64MiB", "gateway object cache: memory for the bodies of small (up to 1 MiB) hot objects, served after a version check with the read quorum (0: off)")
	fs.DurationVar(&cfg.CacheLease, "object-cache-lease", 2*time.Second, "read lease the object cache asks the read quorum's holders for with each version check: while it lasts a hit needs no check, and a holder changing the object revokes it first (or waits it out if this gateway cannot be reached); at most 5s, 0: off (cluster feature level 11)")
	segmentSize := fs.String("segment-size", "256MiB", "size at which a segment file is sealed (compaction granularity)")
	fs.DurationVar(&cfg.Store.CompactInterval, "compact-interval", 30*time.Second, "how often compaction looks for segments to reclaim")
	fs.IntVar(&cfg.Store.SegmentSpares, "segment-spares", 8, "segment files emptied by compaction kept for new segments to reuse (writes into them need no block allocation; with any, compaction also runs whenever a segment is sealed; they are removed when free space falls to the reserve); 0: none")
	fs.StringVar(&cfg.NodeAddr, "node-addr", "127.0.0.1:0", "internode address (RPC and Raft) other nodes reach this node at")
	fs.StringVar(&cfg.Join, "join", "", "node address of any member of an existing cluster to join (empty: bootstrap a new cluster, or restart a member)")
	fs.DurationVar(&cfg.JoinTimeout, "join-timeout", 30*time.Second, "how long a joining node keeps trying to reach the cluster at --join (which may still be starting) before it gives up")
	fs.StringVar(&cfg.Zone, "zone", "", "failure domain of this node (data center or rack); replicas go to distinct zones")
	fs.StringVar(&cfg.DeviceClass, "device-class", "", "device class of this node's storage (e.g. ssd, hdd): storage classes with --device-class use only such nodes")
	fs.StringVar(&cfg.NodeID, "node-id", "", "node id (default: generated on first start and kept in DATA/node-id)")
	roles := fs.String("roles", "gateway,storage,manager", "comma-separated roles this node runs")
	fs.IntVar(&cfg.Replicas, "replicas", 3, "copies of STANDARD objects (N) for a new cluster; W and D are a majority of N, R is 1")
	fs.IntVar(&cfg.Partitions, "partitions", 4096, "partition count of a new cluster (fixed for its life)")
	placement := fs.String("placement", "v1", "placement version of a new cluster: v1 (weighted rendezvous) or v2 (bounded load: no node above 1.1 times its share; needs every node at this release or later, docs/placement-at-scale.md); fixed at bootstrap, ignored on a join")
	fs.IntVar(&cfg.Voters, "voters", 3, "voting managers kept in the Raft group (odd)")
	secretFile := fs.String("cluster-secret-file", "", "file holding the cluster secret (default: $CAIRN_CLUSTER_SECRET, then DATA/cluster-secret)")
	fs.DurationVar(&cfg.DownAfter, "down-after", 5*time.Second, "a node silent this long is marked down (reads and writes route around it)")
	fs.DurationVar(&cfg.OutAfter, "out-after", 10*time.Minute, "a node down this long is marked out and its copies re-created on the others (-1s: never)")
	fs.DurationVar(&cfg.Store.AccessGranularity, "access-granularity", time.Hour, "how coarse the last-access times that order migration to a tier are (reads are noted in memory and written once per key and period)")
	fs.DurationVar(&cfg.TierCheck, "tier-check", 30*time.Second, "how often a storage node compares its use with its device class's water marks (and migrates to the tier past the high mark)")
	fs.DurationVar(&cfg.LifecycleInterval, "lifecycle-interval", 24*time.Hour, "each bucket's S3 lifecycle rules run once per interval on every storage node")
	fs.DurationVar(&cfg.ScrubInterval, "scrub-interval", 30*24*time.Hour, "every object is read in full and verified once per interval (deep scrub)")
	scrubRate := fs.String("scrub-rate", "32MiB", "deep scrub pace in bytes per second (0: unpaced)")
	fs.IntVar(&cfg.NotifyMaxAttempts, "notify-max-attempts", 0, "failed sends after which a bucket notification event becomes a dead letter (0: never, it waits for its target)")
	fs.DurationVar(&cfg.MDCInvestigate, "mdc-investigate", time.Hour, "how often each replication link's two clusters are compared and repaired (0: only on cairn mdc investigate)")
	fs.DurationVar(&cfg.NotifyHold, "notify-hold", 30*time.Second, "how long a holder that is not a key's first live holder keeps its notification events before asking whether the first holder has them")
	fs.DurationVar(&cfg.BucketLogInterval, "bucket-log-interval", time.Minute, "how often the S3 server access log records of buckets with logging enabled (PutBucketLogging) are delivered to their target buckets")
	fs.DurationVar(&cfg.BackgroundTarget, "background-target", 0, "client p99 latency above which background work (recovery, rebalance, shard moves, policy apply, scrub) backs off; 0: twice the p99 clients see while none runs, learned")
	recoveryRate := fs.String("recovery-rate", "64MiB", "bytes per second a node copies in to recover or rebalance (0: unlimited); cairn admin recovery set changes it")
	fs.DurationVar(&cfg.HintInterval, "hint-interval", time.Second, "how often replica writes queued for nodes that were away are retried")
	fs.DurationVar(&cfg.SyncInterval, "sync-interval", 10*time.Minute, "how often a node compares its partitions with their other holders and copies what it lacks (also on placement changes)")
	fs.StringVar(&cfg.TLS.CertFile, "tls-cert", "", "PEM certificate (chain) for HTTPS on the S3 and admin listeners (with --tls-key; both unset: plain HTTP); reloaded on SIGHUP and when the file changes")
	fs.StringVar(&cfg.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.DurationVar(&cfg.TLS.PollInterval, "tls-reload-interval", 5*time.Second, "how often --tls-cert and --tls-key are checked for a change (-1s: only on SIGHUP)")
	masterKeyFile := fs.String("master-key-file", "", "file of the master keys of SSE-S3 (lines \"NAME KEY\", KEY the base64 of 32 random bytes: openssl rand -base64 32); the last one encrypts new objects, all decrypt; outside --data; reloaded on SIGHUP. Losing a key loses the objects it encrypted: back the file up. Every gateway needs the same file. Unset: SSE-S3 is refused")
	internodeTLS := fs.String("internode-tls", "on", "a new cluster's internode traffic (RPC and Raft on --node-addr): on (mutual TLS with a cluster CA made at bootstrap, plain connections refused) or off (plain, authenticated by the cluster secret; cairn admin internode-tls enable turns TLS on later); only a bootstrap reads it")
	fs.StringVar(&cfg.Internode.CACertFile, "internode-ca-cert", "", "PEM certificate of the CA for internode certificates (with --internode-ca-key): a bootstrap uses it instead of making one; on a manager of an existing cluster, installs the key again")
	fs.StringVar(&cfg.Internode.CAKeyFile, "internode-ca-key", "", "PEM private key of --internode-ca-cert (kept in DATA/internode/ca.key, 0600, on nodes with the manager role only)")
	readyFile := fs.String("ready-file", "", "once the node serves, write this JSON file (atomically) with its pid, node id, data directory and bound addresses (S3, admin, node: the actual ports of listeners given port 0); removed at exit")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	fs.Usage = func() {
		fmt.Fprint(stderr, serverUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("server: unexpected argument %q", fs.Arg(0))
	}
	switch *nbdTLS {
	case "off":
	case "require":
		cfg.NBDTLS = true
	default:
		return fmt.Errorf("server: bad --nbd-tls %q (want off or require)", *nbdTLS)
	}
	switch *internodeTLS {
	case "on":
	case "off":
		cfg.Internode.Off = true
	default:
		return fmt.Errorf("server: bad --internode-tls %q (want on or off)", *internodeTLS)
	}
	if cfg.Internode.CAKeyFile != "" {
		cfg.SecretFiles = append(cfg.SecretFiles, cfg.Internode.CAKeyFile)
	}
	if cfg.LifecycleInterval <= 0 {
		return fmt.Errorf("server: bad --lifecycle-interval %s (want a positive duration, e.g. 24h)", cfg.LifecycleInterval)
	}
	var err error
	if cfg.ScrubRate, err = parseSize(*scrubRate); err != nil {
		return fmt.Errorf("server: bad --scrub-rate %q (want e.g. 32MiB)", *scrubRate)
	}
	if cfg.ScrubRate == 0 {
		cfg.ScrubRate = -1 // unpaced
	}
	if cfg.RecoveryRate, err = parseSize(*recoveryRate); err != nil {
		return fmt.Errorf("server: bad --recovery-rate %q (want e.g. 64MiB)", *recoveryRate)
	}
	if cfg.RecoveryRate == 0 {
		cfg.RecoveryRate = -1 // unlimited
	}
	if *capacity != "" {
		v, err := parseSize(*capacity)
		if err != nil || v <= 0 {
			return fmt.Errorf("server: bad --capacity %q (want e.g. 500GiB)", *capacity)
		}
		cfg.Capacity = v
	}
	cache, err := parseSize(*cacheSize)
	if err != nil || cache < 1<<20 {
		return fmt.Errorf("server: bad --cache-size %q (want e.g. 64MiB, at least 1MiB)", *cacheSize)
	}
	cfg.Store.CacheSize = cache
	if cfg.ObjectCache, err = parseSize(*objectCache); err != nil {
		return fmt.Errorf("server: bad --object-cache %q (want e.g. 256MiB, or 0 to disable)", *objectCache)
	}
	if cfg.CacheLease < 0 || cfg.CacheLease > 5*time.Second {
		return fmt.Errorf("server: bad --object-cache-lease %s (want 0 to 5s)", cfg.CacheLease)
	}
	if cfg.Store.JournalSize, err = parseSize(*volumeJournal); err != nil || cfg.Store.JournalSize < 0 || (cfg.Store.JournalSize > 0 && cfg.Store.JournalSize < 64<<20) {
		return fmt.Errorf("server: bad --volume-journal %q (want e.g. 256MiB, at least 64MiB, or 0 to sync every volume write)", *volumeJournal)
	}
	if cfg.Store.JournalSize == 0 {
		cfg.Store.JournalSize = -1
	}
	if cfg.Store.SegmentSize, err = parseSize(*segmentSize); err != nil || cfg.Store.SegmentSize < 1<<20 {
		return fmt.Errorf("server: bad --segment-size %q (want e.g. 256MiB, at least 1MiB)", *segmentSize)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("server: bad -log-level %q", *logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(stderr, hopts)
	if *logFormat == "json" {
		h = slog.NewJSONHandler(stderr, hopts)
	}
	cfg.Logger = slog.New(h)
	for _, a := range strings.Split(*nbdAllow, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return fmt.Errorf("--nbd-allow %s: a network in CIDR form (10.0.0.0/24): %w", a, err)
		}
		cfg.NBDAllow = append(cfg.NBDAllow, p)
	}
	var masterKeys *sse.Keyring
	if *masterKeyFile != "" {
		if masterKeys, err = loadMasterKeys(*masterKeyFile, cfg.DataDir); err != nil {
			return fmt.Errorf("server: --master-key-file: %w", err)
		}
		cfg.MasterKeys = masterKeys
		cfg.SecretFiles = append(cfg.SecretFiles, *masterKeyFile) // a warning if others can read it
	}
	for _, d := range strings.Split(*domains, ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Domains = append(cfg.Domains, strings.ToLower(d))
		}
	}
	switch *placement {
	case "v1", "1":
		cfg.Placement = 0 // the map leaves the version out, as before versions
	case "v2", "2":
		cfg.Placement = 2
	default:
		return fmt.Errorf("--placement %q: want v1 or v2", *placement)
	}
	cfg.Roles = nil
	for _, r := range strings.Split(*roles, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Roles = append(cfg.Roles, r)
		}
	}
	cfg.ClusterSecret = os.Getenv("CAIRN_CLUSTER_SECRET")
	if *secretFile != "" {
		data, err := os.ReadFile(*secretFile)
		if err != nil {
			return fmt.Errorf("server: --cluster-secret-file: %w", err)
		}
		cfg.ClusterSecret = strings.TrimSpace(string(data))
		cfg.SecretFiles = append(cfg.SecretFiles, *secretFile)
	}
	cfg.AccessKey = os.Getenv("CAIRN_ACCESS_KEY")
	cfg.SecretKey = os.Getenv("CAIRN_SECRET_KEY")
	if (cfg.TLS.CertFile == "") != (cfg.TLS.KeyFile == "") {
		return fmt.Errorf("server: --tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cfg.TLS.Enabled() || (cfg.AccessLog != "" && cfg.AccessLog != "-") || masterKeys != nil {
		// SIGHUP reloads the certificate and the master keys and reopens the access log
		// (without any of them it keeps its default: exit).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		var targets []chan struct{}
		if cfg.TLS.Enabled() {
			reload := make(chan struct{})
			cfg.TLS.Reload = reload
			targets = append(targets, reload)
		}
		if cfg.AccessLog != "" && cfg.AccessLog != "-" {
			reopen := make(chan struct{})
			cfg.AccessLogReopen = reopen
			targets = append(targets, reopen)
		}
		go func() {
			for {
				select {
				case <-hup:
					if masterKeys != nil {
						if err := masterKeys.Reload(); err != nil {
							cfg.Logger.Error("master keys not reloaded: the keys loaded before stay in use", "file", *masterKeyFile, "err", err)
						} else {
							cfg.Logger.Info("master keys reloaded", "file", *masterKeyFile, "keys", masterKeys.Len(), "newest", masterKeys.Newest())
						}
					}
					for _, t := range targets {
						select {
						case t <- struct{}{}:
						case <-ctx.Done():
							return
						}
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	scheme := "http"
	if cfg.TLS.Enabled() {
		scheme = "https"
	}
	var readyErr error
	if *readyFile != "" {
		if err := os.Remove(*readyFile); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("server: --ready-file: %w", err)
		}
		defer os.Remove(*readyFile)
	}
	cfg.Ready = func(r server.Ready) {
		c := r.Creds
		fmt.Fprintf(stdout, "cairn %s\n", versionString())
		fmt.Fprintf(stdout, "  S3 endpoint: %s://%s\n", scheme, r.S3Addr)
		if r.AdminAddr != "" {
			fmt.Fprintf(stdout, "  metrics:     %s://%s/metrics   health: %s://%s/health\n", scheme, r.AdminAddr, scheme, r.AdminAddr)
			fmt.Fprintf(stdout, "  console:     %s://%s/console/ (password: the cluster secret)\n", scheme, r.AdminAddr)
		}
		if r.NBDAddr != "" {
			if cfg.NBDTLS {
				fmt.Fprintf(stdout, "  volumes:     nbds://%s/VOLUME, TLS with a client certificate (cairn volume client-cert NAME --out DIR)\n", r.NBDAddr)
			} else {
				fmt.Fprintf(stdout, "  volumes:     nbd://%s/VOLUME (cairn volume create NAME --size 10GiB; cairn volume attach NAME)\n", r.NBDAddr)
			}
		}
		fmt.Fprintf(stdout, "  data:        %s\n", cfg.DataDir)
		fmt.Fprintf(stdout, "  node:        %s at %s\n", r.NodeID, r.NodeAddr)
		fmt.Fprintf(stdout, "  access key:  %s\n  secret key:  %s\n", c.AccessKey, c.SecretKey)
		fmt.Fprintf(stdout, "  try: AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s aws --endpoint-url %s://%s s3 ls\n", c.AccessKey, c.SecretKey, scheme, r.S3Addr)
		if r.SecretGenerated {
			fmt.Fprintf(stdout, "  new cluster; its secret is kept in %s/cluster-secret. To add a node:\n", cfg.DataDir)
			fmt.Fprintf(stdout, "    CAIRN_CLUSTER_SECRET=%s cairn server --data DIR --listen ADDR --node-addr ADDR --join %s\n", r.Secret, r.NodeAddr)
		}
		// Last: whoever waits for the file finds the lines above already written.
		if *readyFile != "" {
			readyErr = proc.WriteReadyFile(*readyFile, proc.Ready{PID: os.Getpid(), S3: r.S3Addr, Admin: r.AdminAddr, Node: r.NodeAddr, NBD: r.NBDAddr,
				NodeID: r.NodeID, DataDir: absPath(cfg.DataDir), Version: versionString(), TLS: r.TLS})
			if readyErr != nil {
				stop() // a supervisor waiting for the file would wait in vain
			}
		}
	}
	go trimMallocEvery(ctx, mallocTrimInterval)
	if err := server.Run(ctx, cfg); err != nil {
		return err
	}
	if readyErr != nil {
		return fmt.Errorf("server: --ready-file: %w", readyErr)
	}
	return nil
}

// loadMasterKeys reads the master key file, which must not be inside the data directory:
// a copy of the data directory (a backup, a stolen disk) must not carry its keys.
func loadMasterKeys(path, dataDir string) (*sse.Keyring, error) {
	if insideDir(path, dataDir) {
		return nil, fmt.Errorf("%s is inside the data directory %s: keep the master keys apart from the data they protect", path, dataDir)
	}
	return sse.LoadKeyring(path)
}

// insideDir reports whether path is dir or inside it (symbolic links resolved).
func insideDir(path, dir string) bool {
	real := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return p
	}
	rel, err := filepath.Rel(real(dir), real(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// parseSize parses a byte count with an optional KiB, MiB, GiB or TiB suffix (or K, M, G, T).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

// absPath is path made absolute, or path itself if that fails.
func absPath(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}
