package object

import (
	"math/rand/v2"
	"testing"
)

// Merging a version's in-place metadata from its copies gives the same record in any
// order, each group from the copy that changed it last, and a COMPLIANCE retention never
// shorter than any copy's.
func TestMergeMetaOrderFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 500; round++ {
		var copies []*Object
		for i := 0; i < 4; i++ {
			o := &Object{HLC: 10}
			if rng.IntN(2) == 0 {
				o.TagsHLC = uint64(11 + rng.IntN(20))
				o.Tags = [][2]string{{"t", string(rune('a' + o.TagsHLC%26))}}
			}
			if rng.IntN(2) == 0 {
				// One change, one value: the HLC names the retention it set.
				o.RetentionHLC = uint64(11 + rng.IntN(20))
				mode := LockGovernance
				if o.RetentionHLC%3 == 0 {
					mode = LockCompliance
				}
				o.Retention = Retention{mode, int64(1000 + o.RetentionHLC*37%1000)}
			}
			if rng.IntN(2) == 0 {
				o.HoldHLC = uint64(11 + rng.IntN(20))
				o.LegalHold = o.HoldHLC%2 == 0
			}
			if rng.IntN(2) == 0 {
				o.ACLHLC = uint64(11 + rng.IntN(20))
				o.ACL = string(rune('a' + o.ACLHLC%26))
			}
			o.MetaHLC = max(o.TagsHLC, o.RetentionHLC, o.HoldHLC, o.ACLHLC)
			copies = append(copies, o)
		}
		merge := func(order []int) Object {
			m := *copies[order[0]]
			for _, i := range order[1:] {
				m.MergeMeta(copies[i])
			}
			m.Normalize()
			return m
		}
		a := merge([]int{0, 1, 2, 3})
		b := merge([]int{3, 1, 0, 2})
		c := merge([]int{2, 3, 1, 0})
		for _, x := range []Object{b, c} {
			if x.TagsHLC != a.TagsHLC || x.Retention != a.Retention || x.RetentionHLC != a.RetentionHLC || x.LegalHold != a.LegalHold ||
				x.HoldHLC != a.HoldHLC || x.MetaHLC != a.MetaHLC || len(x.Tags) != len(a.Tags) || x.ACL != a.ACL || x.ACLHLC != a.ACLHLC {
				t.Fatalf("round %d: merges differ by order:\n%+v\n%+v", round, a, x)
			}
		}
		for _, o := range copies {
			if o.Retention.Mode == LockCompliance && (a.Retention.Mode != LockCompliance || a.Retention.Until < o.Retention.Until) {
				t.Fatalf("round %d: a COMPLIANCE retention until %d merged into %+v", round, o.Retention.Until, a.Retention)
			}
		}
	}
}

func TestRetentionChangeAllowed(t *testing.T) {
	const now = 100
	gov := Retention{LockGovernance, 200}
	comp := Retention{LockCompliance, 200}
	for _, tc := range []struct {
		cur, next Retention
		bypass    bool
		ok        bool
	}{
		{Retention{}, comp, false, true},
		{gov, Retention{LockGovernance, 300}, false, true},
		{gov, Retention{LockGovernance, 150}, false, false},
		{gov, Retention{LockGovernance, 150}, true, true},
		{gov, Retention{}, false, false},
		{gov, Retention{}, true, true},
		{gov, Retention{LockCompliance, 250}, false, false}, // a change of mode needs bypass
		{gov, Retention{LockCompliance, 200}, false, false},
		{gov, Retention{LockCompliance, 250}, true, true},
		{comp, Retention{LockCompliance, 250}, true, true},
		{comp, Retention{LockCompliance, 150}, true, false},
		{comp, Retention{LockGovernance, 250}, true, false},
		{comp, Retention{}, true, false},
		{Retention{LockCompliance, 50}, Retention{}, false, false},                  // once COMPLIANCE, always
		{Retention{LockCompliance, 50}, Retention{LockCompliance, 20}, false, true}, // expired: any date
	} {
		if got := RetentionChangeAllowed(tc.cur, tc.next, now, tc.bypass); got != tc.ok {
			t.Errorf("%+v -> %+v (bypass %v): %v, want %v", tc.cur, tc.next, tc.bypass, got, tc.ok)
		}
	}
	if !(&Object{LegalHold: true}).Locked(now, true) || (&Object{Retention: gov}).Locked(now, true) || !(&Object{Retention: comp}).Locked(now, true) {
		t.Error("Locked")
	}
}
