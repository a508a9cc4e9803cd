package server

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

// volumeFreshness is how recently a node must have heard from the Raft leader to serve
// or take a volume write (clustermap.Manager.Fresh): a node paused or cut off longer
// may hold a lease that moved.
const volumeFreshness = 3 * time.Second

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
