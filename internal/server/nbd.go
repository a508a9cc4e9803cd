package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// leaseClock tells whether this node's map can be trusted for volume leases now
// (docs/design/volumes.md, "Fencing"). Every confirmInterval the node confirms its map
// with the Raft leader: the leader itself checks that a quorum still follows it
// (VerifyLeader); another node asks the leader for its map epoch and waits until its own
// map has applied that epoch. The map counts as fresh for freshFor after the moment a
// confirmation was sent (a monotonic clock: it runs on while the process is paused). A
// node that was paused, cut off, or is behind the leader therefore refuses to serve
// volume I/O and to take volume writes until a confirmation sent after it came back
// succeeds, by which time its map shows a lease that moved; attach --force waits until
// the old holder is marked down, longer than freshFor.
type leaseClock struct {
	mgr    *clustermap.Manager
	client *rpc.Client
	last   atomic.Pointer[time.Time] // when the last successful confirmation was sent
}

const (
	confirmInterval = 500 * time.Millisecond
	freshFor        = 2 * time.Second
)

// fresh returns an error unless a confirmation sent less than freshFor ago succeeded.
func (lc *leaseClock) fresh() error {
	last := lc.last.Load()
	if last == nil {
		return errors.E(errors.Transient, "this node has not confirmed its cluster map with the Raft leader yet")
	}
	if age := time.Since(*last); age > freshFor {
		return errors.Errorf("", errors.Transient, "this node last confirmed its cluster map with the Raft leader %s ago", age.Round(time.Millisecond))
	}
	return nil
}

// run confirms the map every confirmInterval until ctx ends.
func (lc *leaseClock) run(ctx context.Context) {
	t := time.NewTicker(confirmInterval)
	defer t.Stop()
	for {
		sent := time.Now()
		if lc.confirm(ctx) == nil {
			lc.last.Store(&sent)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (lc *leaseClock) confirm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, freshFor)
	defer cancel()
	if lc.mgr.IsLeader() {
		return lc.mgr.VerifyLeader(ctx)
	}
	_, addr := lc.mgr.Leader()
	if addr == "" {
		return errors.E(errors.Transient, "no Raft leader")
	}
	var info mapInfo
	if err := lc.client.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: addr, Path: wire.PathMapInfo}, &info); err != nil {
		return err
	}
	_, err := lc.mgr.WaitEpoch(ctx, info.Epoch)
	return err
}

// listenNBD opens the NBD listener. NBD has no authentication: an address that is not
// loopback needs the networks its clients may come from (--nbd-allow).
func listenNBD(addr string, allow []netip.Prefix) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("--nbd-listen %s: %w", addr, err))
	}
	ip, perr := netip.ParseAddr(host)
	loopback := (perr == nil && ip.IsLoopback()) || host == "localhost"
	if !loopback && len(allow) == 0 {
		return nil, errors.Errorf("", errors.Invalid, "--nbd-listen %s is not a loopback address: NBD has no authentication, so give --nbd-allow with the networks its clients may connect from (e.g. 10.0.0.0/24)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.E(errors.IO, fmt.Errorf("--nbd-listen %s: %w", addr, err))
	}
	return ln, nil
}

// allowNBD is the NBD server's check of a client address: loopback clients always, others
// only from the allowed networks.
func allowNBD(allow []netip.Prefix) func(net.Addr) bool {
	return func(a net.Addr) bool {
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return false
		}
		ip := ap.Addr().Unmap()
		if ip.IsLoopback() {
			return true
		}
		for _, p := range allow {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
}
