package clustermap

import (
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

func TestVolumeCommands(t *testing.T) {
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1,
		Nodes:   []Node{{ID: "n1", Addr: "a:1"}, {ID: "n2", Addr: "a:2"}},
		Classes: map[string]Class{StandardClass: {Name: StandardClass, N: 1, W: 1, R: 1, D: 1}, "EC": {Name: "EC", N: 3, W: 3, R: 2, D: 3, K: 2, M: 1}}}})
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
		{"ec class", Command{Op: OpCreateVolume, Volume: &Volume{Name: "x", ID: "0123456789abcde1", Size: 4096, BlockSize: DefaultBlockSize, Class: "EC"}}, errors.Invalid, nil},
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
