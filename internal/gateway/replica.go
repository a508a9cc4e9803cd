package gateway

import (
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// replica returns the Replica through which this gateway reaches target t: this node's
// store, or another node over the internode protocol (wrapped by Config.WrapReplica if
// set, as tests do to inject faults).
func (g *Gateway) replica(t topology.Target) replica.Replica {
	var r replica.Replica
	if t.Local {
		r = g.local
	} else {
		r = &replica.Remote{Node: t.ID, Addr: t.Addr, RPC: g.cfg.RPC, Timeout: g.cfg.Timeout, OnSlow: func() { g.topo.MarkSuspect(t.ID) }}
	}
	if g.cfg.WrapReplica != nil {
		r = g.cfg.WrapReplica(r)
	}
	return r
}

// ObjectReader reads one object version (through the replica that holds it, or from its
// stripes).
type ObjectReader = replica.Reader

// Preparer is implemented by readers that can fetch the start of a range before the
// response's status is sent (see replica.Preparer).
type Preparer = replica.Preparer
