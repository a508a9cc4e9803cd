// Package repair is every background loop that brings a node's copies back to what the
// cluster map and the writes it acknowledged say they must be:
//
//   - hinted retry (hints.go): delivers the replica writes the coordinator queued when a
//     holder missed them (package hints);
//   - anti-entropy and hand-off (sync.go): compares partition digests with every other
//     storage node, copies what is newer elsewhere, removes what this node holds for
//     partitions that moved once their holders confirm it, and heals the stripes of
//     erasure-coded objects (package stripe);
//   - shard moves and collection (shards.go): hands shards to the nodes their stripe's
//     placement now names, and removes shards that can never be read again;
//   - deep scrub (scrub.go): reads every byte this node stores, checks it, and replaces
//     what is damaged from a good copy or by rebuilding the shard;
//   - policy apply (apply.go): rewrites objects that a bucket's placement policy now puts
//     in another class;
//   - the lifecycle runner (lifecycle.go): applies buckets' S3 lifecycle rules (package
//     lifecycle) to the keys and uploads this node is the first live holder of.
//
// The loops decide what to repair and when; they reach holders through the replica seam,
// places through the topology, and ask the object coordinator (package gateway, through
// the Coordinator interface) for what must go through its quorums: a rewrite, a local
// repair from a good copy, whether an upload ended elsewhere.
package repair

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnfs/cairn/internal/budget"
	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/policy"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Coordinator is what the repair loops ask of the object coordinator (gateway.Gateway).
type Coordinator interface {
	// HeadBucket returns a bucket, or a NotExist error once it is gone from the map.
	HeadBucket(ctx context.Context, name string) (object.Bucket, error)
	// EnsureLocalBucket creates bucket in this node's store if the map has it.
	EnsureLocalBucket(bucket string) error
	// BucketPolicy returns bucket's placement policy; false if it has none.
	BucketPolicy(bucket string) (*policy.Policy, bool)
	// Rewrite stores version v of bucket/key again in class cls on every holder ts,
	// keeping its version; false if a newer write or a delete came first.
	Rewrite(ctx context.Context, bucket, key string, v uint64, cls clustermap.Class, ts []topology.Target) (bool, error)
	// RepairCopy replaces this node's damaged copy of a version with a good one.
	RepairCopy(ctx context.Context, bucket, key string, version uint64) error
	// StaleUpload returns the end record of an upload pending here that ended
	// elsewhere, or nil.
	StaleUpload(ctx context.Context, u object.PendingUpload) *object.UploadEnd
	// StatObject returns bucket/key's current version as a quorum read sees it
	// (NotExist if none, or a delete marker).
	StatObject(ctx context.Context, bucket, key string) (*object.Object, error)
	// DeleteRecord writes a delete marker, a purge or a tombstone with the delete quorum
	// (gateway.Gateway.DeleteRecord); holders refuse purges Object Lock forbids.
	DeleteRecord(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error)
	// AbortUpload aborts a pending multipart upload (NotExist if it ended).
	AbortUpload(ctx context.Context, bucket, key, uploadID string) error
	// ListVersions lists a bucket's versions as S3 clients see them: every storage node's
	// records merged (gateway.Gateway.ListVersions).
	ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error)
	// Migrate archives version v of bucket/key in the external tier named tier
	// (gateway.Gateway.Migrate): the bytes moved, 0 if there was nothing to do.
	Migrate(ctx context.Context, bucket, key string, v uint64, tier string) (int64, error)
	// MigrateNoncurrent is Migrate for a noncurrent version v
	// (gateway.Gateway.MigrateNoncurrent).
	MigrateNoncurrent(ctx context.Context, bucket, key string, v uint64, tier string) (int64, error)
	// DeleteTierCopy deletes an archived version's copy from its tier (absent is not an
	// error; NotExist if the tier is not in the map).
	DeleteTierCopy(ctx context.Context, tier, key string) error
}

// Config configures the Loops of one node.
type Config struct {
	// NodeID is this node's id; Store its store (required: the loops repair a store).
	NodeID string
	Store  *store.Store
	// Maps gives the cluster map, Topology places objects and shards.
	Maps     topology.MapSource
	Topology *topology.Topology
	// Replica reaches a holder (this node's store included) through the replica seam.
	Replica func(topology.Target) replica.Replica
	// Stripes is the erasure-coded data path.
	Stripes *stripe.Path
	// Coordinator writes through quorums (the node's gateway).
	Coordinator Coordinator
	// Hints is the queue RunHints delivers; nil: RunHints returns at once.
	Hints *hints.Queue
	// Clock versions the records the loops write themselves (apply progress).
	Clock *hlc.Clock
	// Timeout bounds a metadata call to a holder (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
	// Budget, if set, paces every loop's bytes (copies in, shard moves, policy apply,
	// scrub reads) together, at a rate that yields to clients; nil: each loop paces
	// itself at the recovery rate (scrub at its own).
	Budget *budget.Budget
	// Now is the clock lifecycle rules are evaluated with (nil: time.Now). Tests move
	// it; nothing in production overrides it.
	Now func() time.Time
	// LifecycleInterval is how often each bucket's lifecycle rules run on this node
	// (default DefaultLifecycleInterval, a day); LifecycleTick how often the runner
	// looks for a bucket that is due (default a minute, at most the interval).
	LifecycleInterval, LifecycleTick time.Duration
	// TierTick is how often the node compares its use with its device class's water
	// marks (default 30 s; tier.go).
	TierTick time.Duration
}

// Loops is the repair work of one node. Its Run methods each run one loop until their
// context ends; Sync, ApplyPass and a Scrub pass can also be run once.
type Loops struct {
	self    string
	store   *store.Store
	maps    topology.MapSource
	topo    *topology.Topology
	replica func(topology.Target) replica.Replica
	stripes *stripe.Path
	coord   Coordinator
	hints   *hints.Queue
	clock   *hlc.Clock
	timeout time.Duration
	log     *slog.Logger
	budget  *budget.Budget
	// sync is the live state of partition sync (recovery progress and rate limit).
	sync syncState
	// apply is the progress of re-placing objects by their bucket's policy.
	apply applyState
	// lc is the lifecycle runner's state; now its clock.
	lc                 lifecycleState
	now                func() time.Time
	lcInterval, lcTick time.Duration
	lcRetry            time.Duration
	lcPage             int // versions a round reads at once (lifecyclePage; tests make it small)
	tierBatch          int // migration candidates a pass holds at once (tierBatch; tests make it small)
	// tier is the migration's state (tier.go).
	tier     tierState
	tierTick time.Duration
}

// New returns the Loops of a node.
func New(cfg Config) *Loops {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = new(hlc.Clock)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LifecycleInterval <= 0 {
		cfg.LifecycleInterval = DefaultLifecycleInterval
	}
	if cfg.LifecycleTick <= 0 {
		cfg.LifecycleTick = time.Minute
	}
	cfg.LifecycleTick = min(cfg.LifecycleTick, cfg.LifecycleInterval)
	if cfg.TierTick <= 0 {
		cfg.TierTick = 30 * time.Second
	}
	return &Loops{tierTick: cfg.TierTick, now: cfg.Now, lcInterval: cfg.LifecycleInterval, lcTick: cfg.LifecycleTick, lcRetry: min(cfg.LifecycleInterval/10, 10*time.Minute), lcPage: lifecyclePage, tierBatch: tierBatch, lc: lifecycleState{runNow: make(chan struct{}, 1)}, self: cfg.NodeID, store: cfg.Store, maps: cfg.Maps, topo: cfg.Topology, replica: cfg.Replica, stripes: cfg.Stripes,
		coord: cfg.Coordinator, hints: cfg.Hints, clock: cfg.Clock, timeout: cfg.Timeout, log: cfg.Logger.With("component", "repair"),
		budget: cfg.Budget}
}

// copyVersion copies version of bucket/key from src to dst (replica.Copy); with repair
// (dst local only) it replaces a damaged record of the same version.
func (l *Loops) copyVersion(ctx context.Context, src, dst topology.Target, bucket, key string, version uint64, repair bool) (int64, error) {
	return replica.Copy(ctx, l.replica(src), l.replica(dst), bucket, key, version, repair && dst.Local)
}
