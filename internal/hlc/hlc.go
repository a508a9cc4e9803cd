// Package hlc is a hybrid logical clock: 64-bit timestamps that follow wall-clock time
// (microseconds since 1970 in the high 52 bits, enough until the year 2112) but never go
// backwards on one node and always exceed every timestamp the node has observed from
// others (a 12-bit logical counter in the low bits breaks ties). Microseconds, not
// milliseconds: two gateways on clocks that agree order writes made one after the other
// by their wall time, as a write takes far longer than a microsecond. Object versions are ordered by these timestamps, so a node whose wall
// clock is behind cannot make an older write win over a newer one it has seen.
package hlc

import (
	"sync"
	"time"
)

// Timestamp is a hybrid logical clock value; larger is newer. Zero means "none".
type Timestamp = uint64

// LogicalBits is the width of the logical counter.
const LogicalBits = 12

// FromTime returns the smallest timestamp at wall time t.
func FromTime(t time.Time) Timestamp { return uint64(t.UnixMicro()) << LogicalBits }

// Time returns the wall-clock part of ts.
func Time(ts Timestamp) time.Time { return time.UnixMicro(int64(ts >> LogicalBits)) }

// Clock issues timestamps. The zero value is ready to use; it is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	last Timestamp
	// Now, for tests; nil means time.Now.
	Now func() time.Time
}

// Wall returns the clock's wall time (Now's, or time.Now), without the logical part or
// the timestamps observed: for measuring how long something took on this node.
func (c *Clock) Wall() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Clock) wall() Timestamp {
	if c.Now != nil {
		return FromTime(c.Now())
	}
	return FromTime(time.Now())
}

// Next returns a timestamp larger than every one issued or observed before.
func (c *Clock) Next() Timestamp {
	w := c.wall()
	c.mu.Lock()
	defer c.mu.Unlock()
	if w > c.last {
		c.last = w
	} else {
		c.last++
	}
	return c.last
}

// Observe records a timestamp seen from elsewhere, so later Next values exceed it.
func (c *Clock) Observe(ts Timestamp) {
	c.mu.Lock()
	if ts > c.last {
		c.last = ts
	}
	c.mu.Unlock()
}
