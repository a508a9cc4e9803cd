// Package server runs a cairn node: it opens the store, loads the credentials, and serves
// the S3 API and the admin endpoints (/metrics, /health) until its context is cancelled,
// then shuts down gracefully (in-flight requests finish, the store is flushed and closed).
package server

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
	"golang.org/x/sys/unix"
)

// Config configures a node.
type Config struct {
	DataDir     string // default ./data
	Listen      string // S3 address, default 127.0.0.1:9000
	AdminListen string // metrics and health, default 127.0.0.1:9001; "off" disables
	// AccessKey and SecretKey, if both set, are the root user's key; otherwise a
	// bootstrap generates one.
	AccessKey, SecretKey string
	Region               string
	// SecretFiles are files the secrets were read from (--cluster-secret-file): a warning
	// is logged at start if others can read them.
	SecretFiles []string
	// S3Limits, AdminLimits and NodeLimits bound the connections, headers and stalls of
	// the three listeners (zero fields: the defaults in setDefaults).
	S3Limits, AdminLimits, NodeLimits Limits
	// TLS, if its files are set, makes the S3 and admin listeners serve HTTPS only (the
	// internode listener is not affected: its requests are authenticated by the cluster
	// secret, not encrypted).
	TLS TLSFiles
	// NBDListen, if set, is the address block volumes are served on over NBD (off by
	// default). An address that is not loopback is refused unless NBDTLS is set or
	// NBDAllow lists the networks its clients may come from (both may be set).
	NBDListen string
	NBDAllow  []netip.Prefix
	// NBDTLS makes the NBD listener require TLS (NBD_OPT_STARTTLS) with a client
	// certificate of the cluster CA that names the volume opened (cairn volume
	// client-cert); the listener presents the node's internode certificate. It needs
	// internode TLS (docs/design/volumes.md, "NBD over TLS").
	NBDTLS bool
	// VolumeFreshWait bounds how long a volume I/O on the lease holder waits for this
	// node's map to be confirmed by the Raft leader when it finds the last confirmation
	// too old (a node starved of CPU confirms late); past it the I/O fails with EPERM
	// (0: 30 s). See docs/design/volumes.md, "The single-writer lease and fencing".
	VolumeFreshWait time.Duration
	// Internode configures mutual TLS on the node address (on by default for a new
	// cluster; see docs/design/internode-tls.md).
	Internode InternodeTLS
	// Pprof serves Go's profiles (/debug/pprof/) on the admin address, unauthenticated:
	// off unless asked for, since they expose memory contents and cost CPU.
	Pprof bool
	// PresignMaxAge is how far ahead a Signature Version 2 presigned URL may expire
	// (0: 7 days, the limit Signature Version 4 has).
	PresignMaxAge time.Duration
	// AccessLog, if set, is the file the S3 access log (one JSON line per request,
	// refused ones included) is appended to; "-" is standard output. Off by default.
	AccessLog string
	// AccessLogReopen, if set, reopens the access log file at each receive (cmd/cairn
	// sends on SIGHUP, for log rotation).
	AccessLogReopen <-chan struct{}
	// BucketLogInterval is how often a node delivers the server access log records of
	// buckets with logging enabled to their target buckets (default 1m).
	BucketLogInterval time.Duration
	// NotifyMaxAttempts is the number of failed sends after which a bucket notification
	// event becomes a dead letter (0: never; it waits for its target).
	NotifyMaxAttempts int
	// NotifyHold is how long a holder of a key that is not its first live holder keeps
	// an event before asking whether the first holder has it (default 30s).
	NotifyHold time.Duration
	// MDCInvestigate is how often the links are investigated (their two clusters
	// compared and repaired: docs/design/mdc.md); 0: only on cairn mdc investigate.
	MDCInvestigate time.Duration
	Domains        []string
	Logger         *slog.Logger
	// Store tunables (zero = defaults).
	Store store.Config
	// MasterKeys seal the data keys of SSE-S3 objects (cmd/cairn loads them from
	// --master-key-file, outside DataDir, and reloads them on SIGHUP); nil: SSE-S3 and
	// bucket default encryption are refused. Every gateway of a cluster needs the same keys.
	MasterKeys s3api.MasterKeys
	// ShutdownTimeout bounds the wait for in-flight requests (default 30s).
	ShutdownTimeout time.Duration
	// Ready, if set, is called once the node serves.
	Ready func(Ready)

	// Cluster settings.
	// NodeID names this node (default: stored in DataDir/node-id, generated on first start).
	NodeID string
	// NodeAddr is the internode address (RPC and Raft) to listen on (default 127.0.0.1:0);
	// AdvertiseAddr, if set, is the address other nodes use to reach it.
	NodeAddr, AdvertiseAddr string
	// Join is the node address of any member of the cluster to join; empty bootstraps a
	// new cluster (or restarts a member).
	Join string
	// JoinTimeout is how long a joining node keeps trying to reach the cluster (the
	// node at Join may be starting, or electing a leader) before it gives up (default
	// 30 s).
	JoinTimeout time.Duration
	// Zone is the failure domain (data center, rack) of this node.
	Zone string
	// DeviceClass tags this node's storage (ssd, hdd, ...): classes with a device class
	// place data only on nodes with that tag.
	DeviceClass string
	// Roles this node runs (default all: gateway, storage, manager).
	Roles []string
	// ClusterSecret authenticates internode traffic (default: DataDir/cluster-secret,
	// generated by a bootstrap node).
	ClusterSecret string
	// Replicas is N of STANDARD for a new cluster (default 3); Partitions its partition
	// count (default 4096). Both are fixed when the cluster is bootstrapped.
	Replicas, Partitions int
	// Placement is the placement version of a new cluster's map (0 or 1: weighted
	// rendezvous, 2: bounded load, package placement); fixed at bootstrap like
	// Partitions (a map command can change it later, moving data). Ignored on a join.
	Placement int
	// Voters is the number of voting managers (default 3).
	Voters int
	// StragglerWait: see gateway.Config.
	StragglerWait time.Duration
	// ObjectCache is the gateway object cache's budget in bytes (0: no cache; cmd/cairn
	// defaults to 64 MiB). See gateway.Config.ObjectCache.
	ObjectCache int64
	// CacheLease is the read lease the object cache asks holders for (0: none); it is
	// also the longest lease this node grants as a holder (default
	// replica.DefaultReadLease when zero there). See gateway.Config.CacheLease.
	CacheLease time.Duration
	// HintInterval is how often queued replica writes are retried (default 1s).
	HintInterval time.Duration
	// Capacity overrides the capacity reported in the map (default: the data disk's size).
	Capacity int64
	// DownAfter is how long a node may stay silent before the node-state monitor marks it
	// down (default 5s).
	DownAfter time.Duration
	// OutAfter is how long a node may stay down before it is marked out and its copies are
	// re-created on the others (default 10m; negative disables).
	OutAfter time.Duration
	// CatchUp is how long a node that was away reads from two replicas (default 60s).
	CatchUp time.Duration
	// ScrubInterval is how often each object is read in full and verified (default 30
	// days); ScrubRate paces the deep scrub in bytes per second (default 32 MiB/s).
	ScrubInterval time.Duration
	ScrubRate     int64
	// RecoveryRate limits the bytes per second a node copies in to recover or rebalance
	// (default 64 MiB/s; negative: unlimited). `cairn admin recovery set` changes it at run time.
	RecoveryRate int64
	// BackgroundTarget is the client p99 above which background work (recovery,
	// rebalance, shard moves, policy apply, scrub) backs off (0: twice the p99 the
	// clients see while none runs, learned).
	BackgroundTarget time.Duration
	// SyncInterval is how often a node compares its partitions with the other holders
	// and copies what it lacks (default 10m; also on every placement change and at start).
	SyncInterval time.Duration
	// LifecycleInterval is how often each bucket's S3 lifecycle rules run on every
	// storage node (default 24h; a new or changed configuration runs within a minute).
	LifecycleInterval time.Duration
	// TierCheck is how often a storage node compares its use with its device class's
	// water marks (0: 30 s).
	TierCheck time.Duration
}

// Ready describes a node that serves.
type Ready struct {
	S3Addr, AdminAddr, NodeAddr, NodeID string
	// NBDAddr is the NBD listener's address ("": off).
	NBDAddr string
	// TLS says the S3 and admin listeners serve HTTPS.
	TLS                           bool
	Creds                         Credentials
	Secret                        string
	SecretGenerated, Bootstrapped bool
}

func (c *Config) hasRole(r string) bool {
	for _, x := range c.Roles {
		if x == r {
			return true
		}
	}
	return false
}

func (c *Config) validate() error {
	for _, r := range c.Roles {
		switch r {
		case clustermap.RoleGateway, clustermap.RoleStorage, clustermap.RoleManager:
		default:
			return errors.Errorf("", errors.Invalid, "unknown role %q (want gateway, storage, manager)", r)
		}
	}
	if c.Replicas < 1 || c.Replicas > 16 {
		return errors.Errorf("", errors.Invalid, "--replicas %d: want 1 to 16", c.Replicas)
	}
	if c.Partitions < 1 || c.Partitions > 1<<20 {
		return errors.Errorf("", errors.Invalid, "--partitions %d: want 1 to 1048576", c.Partitions)
	}
	if c.Placement < 0 || c.Placement > clustermap.MaxPlacementVersion {
		return errors.Errorf("", errors.Invalid, "--placement v%d: want v1 or v2", c.Placement)
	}
	if c.Voters < 1 || c.Voters%2 == 0 {
		return errors.Errorf("", errors.Invalid, "--voters %d: want an odd number", c.Voters)
	}
	if err := c.TLS.validate(); err != nil {
		return err
	}
	if err := c.Internode.validate(); err != nil {
		return err
	}
	if c.NBDTLS && c.Internode.Off {
		return errors.E(errors.Invalid, "--nbd-tls require authenticates clients with the cluster CA of internode TLS: it cannot go with --internode-tls off")
	}
	if c.VolumeFreshWait < 0 {
		return errors.Errorf("", errors.Invalid, "--volume-fresh-wait %s: want a duration of 0 (30s) or more", c.VolumeFreshWait)
	}
	if c.NBDTLS && c.NBDListen == "" {
		return errors.E(errors.Invalid, "--nbd-tls require needs --nbd-listen")
	}
	return nil
}

// capacity is the configured capacity or the size of the data disk.
func (c *Config) capacity(st *store.Store) int64 {
	if c.Capacity > 0 || st == nil {
		return c.Capacity
	}
	var fs unix.Statfs_t
	if unix.Statfs(c.DataDir, &fs) != nil {
		return 0
	}
	return int64(fs.Blocks) * int64(fs.Bsize)
}

// Credentials are an access key pair.
type Credentials struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

func (c *Config) setDefaults() {
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:9000"
	}
	// S3: many clients, large slow bodies (the S3 layer also cuts off stalled bodies),
	// presigned URLs and 8 KiB of user metadata in the header. Admin: a few operators,
	// small JSON. Node: the peers' pooled connections (up to 256 idle per peer) and
	// Raft; object metadata of many-part uploads in a header.
	fd := openFileLimit()
	c.S3Limits = c.S3Limits.withDefaults(Limits{MaxConns: min(8192, fd/2), MaxConnsPerIP: 512, MaxHeader: 64 << 10,
		HeaderTimeout: 30 * time.Second, BodyIdle: 2 * time.Minute, IdleTimeout: 2 * time.Minute})
	c.AdminLimits = c.AdminLimits.withDefaults(Limits{MaxConns: 256, MaxConnsPerIP: 32, MaxHeader: 16 << 10,
		HeaderTimeout: 10 * time.Second, BodyIdle: 30 * time.Second, IdleTimeout: time.Minute})
	c.NodeLimits = c.NodeLimits.withDefaults(Limits{MaxConns: min(4096, fd/4), MaxConnsPerIP: 2048, MaxHeader: 512 << 10,
		HeaderTimeout: 30 * time.Second, BodyIdle: 2 * time.Minute, IdleTimeout: 5 * time.Minute})
	if c.AdminListen == "" {
		c.AdminListen = "127.0.0.1:9001"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.NodeAddr == "" {
		c.NodeAddr = "127.0.0.1:0"
	}
	if len(c.Roles) == 0 {
		c.Roles = []string{clustermap.RoleGateway, clustermap.RoleStorage, clustermap.RoleManager}
	}
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Partitions == 0 {
		c.Partitions = 4096
	}
	if c.Voters == 0 {
		c.Voters = 3
	}
	if c.HintInterval <= 0 {
		c.HintInterval = time.Second
	}
	if c.DownAfter <= 0 {
		c.DownAfter = 5 * time.Second
	}
	if c.OutAfter == 0 {
		c.OutAfter = 10 * time.Minute
	}
	if c.CatchUp <= 0 {
		c.CatchUp = time.Minute
	}
	if c.BucketLogInterval <= 0 {
		c.BucketLogInterval = time.Minute
	}
	if c.RecoveryRate == 0 {
		c.RecoveryRate = 64 << 20
	}
	if c.ScrubInterval <= 0 {
		c.ScrubInterval = 30 * 24 * time.Hour
	}
	if c.ScrubRate == 0 {
		c.ScrubRate = 32 << 20
	}
	if c.SyncInterval <= 0 {
		c.SyncInterval = 10 * time.Minute
	}
	if c.TLS.PollInterval == 0 {
		c.TLS.PollInterval = 5 * time.Second
	}
}

// bootstrapCredentials returns the root user's first key for a new cluster: the
// configured pair, or a new random one (printed at start; in the map only sealed).
func bootstrapCredentials(access, secret string) (Credentials, error) {
	if access != "" && secret != "" {
		return Credentials{AccessKey: access, SecretKey: secret}, nil
	}
	if access != "" || secret != "" {
		return Credentials{}, errors.E(errors.Invalid, "set both CAIRN_ACCESS_KEY and CAIRN_SECRET_KEY, or neither")
	}
	return Credentials{AccessKey: "CAIRN" + randString(15, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"),
		SecretKey: randString(40, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")}, nil
}

func randString(n int, alphabet string) string {
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// warnExposed logs a warning if path (when it exists) can be read by users other than
// its owner.
func warnExposed(log *slog.Logger, path, what, fix string) {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	log.Warn(path+" is readable by other users: it holds "+what, "mode", fi.Mode().Perm().String(), "fix", fix+" "+path)
}

// watchSelf calls back when this node's state in the map goes from down to up: it was
// cut off, and writes it missed are being delivered to it.
func watchSelf(ctx context.Context, mgr *clustermap.Manager, id string, back func()) {
	var prev clustermap.NodeState
	for m := range mgr.Watch(ctx) {
		n, ok := m.Node(id)
		if !ok {
			continue
		}
		if prev == clustermap.StateDown && n.State == clustermap.StateUp {
			back()
		}
		prev = n.State
	}
}

// waitForSelf waits until the local map lists this node and a Raft leader is known.
func waitForSelf(ctx context.Context, mgr *clustermap.Manager, id string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w := mgr.Watch(ctx)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		_, leader := mgr.Leader()
		if _, ok := mgr.Current().Node(id); ok && leader != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.E(errors.Transient, "this node did not receive a cluster map that includes it (is a majority of the managers up?)")
		case <-w:
		case <-tick.C:
		}
	}
}

// rejoinIfCutOff handles a member that restarts after the cluster dropped it (it was
// marked out and removed from the Raft group): no leader contacts it, so it asks to join
// again through any peer it knows (--join, its Raft configuration, its last map).
func rejoinIfCutOff(ctx context.Context, mgr *clustermap.Manager, c *rpc.Client, id string, self clustermap.Node, hint string, log *slog.Logger) {
	var peers []string
	if hint != "" {
		peers = append(peers, hint)
	}
	if ms, err := mgr.Members(); err == nil {
		for _, m := range ms {
			peers = append(peers, m.Addr)
		}
	}
	for _, n := range mgr.Current().Nodes {
		peers = append(peers, n.Addr)
	}
	var last error
	for _, p := range peers {
		if p == self.Addr {
			continue
		}
		jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := join(jctx, c, p, self)
		cancel()
		if err == nil {
			log.Info("this node was cut off from the cluster; joined again", "via", p)
			return
		}
		last = err
	}
	if last != nil {
		log.Warn("this node hears no leader and could not join again through a known peer", "err", last)
	}
}

// standardClass is STANDARD for n replicas: LeoFS's defaults, W and D a majority, R 1.
func standardClass(n int) clustermap.Class {
	return clustermap.Class{Name: clustermap.StandardClass, N: n, W: n/2 + 1, R: 1, D: n/2 + 1}
}

// internodeAuth refuses internode requests without a valid signature, and makes a node
// whose map is older than the sender's wait briefly for the newer map (it arrives through
// Raft) before answering. Every answer carries this node's epoch.
//
// Under internode TLS (itls), a request that breaks its rule (checkPeer: plain once TLS
// is required, no client certificate outside enrolment) is refused before its signature
// is read, and its connection closed; a request whose client certificate names another
// node than the one that signed it is refused.
func internodeAuth(secret *rpc.Secret, itls *internodeTLS, mgr *clustermap.Manager, log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := itls.checkPeer(r); err != nil {
			log.Warn("refused an internode request", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
			w.Header().Set("Connection", "close")
			wire.WriteError(w, err)
			return
		}
		w, from, epoch, ok := secret.Authenticate(w, r)
		if !ok {
			log.Warn("refused an internode request", "remote", r.RemoteAddr, "path", r.URL.Path)
			return
		}
		if err := checkSigner(r, from); err != nil {
			log.Warn("refused an internode request", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
			wire.WriteError(w, err)
			rpc.EndResponse(w)
			return
		}
		if epoch > mgr.Current().Epoch {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			if _, err := mgr.WaitEpoch(ctx, epoch); err != nil {
				log.Debug("answering with an older map than the sender's", "from", from, "theirs", epoch, "ours", mgr.Current().Epoch)
			}
			cancel()
		}
		w.Header().Set(rpc.HdrEpoch, strconv.FormatUint(mgr.Current().Epoch, 10))
		next.ServeHTTP(w, r)
		rpc.EndResponse(w)
	})
}
