package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestInvariants checks, on small clusters, what the placement promises: every partition
// on N distinct nodes in distinct zones, a join that only creates copies on the new node
// (about its share), and a loss that gives each of the lost node's partitions exactly one
// new holder.
func TestInvariants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  int
		zones  int
		mode   string
		moveOK bool // a join creates copies only on the new node
	}{
		{"3 zones, weights one", 30, 3, WeightsOne, true},
		{"4 zones, capacity", 40, 4, WeightsCapacity, true},
		{"7 zones, capacity", 50, 7, WeightsCapacity, true},
		{"4 zones, calibrated", 40, 4, WeightsCalibrated, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Nodes: tc.nodes, Zones: tc.zones, Replicas: 3, Partitions: 100 * tc.nodes, Weights: tc.mode,
				Capacities: []float64{50, 100, 100, 200}, Seed: 1, LostTB: 100, JoinTB: 100, Joins: 4, Rate: 64 << 20}
			r, err := Run(s)
			if err != nil {
				t.Fatal(err)
			}
			if r.Short != 0 || r.HostViolations != 0 {
				t.Errorf("%d partitions short of 3 nodes, %d with a node twice", r.Short, r.HostViolations)
			}
			if r.ZoneViolations != 0 {
				t.Errorf("%d partitions with two copies in one zone", r.ZoneViolations)
			}
			if r.CopiesMean != 300 {
				t.Errorf("copies per node %.1f, want 300", r.CopiesMean)
			}
			// With weight one, balance against capacity is off by the capacity spread (4x);
			// weighted modes stay within binomial noise of 300 copies per node.
			if tc.mode != WeightsOne && (r.MaxMean < 1 || r.MaxMean > 1.5 || r.MinMean > 1 || r.MinMean < 0.5) {
				t.Errorf("balance max/mean %.3f min/mean %.3f", r.MaxMean, r.MinMean)
			}
			if ratio := r.JoinFrac / r.JoinBound; ratio < 0.85 || ratio > 1.15 || r.JoinWorst > 1.4 {
				t.Errorf("joins moved %.4f of the copies on average, %.2f times the bound %.4f (worst %.2f)", r.JoinFrac, ratio, r.JoinBound, r.JoinWorst)
			}
			if tc.moveOK && r.JoinElsewhere != 0 {
				t.Errorf("join created %d copies on nodes other than the new one", r.JoinElsewhere)
			}
			if tc.moveOK && (r.LossMoved != r.LostCopies || r.LossUnequal) {
				t.Errorf("loss moved %d copies for %d held (more than one new holder: %v)", r.LossMoved, r.LostCopies, r.LossUnequal)
			}
			rc := r.Recovery
			if rc.Receivers == 0 || rc.CoHolders == 0 || rc.MaxRecv == 0 {
				t.Fatalf("recovery: %+v", rc)
			}
			// 100 TB at 64 MiB/s is 17.3 days for one node; spread, far less.
			if want := 100e12 / (64 << 20); math.Abs(rc.Single.Seconds()-want) > 1 {
				t.Errorf("single-node time %s, want %.0f s", rc.Single, want)
			}
			if rc.Pull >= rc.Single || rc.Senders >= rc.Single || rc.PullLoID < rc.Pull {
				t.Errorf("recovery times: single %s, senders %s, pull %s, pull lowest-ID %s", rc.Single, rc.Senders, rc.Pull, rc.PullLoID)
			}
			if tc.zones == 3 && rc.Receivers > (tc.nodes+2)/3 {
				// With N = 3 zones, a partition's new holder must be in the lost node's zone.
				t.Errorf("%d receivers, but only the lost node's zone (%d nodes) can receive", rc.Receivers, tc.nodes/3)
			}
		})
	}
}

// TestV2 checks version 2 on a small cluster through the map (PlacementVersion 2 at its
// level) and topology.Layout: the zone rules hold, no node is above 1.1 times its share
// (the shares here are the capacity shares: 4 zones of about equal capacity), and a join
// and a loss move about the minimum.
func TestV2(t *testing.T) {
	s := Spec{Nodes: 60, Zones: 4, Replicas: 3, Partitions: 100 * 60, Weights: WeightsCapacity,
		Capacities: []float64{50, 100, 100, 200}, Seed: 1, LostTB: 100, JoinTB: 100, Joins: 2, Rate: 64 << 20, Placement: 2}
	r, err := Run(s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Short != 0 || r.HostViolations != 0 || r.ZoneViolations != 0 {
		t.Errorf("%d partitions short, %d with a node twice, %d with two copies in a zone", r.Short, r.HostViolations, r.ZoneViolations)
	}
	v1 := s
	v1.Placement = 1
	r1, err := Run(v1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("max/mean v1 %.3f, v2 %.3f; joins %.3f (worst %.3f, %d elsewhere), loss %d/%d",
		r1.MaxMean, r.MaxMean, r.JoinFrac/r.JoinBound, r.JoinWorst, r.JoinElsewhere, r.LossMoved, r.LostCopies)
	if r.MaxMean > 1.12 || r.MaxMean >= r1.MaxMean {
		t.Errorf("v2 max/mean %.3f (v1 %.3f)", r.MaxMean, r1.MaxMean)
	}
	if r.JoinWorst > 1.2 || float64(r.LossMoved) > 1.15*float64(r.LostCopies) {
		t.Errorf("joins worst %.3f times the bound, loss %d copies for %d", r.JoinWorst, r.LossMoved, r.LostCopies)
	}
}

// TestRun runs the command on a tiny cluster and checks the report's shape.
func TestRun(t *testing.T) {
	var out, log bytes.Buffer
	if err := run([]string{"--nodes", "20,30", "--zones", "3,4", "--per-node", "20", "--weights", "one,capacity"}, &out, &log); err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "| 20 ") || strings.HasPrefix(l, "| 30 ") {
			rows++
		}
	}
	if rows != 8 { // 2 sizes × 2 modes, in two tables
		t.Errorf("%d table rows, want 8:\n%s", rows, out.String())
	}
	out.Reset()
	if err := run([]string{"--nodes", "30", "--zones", "3", "--per-node", "20", "--weights", "capacity", "--participants"}, &out, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nreceivers (") || !strings.Contains(out.String(), "\nco-holders (") {
		t.Errorf("--participants lists no receivers or co-holders:\n%s", out.String())
	}
	if err := run([]string{"--nodes", "20", "--zones", "3,4"}, &out, &log); err == nil {
		t.Error("two zone counts for one size accepted")
	}
	if err := run([]string{"--nodes", "20", "--weights", "heavy"}, &out, &log); err == nil {
		t.Error("unknown weight mode accepted")
	}
	if err := run([]string{"--nodes", "20", "--placement", "v3"}, &out, &log); err == nil {
		t.Error("unknown placement version accepted")
	}
}

func TestBytesValue(t *testing.T) {
	for in, want := range map[string]float64{"64MiB": 64 << 20, "1GB": 1e9, "100": 100, "2KiB": 2048} {
		if got, err := bytesValue(in); err != nil || got != want {
			t.Errorf("bytesValue(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1MiB", "x"} {
		if _, err := bytesValue(in); err == nil {
			t.Errorf("bytesValue(%q) accepted", in)
		}
	}
}
