package clustermap

import (
	"fmt"
	"testing"
)

// Every node of a map gets its own tag in 1..MaxClockTag, at every size up to the limit,
// and a node's tag does not depend on which node asks.
func TestClockTagsUnique(t *testing.T) {
	for _, size := range []int{1, 6, 100, 1000, MaxClockTag} {
		m := &Map{}
		for i := range size {
			m.Nodes = append(m.Nodes, Node{ID: fmt.Sprintf("node-%05d", i)})
		}
		sortNodes(m.Nodes)
		seen := make(map[uint16]string, size)
		all := m.clockTags("")
		for i, n := range m.Nodes {
			tag := all[n.ID]
			if i%97 == 0 && m.ClockTag(n.ID) != tag {
				t.Fatalf("%d nodes: ClockTag(%s) = %d, the map's assignment gives %d", size, n.ID, m.ClockTag(n.ID), tag)
			}
			if tag == 0 || tag > MaxClockTag {
				t.Fatalf("%d nodes: %s has tag %d, outside 1..%d", size, n.ID, tag, MaxClockTag)
			}
			if o, ok := seen[tag]; ok {
				t.Fatalf("%d nodes: %s and %s share tag %d", size, o, n.ID, tag)
			}
			seen[tag] = n.ID
		}
	}
	if got, want := (&Map{}).ClockTag("stranger"), DefaultClockTag("stranger"); got != want {
		t.Fatalf("a node outside the map: tag %d, want its default %d", got, want)
	}
}
