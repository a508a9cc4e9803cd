package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/wire"
)

// monitor is the node-state monitor (LeoFS's NodeState monitor): on the Raft leader it
// probes every node each second, marks a node that has not answered for downAfter
// `down` (gateways then route around it and queue its writes at once), and marks it `up`
// again when it answers. A node down for outAfter (if non-zero) is marked `out`: its
// partitions get new holders, which copy the data from the survivors (sync). It never
// marks out a node if fewer than N storage nodes would remain.
type monitor struct {
	mgr       *clustermap.Manager
	rpc       *rpc.Client
	apply     *applyer
	self      string
	downAfter time.Duration
	outAfter  time.Duration
	log       *slog.Logger
	box       *secrets.Box
}

func (mo *monitor) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	lastSeen := map[string]time.Time{}
	leading := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !mo.mgr.IsLeader() {
			leading = false
			continue
		}
		now := time.Now()
		m := mo.mgr.Current()
		if !leading {
			// A new leader gives every node a full period before judging it.
			leading = true
			clear(lastSeen)
		}
		answered := mo.probe(ctx, m)
		if len(m.Users) > 0 { // the probes just heard every node's level
			if err := sealLegacyUsers(ctx, mo.apply, m, mo.box); err != nil {
				mo.log.Warn("could not seal the access keys kept in the clear", "err", err)
			} else if len(mo.mgr.Current().Users) == 0 {
				mo.log.Info("sealed the access keys kept in the clear: every node runs a build with the secret store")
			}
		}
		mo.raiseLevel(ctx, m)
		for _, n := range m.Nodes {
			if n.State == clustermap.StateOut {
				delete(lastSeen, n.ID)
				continue
			}
			if _, ok := lastSeen[n.ID]; !ok {
				lastSeen[n.ID] = now
			}
			if n.ID == mo.self || answered[n.ID] {
				lastSeen[n.ID] = now
				if n.State == clustermap.StateDown {
					mo.set(ctx, n.ID, clustermap.StateUp, "node answers again")
				}
				continue
			}
			silent := now.Sub(lastSeen[n.ID])
			switch {
			case n.State == clustermap.StateUp && silent > mo.downAfter:
				mo.set(ctx, n.ID, clustermap.StateDown, "node silent for "+silent.Round(time.Second).String())
			case n.State == clustermap.StateDown && mo.outAfter > 0 && silent > mo.outAfter && mo.canTakeOut(m):
				mo.set(ctx, n.ID, clustermap.StateOut, "node down for "+silent.Round(time.Second).String()+": its copies are re-created on the others")
			}
		}
	}
}

// probe asks every node that is not out for its map epoch, in parallel, and returns which
// answered.
func (mo *monitor) probe(ctx context.Context, m *clustermap.Map) map[string]bool {
	timeout := min(mo.downAfter/2, 2*time.Second)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	answered := map[string]bool{}
	for _, n := range m.Nodes {
		if n.ID == mo.self || n.State == clustermap.StateOut {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var info mapInfo
			if err := mo.rpc.DoJSON(pctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathMapInfo}, &info); err == nil {
				mo.apply.levels.set(n.ID, info.Level)
				mu.Lock()
				answered[n.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answered
}

// raiseLevel raises the map's feature level to this build's once the probes heard every
// node that is not out answer with a build at that level or later (clustermap.Map.Level).
func (mo *monitor) raiseLevel(ctx context.Context, m *clustermap.Map) {
	if m.Level >= featureLevel {
		return
	}
	c := clustermap.Command{Op: clustermap.OpRaiseLevel, Level: featureLevel}
	if mo.apply.levels.check(m, mo.self, c) != nil {
		return // a node runs an older build, or has not answered yet
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := mo.apply.Apply(actx, c); err != nil {
		mo.log.Warn("could not raise the cluster's feature level", "level", featureLevel, "err", err)
		return
	}
	mo.log.Info("every node runs this build's features: cluster feature level raised", "level", featureLevel)
}

// canTakeOut reports whether one more storage node may be marked out: N storage nodes
// must remain (so that a wide outage does not shrink the cluster below its replica count
// and trigger mass re-replication onto too few nodes).
func (mo *monitor) canTakeOut(m *clustermap.Map) bool {
	cls, _ := m.Class("")
	need := max(cls.N, 1)
	for _, c := range m.Classes {
		need = max(need, c.N) // an erasure code needs K+M nodes to place new stripes
	}
	return len(m.StorageNodes())-1 >= need
}

func (mo *monitor) set(ctx context.Context, id string, st clustermap.NodeState, why string) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := mo.apply.Apply(actx, clustermap.Command{Op: clustermap.OpSetState, NodeID: id, State: st}); err != nil {
		mo.log.Warn("node-state monitor could not change a node's state", "node", id, "state", st, "err", err)
		return
	}
	switch st {
	case clustermap.StateDown:
		mo.log.Warn("node marked down", "node", id, "why", why)
	case clustermap.StateOut:
		mo.log.Warn("node marked out", "node", id, "why", why)
	default:
		mo.log.Info("node marked up", "node", id, "why", why)
	}
}
