package clustermap

import (
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

func TestTierCommands(t *testing.T) {
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1,
		Nodes: []Node{{ID: "n1", Addr: "a:1", DeviceClass: "ssd"}, {ID: "n2", Addr: "a:2", DeviceClass: "archive"}},
		Classes: map[string]Class{StandardClass: {Name: StandardClass, N: 1, W: 1, R: 1, D: 1},
			"COLD": {Name: "COLD", N: 1, W: 1, R: 1, D: 1, DeviceClass: "archive"},
			"HOT":  {Name: "HOT", N: 1, W: 1, R: 1, D: 1, DeviceClass: "ssd"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s3 := func(name, endpoint string) *Tier {
		return &Tier{Name: name, Kind: TierS3, Endpoint: endpoint, Bucket: "arch", AccessKey: "AK", Secret: "v1.sealed", Created: 1}
	}
	noS := s3("x", "http://127.0.0.1:9")
	noS.Secret = "clear"
	marks := func(dc string, high, low int, tier string) *WaterMarks {
		return &WaterMarks{DeviceClass: dc, High: high, Low: low, Tier: tier}
	}
	for _, tc := range []struct {
		name  string
		c     Command
		kind  errors.Kind // Other: accepted
		check func(m *Map) bool
	}{
		{"s3 tier", Command{Op: OpPutTier, Tier: s3("remote", "http://127.0.0.1:9000")}, errors.Other,
			func(m *Map) bool {
				_, ok := m.Buckets[TierBucket]
				return m.Tiers["remote"].RecallMode() == RecallRestore && !ok
			}},
		{"same name", Command{Op: OpPutTier, Tier: s3("remote", "http://127.0.0.1:9001")}, errors.Exist, nil},
		{"bad name", Command{Op: OpPutTier, Tier: s3("Remote", "http://127.0.0.1:9000")}, errors.Invalid, nil},
		{"endpoint with path", Command{Op: OpPutTier, Tier: s3("x", "http://127.0.0.1:9000/b")}, errors.Invalid, nil},
		{"endpoint not a url", Command{Op: OpPutTier, Tier: s3("x", "127.0.0.1:9000")}, errors.Invalid, nil},
		{"secret in the clear", Command{Op: OpPutTier, Tier: noS}, errors.Invalid, nil},
		{"bad recall", Command{Op: OpPutTier, Tier: &Tier{Name: "x", Kind: TierClass, Class: "COLD", Recall: "soon"}}, errors.Invalid, nil},
		{"unknown kind", Command{Op: OpPutTier, Tier: &Tier{Name: "x", Kind: "tape"}}, errors.Invalid, nil},
		{"class tier of STANDARD", Command{Op: OpPutTier, Tier: &Tier{Name: "x", Kind: TierClass, Class: StandardClass}}, errors.Invalid, nil},
		{"class tier of unknown class", Command{Op: OpPutTier, Tier: &Tier{Name: "x", Kind: TierClass, Class: "NONE"}}, errors.Invalid, nil},
		{"class tier below level 9: no tier bucket", Command{Op: OpPutTier, Tier: &Tier{Name: "cold", Kind: TierClass, Class: "COLD"}}, errors.Other,
			func(m *Map) bool {
				_, ok := m.Buckets[TierBucket]
				return m.Tiers["cold"].RecallMode() == RecallTransparent && !ok
			}},
		{"raise level", Command{Op: OpRaiseLevel, Level: TierBucketLevel}, errors.Other, nil},
		{"class tier at level 9: the tier bucket", Command{Op: OpPutTier, Tier: &Tier{Name: "hot", Kind: TierClass, Class: "HOT", Created: 7}}, errors.Other,
			func(m *Map) bool { return m.Buckets[TierBucket].Created == 7 }},
		{"marks low > high", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 70, 85, "remote")}, errors.Invalid, nil},
		{"marks low = high", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 70, 70, "remote")}, errors.Invalid, nil},
		{"marks over 100", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 101, 70, "remote")}, errors.Invalid, nil},
		{"marks of unknown device class", Command{Op: OpSetWaterMarks, Marks: marks("nvme", 85, 70, "remote")}, errors.Invalid, nil},
		{"marks to unknown tier", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 85, 70, "tape")}, errors.NotExist, nil},
		{"marks to own device class", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 85, 70, "hot")}, errors.Invalid, nil},
		{"marks", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 85, 70, "remote")}, errors.Other,
			func(m *Map) bool { return m.WaterMarks["ssd"].High == 85 && m.WaterMarks["ssd"].Tier == "remote" }},
		{"remove tier in use", Command{Op: OpRemoveTier, Name: "remote"}, errors.Precondition, nil},
		{"remove unknown tier", Command{Op: OpRemoveTier, Name: "tape"}, errors.NotExist, nil},
		{"marks to the class tier", Command{Op: OpSetWaterMarks, Marks: marks("ssd", 90, 60, "cold")}, errors.Other,
			func(m *Map) bool { return m.WaterMarks["ssd"].Tier == "cold" }},
		{"remove tier", Command{Op: OpRemoveTier, Name: "remote"}, errors.Other, func(m *Map) bool { _, ok := m.Tiers["remote"]; return !ok }},
		{"clear marks", Command{Op: OpSetWaterMarks, Marks: &WaterMarks{DeviceClass: "ssd"}}, errors.Other, func(m *Map) bool { return m.WaterMarks == nil }},
		{"clear no marks", Command{Op: OpSetWaterMarks, Marks: &WaterMarks{DeviceClass: "ssd"}}, errors.NotExist, nil},
	} {
		nm, err := ApplyCommand(m, tc.c)
		if errors.KindOf(err) != tc.kind || (err != nil && tc.kind == errors.Other) {
			t.Fatalf("%s: %v, want kind %v", tc.name, err, tc.kind)
		}
		if err != nil {
			continue
		}
		if nm.Epoch != m.Epoch+1 {
			t.Fatalf("%s: epoch %d after %d", tc.name, nm.Epoch, m.Epoch)
		}
		if tc.check != nil && !tc.check(nm) {
			t.Fatalf("%s: tiers %+v marks %+v", tc.name, nm.Tiers, nm.WaterMarks)
		}
		// Clone copies the tiers and marks: a later command does not change this map.
		if c := nm.Clone(); c.Digest() != nm.Digest() {
			t.Fatalf("%s: clone digest differs", tc.name)
		}
		m = nm
	}
}
