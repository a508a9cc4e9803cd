package clustermap

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/cairnfs/cairn/internal/errors"
)

// ErrNotLeader is wrapped (with kind Transient) by errors of operations that
// must run on the Raft leader when this node is not the leader. Use Leader to
// find the leader.
var ErrNotLeader = errors.New("clustermap: not the raft leader")

// ErrClosed is wrapped (with kind Transient) by errors of operations on a
// closed Manager (or one whose Raft instance was shut down, e.g. because it was
// removed from the group).
var ErrClosed = errors.New("clustermap: manager closed")

// Config configures a Manager.
type Config struct {
	// Dir holds the Raft state: Dir/wal (log and stable store) and
	// Dir/snapshots.
	Dir string
	// ID is this node's ID, used as the Raft server ID.
	ID string
	// Addr is this node's advertised internode address (the Raft server address).
	Addr string
	// Listener is where Raft traffic arrives. The Manager takes it over: Close
	// closes it.
	Listener net.Listener
	// Dial connects to another member's internode address.
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
	// Bootstrap, if non-nil and there is no existing Raft state in Dir, makes
	// this node bootstrap a single-voter cluster and apply OpInit with this map,
	// which must contain this node (with the manager role and address Addr).
	// Open then returns once the map is initialized.
	Bootstrap *Map
	// Logger receives the Manager's logs; Raft's own logs go to it at debug
	// level. Nil means slog.Default().
	Logger *slog.Logger
	// Voters is the desired number of voting members (odd; 0 means 3).
	Voters int
	// Raft timeouts. Zero means 500ms heartbeat, election timeout equal to the
	// heartbeat timeout and a leader lease of half the heartbeat timeout, so
	// that failover on a LAN takes one to two seconds.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// ReconcileInterval is how often the leader reconciles the Raft membership
	// with the map (it also does so on every map change). Zero means 1s.
	ReconcileInterval time.Duration

	// Testing knobs: zero means the defaults below.
	snapshotThreshold uint64
	trailingLogs      uint64
	walSegmentSize    int
}

const (
	defaultSnapshotThreshold = 1024
	defaultTrailingLogs      = 1024
	// raft-wal preallocates whole segments and only drops whole segments when
	// the log is compacted; the map's log entries are small.
	defaultWALSegmentSize = 4 << 20
	defaultVoters         = 3
	defaultHeartbeat      = 500 * time.Millisecond
	defaultReconcile      = time.Second
	maxActionsPerRound    = 8
)

// Manager runs this node's member of the Raft group that replicates the map.
//
// Every node of the map (not out) is a member of the group, so every node has
// the map locally (Current, Watch). On the leader, a reconciliation loop keeps
// the membership in line with the map: it adds nodes as nonvoters, keeps
// Config.Voters voters among the healthy manager nodes spread over zones,
// replaces voters whose node is down/draining/out, and removes members whose
// node is out or gone from the map (see planMembership for the exact rules).
type Manager struct {
	cfg   Config
	log   *slog.Logger
	fsm   *fsm
	raft  *raft.Raft
	trans *raft.NetworkTransport
	wal   *wal.WAL
	meta  *metadb.BoltMetaDB // wal.Close does not close it
	obs   *raft.Observer

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // guards watchers, changed and storing into fsm.cur
	watchers map[chan *Map]struct{}
	changed  chan struct{} // closed and replaced on every change
	kick     chan struct{} // wakes the reconcile loop

	reachMu     sync.Mutex
	unreachable map[string]bool // by server ID, from the leader's heartbeats

	closeOnce sync.Once
	closeErr  error
}

// Open starts this node's Raft member. With existing state in cfg.Dir it
// rejoins; with cfg.Bootstrap and no state it bootstraps a new cluster;
// otherwise it waits to be added by the leader (AddMember). Open takes
// ownership of cfg.Listener: Close closes it, and so does Open if it fails.
func Open(cfg Config) (_ *Manager, err error) {
	const op errors.Op = "clustermap.Open"
	if cfg.Listener != nil {
		defer func() {
			if err != nil {
				cfg.Listener.Close() // may already be closed with the transport
			}
		}()
	}
	if cfg.Dir == "" || cfg.ID == "" || cfg.Addr == "" || cfg.Listener == nil || cfg.Dial == nil {
		return nil, errors.E(op, errors.Invalid, "Dir, ID, Addr, Listener and Dial are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Voters <= 0 {
		cfg.Voters = defaultVoters
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = defaultHeartbeat
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = cfg.HeartbeatTimeout
	}
	if cfg.LeaderLeaseTimeout <= 0 {
		cfg.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = defaultReconcile
	}
	if cfg.snapshotThreshold == 0 {
		cfg.snapshotThreshold = defaultSnapshotThreshold
	}
	if cfg.trailingLogs == 0 {
		cfg.trailingLogs = defaultTrailingLogs
	}
	if cfg.walSegmentSize == 0 {
		cfg.walSegmentSize = defaultWALSegmentSize
	}
	if b := cfg.Bootstrap; b != nil {
		n, ok := b.Node(cfg.ID)
		if !ok {
			// Nodes may not be sorted yet in a caller-built map.
			for _, x := range b.Nodes {
				if x.ID == cfg.ID {
					n, ok = x, true
				}
			}
		}
		if !ok {
			return nil, errors.Errorf(op, errors.Invalid, "bootstrap map does not contain this node %s", cfg.ID)
		}
		if n.Addr != cfg.Addr {
			return nil, errors.Errorf(op, errors.Invalid, "bootstrap map has address %s for this node, not %s", n.Addr, cfg.Addr)
		}
		if !n.HasRole(RoleManager) {
			return nil, errors.Errorf(op, errors.Invalid, "bootstrap node %s must have the manager role", cfg.ID)
		}
	}
	log := cfg.Logger.With("component", "clustermap", "node", cfg.ID)
	raftLog := hclogAdapter(cfg.Logger.With("component", "raft", "node", cfg.ID))

	walDir := filepath.Join(cfg.Dir, "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(walDir, wal.WithLogger(raftLog.Named("wal")), wal.WithMetaStore(meta), wal.WithSegmentSize(cfg.walSegmentSize))
	if err != nil {
		meta.Close()
		return nil, errors.E(op, errors.IO, fmt.Errorf("open raft wal: %w", err))
	}
	closeWAL := func() {
		w.Close()
		meta.Close()
	}
	// One snapshot is kept: a new one replaces the old only once it is complete, and
	// Compact relies on nothing older surviving it.
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, 1, raftLog.Named("snapshots"))
	if err != nil {
		closeWAL()
		return nil, errors.E(op, errors.IO, fmt.Errorf("open snapshot store: %w", err))
	}
	hasState, err := raft.HasExistingState(w, w, snaps)
	if err != nil {
		closeWAL()
		return nil, errors.E(op, errors.IO, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg:         cfg,
		log:         log,
		wal:         w,
		meta:        meta,
		ctx:         ctx,
		cancel:      cancel,
		watchers:    make(map[chan *Map]struct{}),
		changed:     make(chan struct{}),
		kick:        make(chan struct{}, 1),
		unreachable: make(map[string]bool),
	}
	m.fsm = newFSM(m.publish)

	m.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &streamLayer{Listener: cfg.Listener, addr: advertisedAddr(cfg.Addr), dial: cfg.Dial},
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  raftLog.Named("net"),
	})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold = cfg.snapshotThreshold
	rc.TrailingLogs = cfg.trailingLogs
	rc.SnapshotInterval = 30 * time.Second
	rc.Logger = raftLog
	rc.NoLegacyTelemetry = true
	// A member removed from the group keeps running (as a follower that does
	// not campaign), so that it can be added back without a restart.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		m.trans.Close()
		closeWAL()
		cancel()
		return nil, errors.E(op, errors.Invalid, err)
	}
	r, err := raft.NewRaft(rc, m.fsm, w, w, snaps, m.trans)
	if err != nil {
		m.trans.Close()
		closeWAL()
		cancel()
		return nil, errors.E(op, errors.IO, fmt.Errorf("start raft: %w", err))
	}
	m.raft = r

	obsCh := make(chan raft.Observation, 64)
	m.obs = raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(m.obs)
	m.wg.Add(2)
	go m.observe(obsCh)
	go m.loop()

	bootstrapping := cfg.Bootstrap != nil && !hasState
	if bootstrapping {
		log.Info("bootstrapping new cluster", "addr", cfg.Addr)
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			Suffrage: raft.Voter, ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(cfg.Addr),
		}}})
		if err := f.Error(); err != nil {
			m.Close()
			return nil, errors.E(op, errors.IO, fmt.Errorf("bootstrap: %w", err))
		}
		wctx, wcancel := context.WithTimeout(ctx, 20*cfg.ElectionTimeout+10*time.Second)
		_, err := m.WaitEpoch(wctx, 1)
		wcancel()
		if err != nil {
			m.Close()
			return nil, errors.E(op, errors.Transient, fmt.Errorf("bootstrap: waiting for init: %w", err))
		}
	} else {
		log.Info("raft started", "addr", cfg.Addr, "existing_state", hasState)
	}
	return m, nil
}

// Current returns the newest applied map; before initialization it is an
// empty map with epoch 0, never nil. The map is shared: callers must not
// modify it.
func (m *Manager) Current() *Map { return m.fsm.cur.Load() }

// publish is the FSM's onChange: it stores the new map and notifies watchers.
func (m *Manager) publish(nm *Map) {
	m.mu.Lock()
	m.fsm.cur.Store(nm)
	for ch := range m.watchers {
		sendNewest(ch, nm)
	}
	close(m.changed)
	m.changed = make(chan struct{})
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// sendNewest puts nm in the 1-buffered ch, replacing an unread older map. Only
// publish sends on watcher channels, under m.mu, so the second send cannot block.
func sendNewest(ch chan *Map, nm *Map) {
	select {
	case ch <- nm:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- nm:
	default:
	}
}

// Watch returns a channel that first receives the current map and then every
// new map. A slow consumer misses intermediate maps but always gets the newest
// (epochs received are strictly increasing). The channel is closed when ctx
// ends or the Manager is closed.
func (m *Manager) Watch(ctx context.Context) <-chan *Map {
	ch := make(chan *Map, 1)
	m.mu.Lock()
	if m.ctx.Err() != nil {
		m.mu.Unlock()
		close(ch)
		return ch
	}
	ch <- m.Current()
	m.watchers[ch] = struct{}{}
	m.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-m.ctx.Done():
		}
		m.mu.Lock()
		delete(m.watchers, ch)
		close(ch)
		m.mu.Unlock()
	}()
	return ch
}

// WaitEpoch blocks until the local map's epoch is at least epoch and returns
// that map.
func (m *Manager) WaitEpoch(ctx context.Context, epoch uint64) (*Map, error) {
	const op errors.Op = "clustermap.WaitEpoch"
	for {
		m.mu.Lock()
		cur, ch := m.Current(), m.changed
		m.mu.Unlock()
		if cur.Epoch >= epoch {
			return cur, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, errors.E(op, errors.Transient, ctx.Err())
		case <-m.ctx.Done():
			return nil, errors.E(op, errors.Transient, ErrClosed)
		}
	}
}

// Apply replicates c through Raft and returns the map that results from it.
// It must run on the leader; elsewhere it fails with kind Transient wrapping
// ErrNotLeader (see Leader). A command rejected by the state machine returns
// the state machine's error, with its kind (Exist, NotExist, Invalid...).
// If ctx ends first the command may still be applied later.
func (m *Manager) Apply(ctx context.Context, c Command) (*Map, error) {
	const op errors.Op = "clustermap.Apply"
	if err := m.checkLeader(op); err != nil {
		return nil, err
	}
	data, err := json.Marshal(c)
	if err != nil {
		return nil, errors.E(op, errors.Invalid, err)
	}
	f := m.raft.Apply(data, enqueueTimeout(ctx))
	if err := m.wait(ctx, f); err != nil {
		return nil, m.raftError(op, err)
	}
	switch v := f.Response().(type) {
	case error:
		return nil, errors.E(op, v)
	case *Map:
		return v, nil
	default:
		return nil, errors.Errorf(op, errors.Other, "unexpected FSM response %T", v)
	}
}

// Leader returns the current leader's ID and address as known locally, or
// empty strings if there is none.
func (m *Manager) Leader() (id, addr string) {
	a, i := m.raft.LeaderWithID()
	return string(i), string(a)
}

// VerifyLeader returns nil if this node is the Raft leader and a quorum of voters still
// follows it (a round trip to them).
func (m *Manager) VerifyLeader(ctx context.Context) error {
	return m.wait(ctx, m.raft.VerifyLeader())
}

// IsLeader reports whether this node is the Raft leader.
func (m *Manager) IsLeader() bool { return m.raft.State() == raft.Leader }

// Barrier returns once this node, as the leader, has applied to its map every change
// committed before the call (a new leader may still be replaying its log). Leader only.
func (m *Manager) Barrier(ctx context.Context) error {
	return m.wait(ctx, m.raft.Barrier(enqueueTimeout(ctx)))
}

// Compact takes a snapshot of the map and drops this node's whole Raft log up to it (no
// trailing entries kept for slow followers: they get the snapshot instead); the older
// snapshot goes when the new one is complete. raft-wal deletes only whole segment files,
// and the active one only when every entry is dropped, so Compact retries (every 200 ms,
// until ctx ends) until no entry came after its snapshot. Afterwards no earlier command's
// bytes are left in this node's Raft files. It is for removing secrets that were once in
// the clear (package server) and costs a snapshot or a few.
func (m *Manager) Compact(ctx context.Context) error {
	const op errors.Op = "clustermap.Compact"
	for {
		done, err := m.compactOnce(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.E(op, errors.Transient, fmt.Errorf("the map kept changing: %w", ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (m *Manager) compactOnce(ctx context.Context) (bool, error) {
	const op errors.Op = "clustermap.Compact"
	keep := m.raft.ReloadableConfig()
	rc := keep
	rc.TrailingLogs = 0
	if err := m.raft.ReloadConfig(rc); err != nil {
		return false, errors.E(op, errors.Invalid, err)
	}
	err := m.wait(ctx, m.raft.Snapshot())
	if rerr := m.raft.ReloadConfig(keep); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil && !errors.IsErr(err, raft.ErrNothingNewToSnapshot) {
		return false, m.raftError(op, err)
	}
	// With nothing new since the last snapshot (one sent by the leader, say), the
	// entries it covers may still be kept as trailing logs: drop them too.
	snap, err := strconv.ParseUint(m.raft.Stats()["last_snapshot_index"], 10, 64)
	if err != nil {
		return false, errors.E(op, errors.IO, fmt.Errorf("last snapshot index: %w", err))
	}
	first, err := m.wal.FirstIndex()
	if err != nil {
		return false, errors.E(op, errors.IO, err)
	}
	last, err := m.wal.LastIndex()
	if err != nil {
		return false, errors.E(op, errors.IO, err)
	}
	if first == 0 {
		return true, nil // nothing left
	}
	if last != snap {
		return false, nil // an entry came after the snapshot: its segment would stay
	}
	if err := m.wal.DeleteRange(first, last); err != nil {
		return false, errors.E(op, errors.IO, err)
	}
	return true, nil
}

// AddMember adds a member to the Raft group, as a voter or a nonvoter, or
// promotes an existing nonvoter to voter, or updates a member's address. It is
// idempotent and never demotes: AddMember(id, addr, false) on an existing voter
// does nothing. Leader only. Note that the leader's membership reconciliation
// owns the voter set and may later promote or demote the member.
func (m *Manager) AddMember(ctx context.Context, id, addr string, voter bool) error {
	const op errors.Op = "clustermap.AddMember"
	if id == "" || addr == "" {
		return errors.E(op, errors.Invalid, "id and addr are required")
	}
	if err := m.checkLeader(op); err != nil {
		return err
	}
	members, err := m.Members()
	if err != nil {
		return errors.E(op, err)
	}
	for _, mb := range members {
		if mb.ID != id {
			continue
		}
		if mb.Addr == addr && (mb.Voter || !voter) {
			return nil
		}
		voter = voter || mb.Voter
	}
	var f raft.IndexFuture
	if voter {
		f = m.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, enqueueTimeout(ctx))
	} else {
		f = m.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, enqueueTimeout(ctx))
	}
	if err := m.wait(ctx, f); err != nil {
		return m.raftError(op, err)
	}
	m.log.Info("member added", "member", id, "addr", addr, "voter", voter)
	return nil
}

// RemoveMember removes a member from the Raft group (nothing if it is not a
// member). Leader only. Removing the leader itself makes it step down once the
// change is committed.
func (m *Manager) RemoveMember(ctx context.Context, id string) error {
	const op errors.Op = "clustermap.RemoveMember"
	if err := m.checkLeader(op); err != nil {
		return err
	}
	members, err := m.Members()
	if err != nil {
		return errors.E(op, err)
	}
	if !slices.ContainsFunc(members, func(mb Member) bool { return mb.ID == id }) {
		return nil
	}
	f := m.raft.RemoveServer(raft.ServerID(id), 0, enqueueTimeout(ctx))
	if err := m.wait(ctx, f); err != nil {
		return m.raftError(op, err)
	}
	m.log.Info("member removed", "member", id)
	return nil
}

// Members returns the latest Raft configuration known locally, sorted by ID.
func (m *Manager) Members() ([]Member, error) {
	const op errors.Op = "clustermap.Members"
	f := m.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, m.raftError(op, err)
	}
	var out []Member
	for _, s := range f.Configuration().Servers {
		out = append(out, Member{ID: string(s.ID), Addr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Close stops Raft, closes the listener and the WAL and closes watchers'
// channels. It is idempotent.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		m.raft.DeregisterObserver(m.obs)
		err := m.raft.Shutdown().Error() // also closes the transport
		m.wg.Wait()
		if e := m.trans.Close(); err == nil {
			err = e
		}
		if e := m.wal.Close(); err == nil {
			err = e
		}
		if e := m.meta.Close(); err == nil {
			err = e
		}
		if err != nil {
			m.closeErr = errors.E(errors.Op("clustermap.Close"), errors.IO, err)
		}
		m.log.Info("closed")
	})
	return m.closeErr
}

func (m *Manager) checkLeader(op errors.Op) error {
	if m.ctx.Err() != nil {
		return errors.E(op, errors.Transient, ErrClosed)
	}
	if m.raft.State() == raft.Shutdown {
		return errors.E(op, errors.Transient, ErrClosed)
	}
	if m.raft.State() != raft.Leader {
		return m.notLeader(op)
	}
	return nil
}

func (m *Manager) notLeader(op errors.Op) error {
	id, addr := m.Leader()
	if id == "" {
		return errors.E(op, errors.Transient, fmt.Errorf("%w (no leader known)", ErrNotLeader))
	}
	return errors.E(op, errors.Transient, fmt.Errorf("%w (leader is %s at %s)", ErrNotLeader, id, addr))
}

// raftError maps errors from raft futures (and contexts) to cairn errors.
func (m *Manager) raftError(op errors.Op, err error) error {
	switch {
	case errors.IsErr(err, raft.ErrNotLeader), errors.IsErr(err, raft.ErrLeadershipTransferInProgress):
		return m.notLeader(op)
	case errors.IsErr(err, raft.ErrRaftShutdown):
		return errors.E(op, errors.Transient, ErrClosed)
	case errors.IsErr(err, raft.ErrLeadershipLost), errors.IsErr(err, raft.ErrEnqueueTimeout),
		errors.IsErr(err, raft.ErrAbortedByRestore),
		errors.IsErr(err, context.Canceled), errors.IsErr(err, context.DeadlineExceeded):
		return errors.E(op, errors.Transient, err)
	}
	return errors.E(op, errors.IO, err)
}

// wait waits for a raft future, or for ctx or the Manager to end.
func (m *Manager) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-m.ctx.Done():
		return raft.ErrRaftShutdown
	}
}

// enqueueTimeout is the raft enqueue timeout for a call under ctx (0 = none).
func enqueueTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 0
}

// observe tracks which peers the leader fails to heartbeat.
func (m *Manager) observe(ch <-chan raft.Observation) {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case o := <-ch:
			m.reachMu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				m.unreachable[string(d.PeerID)] = true
			case raft.ResumedHeartbeatObservation:
				delete(m.unreachable, string(d.PeerID))
			}
			m.reachMu.Unlock()
		}
	}
}

func (m *Manager) reachable(id string) bool {
	m.reachMu.Lock()
	defer m.reachMu.Unlock()
	return !m.unreachable[id]
}

// reconcileState is the leader's memory between reconciliation rounds; it is
// reset when leadership changes.
type reconcileState struct {
	needBarrier bool
	memberSince map[string]time.Time
	strayFirst  map[string]time.Time
}

func (st *reconcileState) reset() {
	st.needBarrier = true
	st.memberSince = make(map[string]time.Time)
	st.strayFirst = make(map[string]time.Time)
}

// loop runs the leader's duties: initializing a bootstrapped map and keeping
// the Raft membership in line with the map.
func (m *Manager) loop() {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.ReconcileInterval)
	defer t.Stop()
	leaderCh := m.raft.LeaderCh()
	var st reconcileState
	st.reset()
	for {
		select {
		case <-m.ctx.Done():
			return
		case isLeader := <-leaderCh:
			st.reset()
			m.reachMu.Lock()
			clear(m.unreachable)
			m.reachMu.Unlock()
			if isLeader {
				m.log.Info("became raft leader")
			} else {
				m.log.Info("lost raft leadership")
			}
		case <-t.C:
		case <-m.kick:
		}
		if m.raft.State() != raft.Leader {
			continue
		}
		m.reconcile(&st)
	}
}

func (m *Manager) reconcile(st *reconcileState) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*m.cfg.ElectionTimeout+5*time.Second)
	defer cancel()
	if st.needBarrier {
		// Make sure the FSM has applied everything committed before acting on
		// the map.
		if err := m.wait(ctx, m.raft.Barrier(enqueueTimeout(ctx))); err != nil {
			m.log.Debug("barrier failed", "err", err)
			return
		}
		st.needBarrier = false
	}
	if m.cfg.Bootstrap != nil && m.Current().Epoch == 0 {
		_, err := m.Apply(ctx, Command{Op: OpInit, Init: m.cfg.Bootstrap})
		if err != nil && !errors.Is(errors.Exist, err) {
			m.log.Warn("applying bootstrap map", "err", err)
			return
		}
		m.log.Info("cluster map initialized")
	}
	if m.Current().Epoch == 0 {
		return // nothing to reconcile against
	}
	for range maxActionsPerRound {
		members, err := m.Members()
		if err != nil {
			m.log.Debug("reconcile: get configuration", "err", err)
			return
		}
		now := time.Now()
		cur := m.Current()
		seen := make(map[string]bool, len(members))
		for _, mb := range members {
			seen[mb.ID] = true
			if _, ok := st.memberSince[mb.ID]; !ok {
				st.memberSince[mb.ID] = now
			}
			if _, inMap := cur.Node(mb.ID); !inMap {
				if _, ok := st.strayFirst[mb.ID]; !ok {
					st.strayFirst[mb.ID] = now
				}
			} else {
				delete(st.strayFirst, mb.ID)
			}
		}
		for id := range st.memberSince {
			if !seen[id] {
				delete(st.memberSince, id)
				delete(st.strayFirst, id)
			}
		}
		interval := m.cfg.ReconcileInterval
		act := planMembership(planInput{
			m:         cur,
			members:   members,
			self:      m.cfg.ID,
			voters:    m.cfg.Voters,
			reachable: m.reachable,
			ready: func(id string) bool {
				return m.reachable(id) && now.Sub(st.memberSince[id]) >= interval
			},
			strayExpired: func(id string) bool {
				first, ok := st.strayFirst[id]
				return ok && now.Sub(first) >= 3*interval
			},
		})
		if act.kind == actNone {
			return
		}
		m.log.Info("reconciling raft membership", "action", act.kind.String(), "member", act.id, "addr", act.addr, "reason", act.reason)
		if err := m.do(ctx, act); err != nil {
			m.log.Warn("membership change failed", "action", act.kind.String(), "member", act.id, "err", err)
			return
		}
		if act.kind == actTransfer {
			return
		}
	}
}

func (m *Manager) do(ctx context.Context, a action) error {
	id, addr, to := raft.ServerID(a.id), raft.ServerAddress(a.addr), enqueueTimeout(ctx)
	var f raft.Future
	switch a.kind {
	case actAdd:
		f = m.raft.AddNonvoter(id, addr, 0, to)
	case actUpdateAddr:
		if a.voter {
			f = m.raft.AddVoter(id, addr, 0, to)
		} else {
			f = m.raft.AddNonvoter(id, addr, 0, to)
		}
	case actPromote:
		f = m.raft.AddVoter(id, addr, 0, to)
	case actDemote:
		f = m.raft.DemoteVoter(id, 0, to)
	case actRemove:
		f = m.raft.RemoveServer(id, 0, to)
	case actTransfer:
		f = m.raft.LeadershipTransferToServer(id, addr)
	default:
		return nil
	}
	return m.wait(ctx, f)
}

// streamLayer adapts the caller's listener and dialer to raft.StreamLayer.
type streamLayer struct {
	net.Listener
	addr net.Addr
	dial func(addr string, timeout time.Duration) (net.Conn, error)
}

func (s *streamLayer) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return s.dial(string(a), timeout)
}

// Addr returns the advertised address: raft uses it as this server's address.
func (s *streamLayer) Addr() net.Addr { return s.addr }

type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// hclogAdapter returns an hclog.Logger that forwards every line to l at debug
// level (or discards everything if l does not log at debug level).
func hclogAdapter(l *slog.Logger) hclog.Logger {
	level := hclog.Off
	if l.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:        "raft",
		Level:       level,
		Output:      slogWriter{l},
		DisableTime: true,
	})
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Debug(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
