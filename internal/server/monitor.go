package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/rpc"
)

// monitor is the node-state monitor (LeoFS's NodeState monitor): on the Raft leader it
// probes every node each second, marks a node that has not answered for downAfter
// `down` (gateways then route around it and queue its writes at once), and marks it `up`
// again when it answers. Marking a node `out` stays an operator's decision (`cairn admin
// mark NODE out`) until automatic recovery can re-create its copies elsewhere.
type monitor struct {
	mgr       *clustermap.Manager
	rpc       *rpc.Client
	apply     *applyer
	self      string
	downAfter time.Duration
	log       *slog.Logger
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
			if n.State == clustermap.StateUp && now.Sub(lastSeen[n.ID]) > mo.downAfter {
				mo.set(ctx, n.ID, clustermap.StateDown, "node silent for "+now.Sub(lastSeen[n.ID]).Round(time.Second).String())
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
			if err := mo.rpc.DoJSON(pctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: pathMapInfo}, &info); err == nil {
				mu.Lock()
				answered[n.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return answered
}

func (mo *monitor) set(ctx context.Context, id string, st clustermap.NodeState, why string) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := mo.apply.Apply(actx, clustermap.Command{Op: clustermap.OpSetState, NodeID: id, State: st}); err != nil {
		mo.log.Warn("node-state monitor could not change a node's state", "node", id, "state", st, "err", err)
		return
	}
	if st == clustermap.StateDown {
		mo.log.Warn("node marked down", "node", id, "why", why)
	} else {
		mo.log.Info("node marked up", "node", id, "why", why)
	}
}
