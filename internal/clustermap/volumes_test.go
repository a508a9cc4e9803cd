package clustermap

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

func TestVolumeCommands(t *testing.T) {
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1,
		Nodes: []Node{{ID: "n1", Addr: "a:1"}, {ID: "n2", Addr: "a:2"}, {ID: "n3", Addr: "a:3", Roles: []string{RoleStorage}},
			{ID: "n4", Addr: "a:4", Roles: []string{RoleStorage}}, {ID: "n5", Addr: "a:5", Roles: []string{RoleStorage}}},
		Classes: map[string]Class{StandardClass: {Name: StandardClass, N: 1, W: 1, R: 1, D: 1}, "EC": {Name: "EC", N: 3, W: 3, R: 2, D: 3, K: 2, M: 1}, "EC3": {Name: "EC3", N: 4, W: 4, R: 3, D: 3, K: 3, M: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	vol := func(name, id string, size int64) *Volume {
		return &Volume{Name: name, ID: id, Size: size, BlockSize: DefaultBlockSize, Created: 1}
	}
	for _, tc := range []struct {
		name  string
		c     Command
		kind  errors.Kind // Other: accepted
		check func(m *Map) bool
	}{
		{"create", Command{Op: OpCreateVolume, Volume: vol("db", "0123456789abcdef", 1<<30)}, errors.Other,
			func(m *Map) bool { _, ok := m.Buckets[VolumeBucket]; return ok && m.Volumes["db"].Size == 1<<30 }},
		{"same name", Command{Op: OpCreateVolume, Volume: vol("db", "0123456789abcde0", 1<<30)}, errors.Exist, nil},
		{"same id", Command{Op: OpCreateVolume, Volume: vol("db2", "0123456789abcdef", 1<<30)}, errors.Exist, nil},
		{"bad name", Command{Op: OpCreateVolume, Volume: vol("-x", "0123456789abcde1", 1<<30)}, errors.Invalid, nil},
		{"odd size", Command{Op: OpCreateVolume, Volume: vol("x", "0123456789abcde1", 1000)}, errors.Invalid, nil},
		{"ec class, k not a power of two", Command{Op: OpCreateVolume, Volume: &Volume{Name: "x", ID: "0123456789abcde1", Size: 4096, BlockSize: DefaultBlockSize, Class: "EC3"}}, errors.Invalid, nil},
		{"ec class", Command{Op: OpCreateVolume, Volume: &Volume{Name: "e", ID: "0123456789abcde2", Size: 4096, BlockSize: DefaultBlockSize, Class: "EC"}}, errors.Other,
			func(m *Map) bool {
				return m.Volumes["e"].Class == "EC" && strings.Join(m.Volumes["e"].Nodes, ",") == "n3,n4,n5"
			}},
		{"snapshot of an ec volume", Command{Op: OpSnapshotVolume, Name: "e", Snapshot: "s", Layer: "0123456789abcde3"}, errors.Invalid, nil},
		{"attach", Command{Op: OpAttachVolume, Name: "db", NodeID: "n1"}, errors.Other,
			func(m *Map) bool { return m.Volumes["db"].Holder == "n1" && m.Volumes["db"].Epoch == 1 }},
		{"attach elsewhere", Command{Op: OpAttachVolume, Name: "db", NodeID: "n2"}, errors.Precondition, nil},
		{"attach unknown node", Command{Op: OpAttachVolume, Name: "db", NodeID: "n9", Force: true}, errors.NotExist, nil},
		{"delete attached", Command{Op: OpDeleteVolume, Name: "db"}, errors.Precondition, nil},
		{"force attach", Command{Op: OpAttachVolume, Name: "db", NodeID: "n2", Force: true}, errors.Other,
			func(m *Map) bool { return m.Volumes["db"].Holder == "n2" && m.Volumes["db"].Epoch == 2 }},
		{"detach by another", Command{Op: OpDetachVolume, Name: "db", NodeID: "n1"}, errors.Precondition, nil},
		{"shrink", Command{Op: OpResizeVolume, Name: "db", Size: 1 << 20}, errors.Invalid, nil},
		{"grow", Command{Op: OpResizeVolume, Name: "db", Size: 2 << 30}, errors.Other, func(m *Map) bool { return m.Volumes["db"].Size == 2<<30 }},
		{"detach", Command{Op: OpDetachVolume, Name: "db", NodeID: "n2"}, errors.Other,
			func(m *Map) bool { return m.Volumes["db"].Holder == "" && m.Volumes["db"].Epoch == 2 }},
		{"reattach keeps counting", Command{Op: OpAttachVolume, Name: "db", NodeID: "n1"}, errors.Other, func(m *Map) bool { return m.Volumes["db"].Epoch == 3 }},
		{"detach by anyone", Command{Op: OpDetachVolume, Name: "db"}, errors.Other, nil},
		{"delete", Command{Op: OpDeleteVolume, Name: "db"}, errors.Other, func(m *Map) bool { _, ok := m.Volumes["db"]; return !ok }},
	} {
		nm, err := ApplyCommand(m, tc.c)
		if errors.KindOf(err) != tc.kind || (err != nil && tc.kind == errors.Other) {
			t.Fatalf("%s: %v, want kind %v", tc.name, err, tc.kind)
		}
		if err != nil {
			continue
		}
		if tc.check != nil && !tc.check(nm) {
			t.Fatalf("%s: map %+v", tc.name, nm.Volumes)
		}
		m = nm
	}
}

// TestSnapshotCommands: snapshot, clone, rollback and the release of layers, with the
// refusals the CLI shows.
func TestSnapshotCommands(t *testing.T) {
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1,
		Nodes:   []Node{{ID: "n1", Addr: "a:1"}},
		Classes: map[string]Class{StandardClass: {Name: StandardClass, N: 1, W: 1, R: 1, D: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := func(n int) string { return fmt.Sprintf("%016x", n) }
	for _, tc := range []struct {
		name  string
		c     Command
		kind  errors.Kind
		check func(m *Map) bool
	}{
		{"create", Command{Op: OpCreateVolume, Volume: &Volume{Name: "db", ID: id(1), Size: 1 << 30, BlockSize: DefaultBlockSize}}, errors.Other, nil},
		{"attach", Command{Op: OpAttachVolume, Name: "db", NodeID: "n1"}, errors.Other, nil},
		{"snapshot attached", Command{Op: OpSnapshotVolume, Name: "db", Snapshot: "s1", Layer: id(2)}, errors.Other, func(m *Map) bool {
			v := m.Volumes["db"]
			return v.ID == id(2) && v.Parent == id(1) && v.Holder == "n1" && v.Epoch == 1 && m.Layers[id(1)].Parent == "" && m.Snapshots["db@s1"].Layer == id(1)
		}},
		{"snapshot name taken", Command{Op: OpSnapshotVolume, Name: "db", Snapshot: "s1", Layer: id(3)}, errors.Exist, nil},
		{"layer id taken", Command{Op: OpSnapshotVolume, Name: "db", Snapshot: "s2", Layer: id(1)}, errors.Exist, nil},
		{"bad snapshot name", Command{Op: OpSnapshotVolume, Name: "db", Snapshot: "a@b", Layer: id(3)}, errors.Invalid, nil},
		{"snapshot unknown", Command{Op: OpSnapshotVolume, Name: "nope", Snapshot: "s", Layer: id(3)}, errors.NotExist, nil},
		{"snapshot 2", Command{Op: OpSnapshotVolume, Name: "db", Snapshot: "s2", Layer: id(3)}, errors.Other, func(m *Map) bool {
			return m.Volumes["db"].Parent == id(2) && m.Layers[id(2)].Parent == id(1)
		}},
		{"clone", Command{Op: OpCloneVolume, Snapshot: "db@s1", Volume: &Volume{Name: "c", ID: id(4)}}, errors.Other, func(m *Map) bool {
			v := m.Volumes["c"]
			return v.Parent == id(1) && v.Size == 1<<30 && v.BlockSize == DefaultBlockSize && v.Holder == ""
		}},
		{"clone unknown", Command{Op: OpCloneVolume, Snapshot: "db@nope", Volume: &Volume{Name: "c2", ID: id(5)}}, errors.NotExist, nil},
		{"delete snapshot with a clone", Command{Op: OpDeleteSnapshot, Name: "db", Snapshot: "s1"}, errors.Precondition, nil},
		{"rollback attached", Command{Op: OpRollbackVolume, Name: "db", Snapshot: "s1", Layer: id(6)}, errors.Precondition, nil},
		{"delete with snapshots", Command{Op: OpDeleteVolume, Name: "c"}, errors.Other, nil}, // c has none
		{"detach", Command{Op: OpDetachVolume, Name: "db"}, errors.Other, nil},
		{"delete db with snapshots", Command{Op: OpDeleteVolume, Name: "db"}, errors.Precondition, nil},
		{"rollback unknown snapshot", Command{Op: OpRollbackVolume, Name: "db", Snapshot: "x", Layer: id(6)}, errors.NotExist, nil},
		// The head id(3) is garbage; s2's layer id(2) keeps its name.
		{"rollback", Command{Op: OpRollbackVolume, Name: "db", Snapshot: "s1", Layer: id(6)}, errors.Other, func(m *Map) bool {
			v := m.Volumes["db"]
			return v.ID == id(6) && v.Parent == id(1) && m.Garbage[id(3)].All && len(m.Garbage) == 1
		}},
		// s2's layer has no child now: it goes whole; s1's layer keeps its name.
		{"delete s2", Command{Op: OpDeleteSnapshot, Name: "db", Snapshot: "s2"}, errors.Other, func(m *Map) bool {
			_, ok := m.Layers[id(2)]
			return !ok && m.Garbage[id(2)].All && m.Layers[id(1)].ID == id(1)
		}},
		// s1's layer has one child, the head id(6): its hidden objects go.
		{"delete s1", Command{Op: OpDeleteSnapshot, Name: "db", Snapshot: "s1"}, errors.Other, func(m *Map) bool {
			g, ok := m.Garbage[id(1)]
			return ok && !g.All && m.Layers[id(1)].ID == id(1)
		}},
		{"reclaim done, stale seq", Command{Op: OpReclaimDone, Layer: id(1), Seq: 1}, errors.Other, func(m *Map) bool { _, ok := m.Garbage[id(1)]; return ok }},
		// The head goes: its unnamed parent has no child left and goes whole.
		{"delete db", Command{Op: OpDeleteVolume, Name: "db"}, errors.Other, func(m *Map) bool {
			return len(m.Layers) == 0 && m.Garbage[id(1)].All
		}},
	} {
		nm, err := ApplyCommand(m, tc.c)
		if errors.KindOf(err) != tc.kind || (err != nil && tc.kind == errors.Other) {
			t.Fatalf("%s: %v, want kind %v", tc.name, err, tc.kind)
		}
		if err != nil {
			continue
		}
		if tc.check != nil && !tc.check(nm) {
			t.Fatalf("%s: volumes %+v layers %+v snapshots %+v garbage %+v", tc.name, nm.Volumes, nm.Layers, nm.Snapshots, nm.Garbage)
		}
		m = nm
	}
	for l, g := range m.Garbage {
		if m, err = ApplyCommand(m, Command{Op: OpReclaimDone, Layer: l, Seq: g.Seq}); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.Garbage) != 0 {
		t.Fatalf("garbage left: %v", m.Garbage)
	}
}
