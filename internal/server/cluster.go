package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

type mapInfo struct {
	Epoch  uint64 `json:"epoch"`
	Digest string `json:"digest"`
	// Level is the answering node's featureLevel (absent: a build from before levels, 1).
	Level int `json:"level,omitempty"`
	// NBDAddr is the address the node serves block volumes on ("": none).
	NBDAddr string `json:"nbd_addr,omitempty"`
	// NBDTLS says the NBD listener requires TLS (its URIs are nbds://). An older node
	// does not send it: its listener is plain.
	NBDTLS bool `json:"nbd_tls,omitempty"`
}

// featureLevel says which map commands this build's managers apply. A command a level
// added is proposed only while every node the leader hears from runs a build at that
// level or later: an older manager would refuse it (it does not know it) and build a
// different map. Level 2 added bucket configurations (OpSetBucketConfig); level 3 users
// and sealed keys (the secret store); level 4 versioning: a bucket's versioning
// configuration is set only once every node stores and serves versioned records (an
// older store would take a version for the key's null version and replace the others);
// level 5 records with an owner, an ACL or encryption (record version 6), which the S3
// layer writes only once the map's Level says every node reads them (OpRaiseLevel), and
// the bucket configurations that enable them ("acl", "ownershipControls"); level 6
// internode TLS: the cluster's CA and its requirement in the map (OpSetInternodeTLS),
// set only once every node's listener takes TLS and enrols; level 7 lifecycle: a bucket's
// lifecycle configuration is set only once every storage node runs the lifecycle runner
// (an older node would leave the objects it is the first holder of unexpired), and volume
// snapshots, clones, rollbacks and the reclaim of their layers (OpSnapshotVolume...), and bucket
// notifications: the targets in the map (OpPutNotifyTarget) and the "notification" bucket
// configuration, set only once every node's store writes outbox entries and runs a
// deliverer; level 8 erasure-coded volumes: a volume is created in a class other than
// STANDARD only once every node's state machine takes erasure-coded volumes (an older
// one refuses them) and every store fences their shards' writes (internal/volume ec.go).
// The archive tiers and water marks (OpPutTier, OpRemoveTier, OpSetWaterMarks) are level 8
// too: they came in the same release. Level 9 explicit ACL grants: an object's ACL or a
// bucket's "acl" configuration that is a grant list rather than a canned ACL's name
// (internal/s3api acl.go), which a build before 9 reads as granting nothing; the S3
// layer keeps one only once the map's Level is 9.
// Level 9 also: class tiers take migrations (their copies
// are objects of clustermap.TierBucket, which OpPutTier creates only from level 9 on:
// an older gateway cannot read them), and lifecycle configurations with Transition or
// NoncurrentVersionTransition rules (an older runner refuses to parse them and would
// expire nothing in the bucket).
// Level 9 also: erasure-coded PUTs name their stripes by a
// tag and take their version once the body is complete (gateway.LevelTaggedStripes),
// only once every node's shard collection keeps a tag's stripes while the PUT may still
// be sending them (an older node's would collect them).
// Level 9 also, the volume journal: a volume's writer sends
// writes unsynced (wire.QUnsynced) and syncs the holders' journals at FLUSH
// (wire.PathJournalSync) only once the map's Level says every node serves journal syncs
// (journalLevel); no map command is new.
// Level 9 also: multi-data-center replication links (OpPutLink, OpRemoveLink): a link is
// made only once every storage node stacks changes for links and serves the link
// endpoint (docs/design/mdc.md).
// Level 10: the records of NBD client certificates (OpIssueNBDClient, OpRevokeNBDClient;
// nbdClientLevel): an older node's state machine does not know the commands, and its NBD
// listener would not refuse a revoked certificate. Level 10 also: lifecycle
// configurations with NoncurrentVersionTransition rules (a level-9 runner refuses to
// parse them and would expire nothing in the bucket).
// Level 11: range batches (wire.PathRangeBatch; rangeBatchLevel): a volume's writer sends
// the writes queued for one holder in one request only once every node serves the path.
// Level 11 also: read leases of the object cache (gateway.LevelReadLeases): gateways ask
// the holders for a lease with their version checks only once every node grants and
// revokes them (wire.QReadLease, wire.PathRevoke). Neither has a new map command; both
// came in the same release, so one level says every node serves both.
// Level 12: put batches (wire.PathObjectBatch; gateway.LevelPutBatches): a gateway sends
// the small object writes queued for one holder in one request only once every node
// serves the path (an older node answers it 404). No map command is new.
//
// Level 13: placement version 2, rendezvous with bounded load (Map.PlacementVersion,
// OpSetPlacement; clustermap.PlacementV2Level): an older build ignores the map's version
// and would compute other tables, so a map has version 2 only at Level 13 (a cluster
// bootstrapped with --placement v2 starts there), and no older node can join it then.
const featureLevel = 13

// The gateway's put batches need a level this build serves.
var _ [featureLevel - gateway.LevelPutBatches]struct{}

// rangeBatchLevel is the map Level from which a volume's writes to one holder may go in
// one request (range batches, internal/volume batch.go).
const rangeBatchLevel = 11

// nbdClientLevel is the map Level from which issued NBD client certificates are recorded
// in the map and can be revoked.
const nbdClientLevel = 10

// journalLevel is the map Level from which volume writes go through the holders' journals.
const journalLevel = 9

// commandLevel is the feature level a map command needs.
func commandLevel(c clustermap.Command) int {
	switch c.Op {
	case clustermap.OpSetBucketConfig:
		switch c.Key {
		case "versioning":
			return 4
		case "notification":
			return 7
		case "acl", "ownershipControls":
			// A bucket ACL or an Object Ownership other than BucketOwnerEnforced lets
			// requests write objects with an owner or an ACL (record version 6); an
			// older gateway would not honour them either.
			return 5
		case "lifecycle":
			return 7
		}
		return 2
	case clustermap.OpRaiseLevel:
		return c.Level
	case clustermap.OpSetPlacement:
		return clustermap.PlacementV2Level
	case clustermap.OpCreateVolume:
		if c.Volume != nil && c.Volume.Class != "" && c.Volume.Class != clustermap.StandardClass {
			return 8
		}
		return 5
	case clustermap.OpResizeVolume, clustermap.OpAttachVolume, clustermap.OpDetachVolume, clustermap.OpDeleteVolume:
		return 5
	case clustermap.OpSetInternodeTLS:
		return 6
	case clustermap.OpPutTier, clustermap.OpRemoveTier, clustermap.OpSetWaterMarks:
		return 8
	case clustermap.OpPutLink, clustermap.OpRemoveLink, clustermap.OpPauseLink, clustermap.OpResumeLink:
		return 9
	case clustermap.OpIssueNBDClient, clustermap.OpRevokeNBDClient:
		return nbdClientLevel
	case clustermap.OpSnapshotVolume, clustermap.OpCloneVolume, clustermap.OpRollbackVolume, clustermap.OpDeleteSnapshot, clustermap.OpReclaimDone,
		clustermap.OpPutNotifyTarget, clustermap.OpRemoveNotifyTarget:
		return 7
	case clustermap.OpAddAccount, clustermap.OpSetAccount, clustermap.OpRemoveAccount, clustermap.OpPutKey, clustermap.OpRevokeKey, clustermap.OpSealUsers, clustermap.OpSetGrant:
		return 3
	}
	return 1
}

// levels remembers the feature level each node last answered the leader's probes with.
type levels struct {
	mu sync.Mutex
	by map[string]int
}

func (l *levels) set(id string, lvl int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]int{}
	}
	l.by[id] = max(lvl, 1)
}

// check refuses (Precondition, ErrUpgrading) command c unless every node of m that is
// not out has answered this node's probes (while it led) with a build at the level c
// needs: an older manager would refuse c (it does not know it) and build another map. A
// node that has not answered since this node led (down, or just elected) counts as old:
// the change waits until it answers, or is marked out.
func (l *levels) check(m *clustermap.Map, self string, c clustermap.Command) error {
	need := commandLevel(c)
	if need <= 1 || m.Level >= need {
		return nil // every node reached the level already (the map's level never goes down)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range m.Nodes {
		if n.ID == self || n.State == clustermap.StateOut {
			continue
		}
		lvl, ok := l.by[n.ID]
		switch {
		case !ok:
			return errors.E(errors.Precondition, fmt.Errorf("%w: node %s has not told the Raft leader which cairn it runs yet (%s needs every node at feature level %d); retry when it answers, or mark it out",
				gateway.ErrUpgrading, n.ID, c.Op, need))
		case lvl < need:
			return errors.E(errors.Precondition, fmt.Errorf("%w: node %s runs an older cairn (feature level %d, %s needs %d); finish the upgrade first",
				gateway.ErrUpgrading, n.ID, lvl, c.Op, need))
		}
	}
	return nil
}

// ringMonitor compares this node's map with a random peer's every few seconds (LeoFS's
// RING monitor). Maps arrive through the Raft log; a node that stays behind a peer, or a
// map that differs at the same epoch, is logged so an operator sees it.
func ringMonitor(ctx context.Context, mgr *clustermap.Manager, c *rpc.Client, self string, log *slog.Logger) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := mgr.Current()
		var peers []clustermap.Node
		for _, n := range m.Nodes {
			if n.ID != self && n.State == clustermap.StateUp {
				peers = append(peers, n)
			}
		}
		if len(peers) == 0 {
			continue
		}
		p := peers[mrand.IntN(len(peers))]
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var info mapInfo
		err := c.DoJSON(rctx, &rpc.Request{Method: http.MethodGet, Addr: p.Addr, Path: wire.PathMapInfo}, &info)
		cancel()
		if err != nil {
			continue // a peer that does not answer is the failure detector's business
		}
		mine := mgr.Current()
		switch {
		case info.Epoch == mine.Epoch && info.Digest != mine.Digest():
			log.Error("cluster map differs from a peer's at the same epoch", "peer", p.ID, "epoch", info.Epoch, "ours", mine.Digest(), "theirs", info.Digest)
		case info.Epoch > mine.Epoch:
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := mgr.WaitEpoch(wctx, info.Epoch)
			cancel()
			if err != nil && ctx.Err() == nil {
				log.Warn("this node's cluster map is behind a peer's (raft log not reaching it?)", "peer", p.ID, "ours", mgr.Current().Epoch, "theirs", info.Epoch)
			}
		}
	}
}

// writeFileAtomic writes data to path via a synced temporary file and a rename.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// loadNodeID returns the node's id: the one stored in the data directory, else the one
// configured, else a new random one; it is stored on first start. A configured id that
// differs from the stored one is an error (the data belongs to another node).
func loadNodeID(dir, configured string) (string, error) {
	path := filepath.Join(dir, "node-id")
	data, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(data))
		if configured != "" && configured != id {
			return "", errors.Errorf("", errors.Invalid, "this data directory belongs to node %q, not %q (--node-id)", id, configured)
		}
		return id, nil
	}
	if !os.IsNotExist(err) {
		return "", errors.E(errors.IO, err)
	}
	id := configured
	if id == "" {
		var b [4]byte
		rand.Read(b[:])
		host, _ := os.Hostname()
		if i := strings.IndexByte(host, '.'); i > 0 {
			host = host[:i]
		}
		id = "n-" + hex.EncodeToString(b[:])
		if host != "" {
			id = host + "-" + hex.EncodeToString(b[:])
		}
	}
	if err := writeFileAtomic(path, []byte(id+"\n"), 0o644); err != nil {
		return "", errors.E(errors.IO, err)
	}
	return id, nil
}

// loadSecret returns the cluster secret: the configured one, else the one stored in the
// data directory; a bootstrap node without either generates one. It is stored (0600) so
// restarts need no flag.
func loadSecret(dir, configured string, mayGenerate bool) (string, bool, error) {
	path := filepath.Join(dir, "cluster-secret")
	stored := ""
	if data, err := os.ReadFile(path); err == nil {
		stored = strings.TrimSpace(string(data))
	}
	s, generated := configured, false
	switch {
	case s != "":
	case stored != "":
		s = stored
	case mayGenerate:
		var b [24]byte
		rand.Read(b[:])
		s, generated = hex.EncodeToString(b[:]), true
	default:
		return "", false, errors.E(errors.Invalid, "joining a cluster needs its secret: set CAIRN_CLUSTER_SECRET or --cluster-secret-file (the bootstrap node printed it and keeps it in DATA/cluster-secret)")
	}
	if len(s) < 16 {
		return "", false, errors.E(errors.Invalid, "the cluster secret must be at least 16 characters")
	}
	if s != stored {
		if err := writeFileAtomic(path, []byte(s+"\n"), 0o600); err != nil {
			return "", false, errors.E(errors.IO, err)
		}
	}
	return s, generated, nil
}

// applyer changes the cluster map through the Raft leader, from any node.
type applyer struct {
	mgr    *clustermap.Manager
	rpc    *rpc.Client
	self   string
	levels levels // the builds of the nodes, as this node's monitor heard them while it led
}

// leaderApply applies c on this node, the Raft leader, unless a node runs too old a build.
func (a *applyer) leaderApply(ctx context.Context, c clustermap.Command) (*clustermap.Map, error) {
	if err := a.levels.check(a.mgr.Current(), a.self, c); err != nil {
		// A node that joined a moment ago (or a leader just elected) has not been
		// probed yet: ask the unknown nodes now rather than refuse.
		if !a.askLevels(ctx, a.mgr.Current()) {
			return nil, err
		}
		if err := a.levels.check(a.mgr.Current(), a.self, c); err != nil {
			return nil, err
		}
	}
	return a.mgr.Apply(ctx, c)
}

// askLevels asks the nodes whose feature level this leader has not heard for it (at most
// 2 s) and reports whether there were any.
func (a *applyer) askLevels(ctx context.Context, m *clustermap.Map) bool {
	a.levels.mu.Lock()
	var unknown []clustermap.Node
	for _, n := range m.Nodes {
		if _, ok := a.levels.by[n.ID]; !ok && n.ID != a.self && n.State != clustermap.StateOut {
			unknown = append(unknown, n)
		}
	}
	a.levels.mu.Unlock()
	if len(unknown) == 0 || a.rpc == nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range unknown {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var info mapInfo
			if err := a.rpc.DoJSON(pctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathMapInfo}, &info); err == nil {
				a.levels.set(n.ID, info.Level)
			}
		}()
	}
	wg.Wait()
	return true
}

// Apply runs c on the leader (forwarding it if this node is not the leader, retrying
// while an election is in progress) and waits until this node's map has the result.
// noLeaderWait is how long Apply waits for a usable Raft leader before it answers that
// the cluster map cannot change.
const noLeaderWait = 3 * time.Second

func (a *applyer) Apply(ctx context.Context, c clustermap.Command) (*clustermap.Map, error) {
	const op errors.Op = "server.Apply"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var lastErr error
	var failing time.Time // since when every attempt failed
	for {
		var m *clustermap.Map
		var err error
		if a.mgr.IsLeader() {
			m, err = a.leaderApply(ctx, c)
		} else if _, addr := a.mgr.Leader(); addr != "" {
			body, _ := json.Marshal(c)
			var ans struct {
				Epoch uint64 `json:"epoch"`
			}
			err = a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodPost, Addr: addr, Path: wire.PathApply, Body: bytes.NewReader(body), Size: int64(len(body))}, &ans)
			err = upgradeError(c, err)
			if err == nil {
				m, err = a.mgr.WaitEpoch(ctx, ans.Epoch)
			}
		} else {
			err = errors.E(errors.Transient, "no raft leader (election in progress, or a majority of managers is down)")
		}
		if err == nil {
			return m, nil
		}
		if !errors.Is(errors.Transient, err) {
			return nil, errors.E(op, err)
		}
		lastErr = err
		if failing.IsZero() {
			failing = time.Now()
		}
		// An election takes a second or two; a leader that stays missing longer means a
		// majority of the managers is gone, and the client hears so at once rather than
		// after minutes of its own retries.
		if _, addr := a.mgr.Leader(); addr == "" && !a.mgr.IsLeader() && time.Since(failing) > noLeaderWait {
			return nil, errors.E(op, errors.Transient, fmt.Errorf("%w: no Raft leader for %s (a majority of the managers is down or unreachable)",
				gateway.ErrMapUnavailable, time.Since(failing).Round(time.Second)))
		}
		select {
		case <-ctx.Done():
			return nil, errors.E(op, errors.Transient, fmt.Errorf("%w: not committed within 15s (%v)", gateway.ErrMapUnavailable, lastErr))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// upgradeError recognizes, in the leader's answer to a forwarded command, a refusal
// because of an older build: the leader's own check (ErrUpgrading, which does not cross
// the wire as a sentinel) or an older leader that does not know the command at all.
func upgradeError(c clustermap.Command, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case errors.Is(errors.Precondition, err) && strings.Contains(msg, gateway.ErrUpgrading.Error()):
	case errors.Is(errors.Invalid, err) && strings.Contains(msg, "unknown command"):
		msg = "the Raft leader runs an older cairn that does not know " + c.Op + "; finish the upgrade first"
	default:
		return err
	}
	return errors.E(errors.Precondition, fmt.Errorf("%w (%s)", gateway.ErrUpgrading, msg))
}

// Refresh waits until this node's map has every change the leader had committed when
// asked (at most 2 s): a read-your-writes barrier for map changes made through another node.
func (a *applyer) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if a.mgr.IsLeader() {
		// A leader just elected (a node restarting alone, say) may not have applied its
		// log yet.
		return a.mgr.Barrier(ctx)
	}
	_, addr := a.mgr.Leader()
	if addr == "" {
		return errors.E(errors.Transient, "no raft leader")
	}
	var info mapInfo
	if err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: addr, Path: wire.PathMapInfo}, &info); err != nil {
		return err
	}
	_, err := a.mgr.WaitEpoch(ctx, info.Epoch)
	return err
}

// join asks the cluster at addr to add self, trying again until ctx ends while it is
// unreachable; the answer is the cluster map.
func join(ctx context.Context, c *rpc.Client, addr string, self clustermap.Node) (*clustermap.Map, error) {
	const op errors.Op = "server.join"
	body, _ := json.Marshal(self)
	var m clustermap.Map
	for {
		err := c.DoJSON(ctx, &rpc.Request{Method: http.MethodPost, Addr: addr, Path: wire.PathJoin, Query: url.Values{"level": {strconv.Itoa(featureLevel)}}, Body: bytes.NewReader(body), Size: int64(len(body))}, &m)
		if err == nil {
			return &m, nil
		}
		switch {
		case errors.Is(errors.Permission, err):
			return nil, errors.E(op, errors.Permission, fmt.Errorf("the cluster at %s refused this node: %w", addr, err))
		case errors.Is(errors.Exist, err), errors.Is(errors.Invalid, err):
			return nil, errors.E(op, fmt.Errorf("the cluster at %s refused the join: %w", addr, err))
		case ctx.Err() != nil:
			return nil, errors.E(op, errors.Transient, fmt.Errorf("cannot join through %s: %w", addr, err))
		}
		select {
		case <-ctx.Done():
			return nil, errors.E(op, errors.Transient, fmt.Errorf("cannot join through %s: %w", addr, err))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// joinLevelAllowed refuses a joining node whose build is older than the cluster's feature
// level: once the map's Level says every node reads a format or takes a command, a node
// that does not would misread records and maps written for it. A join request says its
// build's level in the query. The released builds before this one sent none; the last of
// them ran at level 4, so an absent level counts as 4.
func joinLevelAllowed(q string, clusterLevel int) error {
	level := 4
	if q != "" {
		l, err := strconv.Atoi(q)
		if err != nil || l < 0 {
			return errors.E(errors.Invalid, "malformed join request: level is not a number")
		}
		level = l
	}
	if level < clusterLevel {
		return errors.E(errors.Invalid, fmt.Errorf("this node runs an older cairn (feature level %d) than the cluster has reached (%d): upgrade it to this cluster's build before it joins", level, clusterLevel))
	}
	return nil
}

// clusterHandler serves the cluster protocol: the map, joins and forwarded map changes.
type clusterHandler struct {
	mgr   *clustermap.Manager
	apply *applyer
	scrub *repair.Scrub // nil without the storage role
	// notify is the node's bucket notifications (nil without the storage role); self its id.
	notify *notifier
	self   string
	rep    *repair.Loops
	stats  func() any
	// nbdAddr is this node's NBD listener ("": none), told in map info answers, and
	// nbdTLS whether it requires TLS.
	nbdAddr string
	nbdTLS  bool
}

func (h *clusterHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case wire.PathMap:
		writeJSON(w, h.mgr.Current())
	case wire.PathNotifyHeld:
		if h.notify == nil {
			writeJSON(w, heldAnswer{})
			return
		}
		h.notify.serveHeld(w, r)
	case wire.PathNotify:
		st := NotifyStatus{Node: h.self}
		if h.notify != nil {
			st.Status = h.notify.d.Load().Status()
			if r := h.notify.mdc.Load(); r != nil {
				st.MDC = r.received()
			}
		}
		writeJSON(w, st)
	case wire.PathScrub:
		if h.scrub == nil {
			wire.WriteError(w, errors.E(errors.NotExist, "this node has no storage role: nothing to scrub"))
			return
		}
		if r.Method == http.MethodPost {
			switch r.URL.Query().Get("action") {
			case "start":
				h.scrub.Start()
			case "pause":
				h.scrub.Pause()
			default:
				wire.WriteError(w, errors.E(errors.Invalid, "unknown scrub action (want start or pause)"))
				return
			}
		}
		writeJSON(w, h.scrub.Status())
	case wire.PathReplace:
		writeJSON(w, h.rep.ApplyStatus())
	case wire.PathLifecycle:
		if r.Method == http.MethodPost {
			h.rep.RunLifecycleNow()
		}
		writeJSON(w, h.rep.LifecycleStatus())
	case wire.PathRecovery:
		if r.Method == http.MethodPost {
			rate, err := strconv.ParseInt(r.URL.Query().Get("rate"), 10, 64)
			if err != nil || rate < 0 {
				wire.WriteError(w, errors.E(errors.Invalid, "rate must be a number of bytes per second, 0 for unlimited"))
				return
			}
			h.rep.SetRecoveryRate(rate)
		}
		p := h.rep.Progress()
		if r.URL.Query().Get("held") != "" {
			// Counted now, not as of the last round: `cairn admin remove` decides on it.
			objs, n, err := h.rep.HeldElsewhere()
			if err != nil {
				wire.WriteError(w, err)
				return
			}
			p.HandoffObjects, p.HandoffBytes = objs, n
		}
		writeJSON(w, p)
	case wire.PathMapInfo:
		m := h.mgr.Current()
		writeJSON(w, mapInfo{Epoch: m.Epoch, Digest: m.Digest(), Level: featureLevel, NBDAddr: h.nbdAddr, NBDTLS: h.nbdTLS})
	case wire.PathStats:
		writeJSON(w, h.stats())
	case wire.PathJoin:
		var n clustermap.Node
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&n); err != nil || n.ID == "" || n.Addr == "" {
			wire.WriteError(w, errors.E(errors.Invalid, "malformed join request"))
			return
		}
		if err := joinLevelAllowed(r.URL.Query().Get("level"), h.mgr.Current().Level); err != nil {
			wire.WriteError(w, err)
			return
		}
		n.State = clustermap.StateUp
		m, err := h.apply.Apply(r.Context(), clustermap.Command{Op: clustermap.OpAddNode, Node: &n})
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, m)
	case wire.PathApply:
		if !h.mgr.IsLeader() {
			wire.WriteError(w, errors.E(errors.Transient, clustermap.ErrNotLeader))
			return
		}
		serveApply(w, r, h.apply.leaderApply)
	default:
		http.NotFound(w, r)
	}
}

// serveApply decodes a map command from r, applies it and answers the new epoch.
func serveApply(w http.ResponseWriter, r *http.Request, apply func(context.Context, clustermap.Command) (*clustermap.Map, error)) {
	var c clustermap.Command
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil {
		wire.WriteError(w, errors.E(errors.Invalid, "malformed command"))
		return
	}
	m, err := apply(r.Context(), c)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, map[string]uint64{"epoch": m.Epoch})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
