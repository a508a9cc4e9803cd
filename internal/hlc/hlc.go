// Package hlc is a hybrid logical clock: 64-bit timestamps that follow wall-clock time
// (microseconds since 1970 in the high 52 bits, enough until the year 2112) but never go
// backwards on one node and always exceed every timestamp the node has observed from
// others (a 12-bit logical counter in the low bits breaks ties). Microseconds, not
// milliseconds: two gateways on clocks that agree order writes made one after the other
// by their wall time, as a write takes far longer than a microsecond. Object versions are
// ordered by these timestamps, so a node whose wall clock is behind cannot make an older
// write win over a newer one it has seen.
//
// A timestamp names an object version, so two nodes must never issue the same one. A
// Clock given a tag (SetTag: a cairn node's, unique in its cluster map) issues only
// timestamps whose low 12 bits are the tag: two nodes with different tags cannot collide
// even in the same microsecond, and a node issues at most one timestamp per microsecond
// of its clock (more run the clock ahead of the wall, as any HLC does when it must).
package hlc

import (
	"sync"
	"time"
)

// Timestamp is a hybrid logical clock value; larger is newer. Zero means "none".
type Timestamp = uint64

// LogicalBits is the width of the logical counter.
const LogicalBits = 12

// MaxTag is the largest clock tag; tags are 1..MaxTag, 0 means none.
const MaxTag = 1<<LogicalBits - 1

// FromTime returns the smallest timestamp at wall time t.
func FromTime(t time.Time) Timestamp { return uint64(t.UnixMicro()) << LogicalBits }

// Time returns the wall-clock part of ts.
func Time(ts Timestamp) time.Time { return time.UnixMicro(int64(ts >> LogicalBits)) }

// Clock issues timestamps. The zero value is ready to use; it is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	last Timestamp
	tag  Timestamp // 0: the low bits are a plain counter
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

// SetTag makes every later Next end in tag (its low LogicalBits bits), so that clocks
// with different tags never issue the same timestamp. Tag 0 turns tagging off; a tag
// above MaxTag is taken modulo 2^LogicalBits. It may change at any time: Next stays
// monotonic.
func (c *Clock) SetTag(tag uint16) {
	c.mu.Lock()
	c.tag = Timestamp(tag) & MaxTag
	c.mu.Unlock()
}

// Next returns a timestamp larger than every one issued or observed before; with a tag,
// the smallest such timestamp ending in the tag.
func (c *Clock) Next() Timestamp {
	w := c.wall()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := max(w, c.last+1)
	if c.tag != 0 {
		t := n&^MaxTag | c.tag
		if t < n {
			t += 1 << LogicalBits
		}
		n = t
	}
	c.last = n
	return n
}

// Observe records a timestamp seen from elsewhere, so later Next values exceed it.
func (c *Clock) Observe(ts Timestamp) {
	c.mu.Lock()
	if ts > c.last {
		c.last = ts
	}
	c.mu.Unlock()
}
