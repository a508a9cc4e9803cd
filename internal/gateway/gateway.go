// Package gateway is the object coordinator: it gives S3 object semantics over the
// cluster. It places each object on the holders its partition maps to (package
// topology), writes them in parallel with a write quorum and queues a hint (package
// hints) for each holder that missed the write, reads with a read quorum and fails over to
// another holder mid-body, repairs a stale or damaged copy it comes across (read repair),
// merges the holders' listings, and runs multipart uploads (gateway.go, put.go, get.go,
// failover.go, list.go, multipart.go). The bytes of objects of erasure-coded and
// replicated-by-shard classes go through package stripe; their record is written here
// (ec.go). The background repair loops are package repair, which asks the coordinator
// for what must go through its quorums (coordinator.go).
//
// Every holder, this node's store included, is reached through the replica seam (package
// replica). It knows nothing of HTTP or S3 wire formats (package s3api does).
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/policy"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// ErrMapUnavailable is wrapped by the errors of requests that must change the cluster map
// (CreateBucket, DeleteBucket, bucket configurations) when it cannot change: there is no
// Raft leader (a majority of the managers is down or unreachable), or the leader does not
// answer. Reads and writes of objects in existing buckets do not need the map to change.
var ErrMapUnavailable = errors.New("the cluster map cannot change")

// ErrUpgrading is wrapped by the refusal of a map change that some node of the cluster
// runs too old a build to apply (the Raft leader checks the builds it hears from): it
// works once the rolling upgrade is finished.
var ErrUpgrading = errors.New("the cluster is being upgraded")

// ErrQuorum is wrapped by the errors of requests that reached fewer replicas than their
// quorum (see replica.QuorumError).
var ErrQuorum = replica.ErrQuorum

// QuorumError describes a request that reached fewer replicas than its quorum.
type QuorumError = replica.QuorumError

// MapSource gives the newest cluster map this node knows.
type MapSource = topology.MapSource

// Config configures a Gateway.
type Config struct {
	// NodeID is this node's id in the map.
	NodeID string
	// Store is this node's store, nil if it has no storage role.
	Store *store.Store
	// Fence, if set, checks each range write this node's store takes (a block volume's
	// data object): replica.Local.Fence.
	Fence func(object.RangeWrite) error
	// Maps gives the cluster map. Required.
	Maps MapSource
	// RPC reaches other nodes; nil for a single node that never needs to.
	RPC *rpc.Client
	// Apply changes the cluster map (bucket create and delete). Nil means buckets are kept
	// in the local store only (a single node without a cluster map, as in unit tests).
	Apply func(ctx context.Context, c clustermap.Command) (*clustermap.Map, error)
	// Refresh, if set, brings this node's map up to the leader's (used before answering
	// NoSuchBucket, so a bucket just created through another gateway is found).
	Refresh func(ctx context.Context) error
	// Hints is the durable retry queue of replica writes; nil disables hinted retry.
	Hints *hints.Queue
	// Clock issues versions (shared with the store). Nil: a private clock.
	Clock *hlc.Clock
	// StragglerWait is how long a write that has its quorum still waits for the other
	// replicas before answering (default 2s), so that a read right after a write usually
	// finds every replica current. Replicas that fail later are queued as hints.
	StragglerWait time.Duration
	// Timeout bounds a metadata call to a replica (default 10s).
	Timeout time.Duration
	// ObjectCache is the object cache's budget in bytes (0: no cache): small objects' bodies
	// kept in memory and served after a freshness check of their version with the read
	// quorum (cache.go, cacheget.go).
	ObjectCache int64
	// CacheLease is the read lease the object cache asks the holders for with each
	// freshness check (0: none): while one is live a GET of the object is served with no
	// check (cacheget.go; cluster feature level 11, LevelReadLeases). At most
	// replica.MaxReadLease.
	CacheLease time.Duration
	// ReadLeases is this node's table of the read leases it grants as a holder (nil:
	// none); this node's own gateway takes leases from it too.
	ReadLeases *replica.ReadLeases
	// WrapReplica, if set, wraps every replica the gateway talks to (tests inject faults
	// with replica.Faulty).
	WrapReplica func(replica.Replica) replica.Replica
	// Tiers returns the external archive tier of that name (tier.go); nil: this node
	// reaches none (archived versions cannot be read or recalled through it).
	Tiers func(name string) (TierStore, error)
	// NoAccessTimes turns off the noting of client reads' last-access times (store.Touch);
	// the benchmarks compare with it off.
	NoAccessTimes bool
	Logger        *slog.Logger
}

// Gateway implements the object operations of the S3 API over the cluster.
type Gateway struct {
	topo  *topology.Topology
	cfg   Config
	log   *slog.Logger
	clock *hlc.Clock
	// bg tracks background replica work (stragglers, read repair) for Close.
	bg sync.WaitGroup
	// workers runs the replica writes of a PUT (fanOutAt).
	workers workers
	// local is this node's store as a replica (nil without one).
	local *replica.Local
	// closing is cancelled by Close: background work that may run long (a local repair)
	// stops early instead of holding up shutdown.
	closing context.Context
	stop    context.CancelFunc
	// repairing holds the objects whose damaged local copy is being replaced.
	repairing sync.Map
	// catchUp is when (unix ns) this node's copies are trusted again after it was away.
	catchUp atomic.Int64
	// ec is the erasure-coded data path.
	ec *stripe.Path
	// policies caches parsed bucket policies by bucket name (*cachedPolicy).
	policies sync.Map
	// cache is the object cache (nil: off).
	cache *objectCache
	// leases is this node's table of leases on keys (conditional.go).
	leases *replica.Leases
	// tiers counts tier work and joins concurrent recalls (tier.go).
	tiers tierState
	// putSenders holds the put batches' sender of each remote holder
	// (*replica.Sender[replica.Write] by node id; putbatch.go).
	putSenders sync.Map
}

// New returns a Gateway.
func New(cfg Config) *Gateway {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StragglerWait <= 0 {
		cfg.StragglerWait = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	cfg.CacheLease = min(cfg.CacheLease, replica.MaxReadLease)
	g := &Gateway{cfg: cfg, log: cfg.Logger.With("component", "gateway"), clock: cfg.Clock, cache: newObjectCache(cfg.ObjectCache)}
	g.topo = topology.NewTopology(cfg.Maps, cfg.NodeID, cfg.Store != nil, g.log)
	if cfg.Store != nil {
		g.local = &replica.Local{Node: cfg.NodeID, Store: cfg.Store, EnsureBucket: g.EnsureLocalBucket, Fence: cfg.Fence, ReadLeases: cfg.ReadLeases}
	}
	g.ec = stripe.New(stripe.Config{Self: cfg.NodeID, Maps: cfg.Maps, Topology: g.topo, Replica: g.replica, Clock: g.clock,
		Timeout: cfg.Timeout, Logger: g.log})
	g.closing, g.stop = context.WithCancel(context.Background())
	if g.clock == nil {
		g.clock = new(hlc.Clock)
	}
	g.leases = replica.NewLeases(replica.LeaseConfig{Grant: g.grantLease, Observe: g.clock.Observe})
	return g
}

// Topology is where this gateway places objects and shards.
func (g *Gateway) Topology() *topology.Topology { return g.topo }

// Stripes is this gateway's erasure-coded data path.
func (g *Gateway) Stripes() *stripe.Path { return g.ec }

// Replica returns the Replica through which this gateway reaches target t (see replica.go).
func (g *Gateway) Replica(t topology.Target) replica.Replica { return g.replica(t) }

// CatchUp makes reads through this gateway ask at least two replicas (R >= 2) for d:
// after this node was away its own copies may be stale until queued writes and repairs
// reach it, and a read with R = 1 would be served from them.
func (g *Gateway) CatchUp(d time.Duration) {
	g.catchUp.Store(time.Now().Add(d).UnixNano())
	g.log.Info("reading from two replicas while this node catches up", "for", d)
}

// readQuorum is the read quorum in force for the targets ts.
func (g *Gateway) readQuorum(cls clustermap.Class, ts []topology.Target) int {
	r := cls.R
	if r < 2 && time.Now().UnixNano() < g.catchUp.Load() {
		live := 0
		for _, t := range ts {
			if !t.Down {
				live++
			}
		}
		r = max(r, min(2, live))
	}
	return r
}

// Close stops long background work (local repairs) and waits for all of it, replica
// writes still in flight included, to finish.
func (g *Gateway) Close() { g.stop(); g.bg.Wait(); g.ec.Close() }

// ErrInvalidStorageClass: an x-amz-storage-class name is neither a class of the cluster
// nor an S3 name.
var ErrInvalidStorageClass = errors.New("invalid storage class")

// classFor returns the class an object's x-amz-storage-class value selects (STANDARD
// for none).
func (g *Gateway) classFor(name string) (clustermap.Class, error) {
	m := g.cfg.Maps.Current()
	c, ok := m.ResolveClass(name)
	if !ok {
		return c, errors.E(errors.Invalid, fmt.Errorf("%w: %q is not a storage class of this cluster (see cairn admin class list)", ErrInvalidStorageClass, name))
	}
	return c, nil
}

// policyClass returns the class bucket's placement policy chooses for an object written
// without x-amz-storage-class ("" for STANDARD or no policy). size is -1 when unknown (a
// multipart upload). A class the map no longer has falls back to STANDARD, logged.
func (g *Gateway) policyClass(bucket, key string, size int64, contentType string) string {
	p, ok := g.bucketPolicy(bucket)
	if !ok {
		return ""
	}
	name, _ := p.Evaluate(policy.Object{Key: key, Size: size, ContentType: contentType})
	if name == "" {
		return ""
	}
	cls, err := g.classFor(name)
	if err != nil {
		g.log.Warn("the bucket policy chose a class this object cannot use: stored in STANDARD", "bucket", bucket, "key", key, "class", name, "err", err)
		return ""
	}
	if cls.Name == clustermap.StandardClass {
		return ""
	}
	return name
}

// bucketPolicy returns bucket's parsed placement policy; false if it has none.
func (g *Gateway) bucketPolicy(bucket string) (*policy.Policy, bool) {
	b, ok := g.cfg.Maps.Current().Buckets[bucket]
	if !ok || b.Policy == "" {
		return nil, false
	}
	if c, ok := g.policies.Load(bucket); ok && c.(*cachedPolicy).src == b.Policy {
		return c.(*cachedPolicy).p, true
	}
	p, err := policy.Parse([]byte(b.Policy))
	if err != nil {
		g.log.Error("bucket policy does not parse (it was checked when set)", "bucket", bucket, "err", err)
		return nil, false
	}
	g.policies.Store(bucket, &cachedPolicy{src: b.Policy, p: p})
	return p, true
}

// cachedPolicy is a bucket's parsed policy and the text it came from.
type cachedPolicy struct {
	src string
	p   *policy.Policy
}

// ensureBucket checks that bucket exists (in the map, or in the local store without one).
func (g *Gateway) ensureBucket(ctx context.Context, bucket string) error {
	err := g.bucketKnown(bucket)
	if errors.Is(errors.NotExist, err) && g.cfg.Refresh != nil {
		// The bucket may have been created through another gateway just now, or this node
		// may have restarted and not applied its log yet: only an up-to-date map can say
		// that a bucket does not exist.
		if rerr := g.cfg.Refresh(ctx); rerr != nil {
			return errors.E(errors.Transient, fmt.Errorf("bucket %q is not in this node's cluster map, which cannot be brought up to date now (%v); retry", bucket, rerr))
		}
		err = g.bucketKnown(bucket)
	}
	return err
}

// bucketKnown checks bucket in this node's map (or store, without a map).
func (g *Gateway) bucketKnown(bucket string) error {
	if g.cfg.Apply == nil {
		return g.cfg.Store.BucketExists(bucket)
	}
	if _, ok := g.cfg.Maps.Current().Buckets[bucket]; !ok {
		return errors.E(errors.NotExist, fmt.Errorf("bucket %q: %w", bucket, object.ErrNoSuchBucket))
	}
	return nil
}

// EnsureLocalBucket creates bucket in the local store if the map has it: replicas learn of
// buckets from the map.
func (g *Gateway) EnsureLocalBucket(bucket string) error {
	if store.Internal(bucket) {
		if g.cfg.Store.BucketExists(bucket) == nil {
			return nil
		}
		if err := g.cfg.Store.CreateBucket(bucket); err != nil && !errors.Is(errors.Exist, err) {
			return err
		}
		return nil
	}
	if err := g.bucketKnown(bucket); err != nil {
		return err
	}
	if g.cfg.Store.BucketExists(bucket) == nil {
		return nil
	}
	if err := g.cfg.Store.CreateBucket(bucket); err != nil && !errors.Is(errors.Exist, err) {
		return err
	}
	return nil
}

// ListBuckets returns every bucket in name order.
func (g *Gateway) ListBuckets(ctx context.Context) ([]object.Bucket, error) {
	if g.cfg.Apply == nil {
		return g.cfg.Store.ListBuckets()
	}
	m := g.cfg.Maps.Current()
	out := make([]object.Bucket, 0, len(m.Buckets))
	for _, b := range m.Buckets {
		if b.Name == clustermap.VolumeBucket || b.Name == clustermap.TierBucket {
			continue // block volumes' data objects, class tiers' copies: not S3 buckets
		}
		out = append(out, object.Bucket{Name: b.Name, Created: time.Unix(0, b.Created).UTC(), Owner: b.Owner})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// HeadBucket returns a bucket or a NotExist error.
func (g *Gateway) HeadBucket(ctx context.Context, name string) (object.Bucket, error) {
	if g.cfg.Apply == nil {
		return g.cfg.Store.HeadBucket(name)
	}
	if err := g.ensureBucket(ctx, name); err != nil {
		return object.Bucket{}, errors.E(errors.Op("gateway.HeadBucket"), err)
	}
	b := g.cfg.Maps.Current().Buckets[name]
	return object.Bucket{Name: b.Name, Created: time.Unix(0, b.Created).UTC(), Config: b.Config, Owner: b.Owner}, nil
}

// LocalBucket is HeadBucket from this node's copy of the map alone: it never asks the
// Raft leader, so a bucket created through another gateway a moment ago may not be there
// yet. For unauthenticated requests (CORS preflights), which must not make a node talk to
// the leader.
func (g *Gateway) LocalBucket(name string) (object.Bucket, error) {
	if g.cfg.Apply == nil {
		return g.cfg.Store.HeadBucket(name)
	}
	b, ok := g.cfg.Maps.Current().Buckets[name]
	if !ok {
		return object.Bucket{}, errors.E(errors.Op("gateway.LocalBucket"), errors.NotExist, fmt.Errorf("bucket %q: %w", name, object.ErrNoSuchBucket))
	}
	return object.Bucket{Name: b.Name, Created: time.Unix(0, b.Created).UTC(), Config: b.Config, Owner: b.Owner}, nil
}

// SetBucketConfig sets the bucket's configuration of the given kind (an S3 sub-resource
// such as "cors" or "tagging") to doc, in the cluster map; an empty doc deletes it.
// NotExist if the bucket does not exist. It returns once the map holding the change is
// applied, so a HeadBucket through this gateway sees it; other gateways see it when the
// map reaches them.
func (g *Gateway) SetBucketConfig(ctx context.Context, bucket, kind string, doc []byte) error {
	const op errors.Op = "gateway.SetBucketConfig"
	if g.cfg.Apply == nil {
		if err := g.cfg.Store.SetBucketConfig(bucket, kind, doc); err != nil {
			return errors.E(op, err)
		}
		return nil
	}
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return errors.E(op, err)
	}
	d := string(doc)
	if _, err := g.cfg.Apply(ctx, clustermap.Command{Op: clustermap.OpSetBucketConfig, Name: bucket, Key: kind, Doc: &d}); err != nil {
		return errors.E(op, err)
	}
	return nil
}

// CreateBucket creates a bucket owned by the named user ("": the root user) in the
// cluster map (Exist if it is there). A single store without a map has no owners.
func (g *Gateway) CreateBucket(ctx context.Context, name, owner string) error {
	const op errors.Op = "gateway.CreateBucket"
	if g.cfg.Apply == nil {
		return g.cfg.Store.CreateBucket(name)
	}
	if _, err := g.cfg.Apply(ctx, clustermap.Command{Op: clustermap.OpCreateBucket, Bucket: &clustermap.Bucket{Name: name, Created: time.Now().UnixNano(), Owner: owner}}); err != nil {
		return errors.E(op, err)
	}
	return nil
}

// DeleteBucket deletes an empty bucket: no live object and no pending upload on any node.
func (g *Gateway) DeleteBucket(ctx context.Context, name string) error {
	const op errors.Op = "gateway.DeleteBucket"
	defer g.cache.dropBucket(name)
	if g.cfg.Apply == nil {
		return g.cfg.Store.DeleteBucket(name)
	}
	if _, err := g.HeadBucket(ctx, name); err != nil {
		return errors.E(op, err)
	}
	res, err := g.List(ctx, name, object.ListOptions{Max: 1})
	if err != nil {
		return errors.E(op, err)
	}
	ups, err := g.ListUploads(ctx, name, object.UploadListOptions{Max: 1})
	if err != nil {
		return errors.E(op, err)
	}
	if len(res.Objects) > 0 || len(ups.Uploads) > 0 {
		return errors.E(op, errors.NotEmpty, fmt.Errorf("bucket %q is not empty", name))
	}
	if _, err := g.cfg.Apply(ctx, clustermap.Command{Op: clustermap.OpDeleteBucket, Name: name}); err != nil {
		return errors.E(op, err)
	}
	return nil
}

// Local returns a Gateway over one store with no cluster: one replica, buckets kept in
// the store. Tests of the S3 layer use it.
func Local(st *store.Store, log *slog.Logger) *Gateway {
	m := &clustermap.Map{Epoch: 1, Partitions: 1, Replicas: 1, Nodes: []clustermap.Node{{
		ID: "local", Roles: []string{clustermap.RoleStorage, clustermap.RoleGateway}, State: clustermap.StateUp, Weight: 1}}}
	maps := new(topology.Maps)
	maps.Set(m)
	return New(Config{NodeID: "local", Store: st, Maps: maps, Logger: log})
}
