package clustermap

import "hash/fnv"

// MaxClockTag is the number of distinct clock tags, 1..MaxClockTag (hlc.MaxTag): the low
// bits of every timestamp a node's clock issues, so that two nodes never issue the same
// object version even in the same microsecond.
const MaxClockTag = 1<<12 - 1

// DefaultClockTag is id's clock tag when no map places it: a hash of id in 1..MaxClockTag.
func DefaultClockTag(id string) uint16 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return uint16(h.Sum32()%MaxClockTag) + 1
}

// ClockTag returns the clock tag of node id in m. The nodes of m take their default
// tags in ID order, each the next free tag after its default when an earlier node holds
// that one, so no two nodes of a map share a tag (up to MaxClockTag nodes; beyond that
// the rest keep their defaults). Every node computes the same tags from the same map; a
// join can move the tag of a node whose default collided, and only for as long as the
// nodes disagree on the map can two of them hold one tag. A node not in m gets its
// default.
func (m *Map) ClockTag(id string) uint16 {
	if _, ok := m.nodeIndex(id); !ok || len(m.Nodes) > MaxClockTag {
		return DefaultClockTag(id)
	}
	return m.clockTags(id)[id]
}

// clockTags assigns the tags of ClockTag, stopping after node stop ("" for all).
func (m *Map) clockTags(stop string) map[string]uint16 {
	tags := make(map[string]uint16, len(m.Nodes))
	used := make(map[uint16]bool, len(m.Nodes))
	for _, n := range m.Nodes { // sorted by ID
		t := DefaultClockTag(n.ID)
		for used[t] {
			t = t%MaxClockTag + 1
		}
		used[t], tags[n.ID] = true, t
		if n.ID == stop {
			break
		}
	}
	return tags
}
