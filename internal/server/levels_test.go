package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
)

// TestLevels: a command a newer build added is refused while a node runs an older build
// or has not been heard from, and allowed once every node that is not out is current;
// older commands are never held back.
func TestLevels(t *testing.T) {
	m := &clustermap.Map{Nodes: []clustermap.Node{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	cfg := clustermap.Command{Op: clustermap.OpSetBucketConfig, Name: "bkt"}
	var l levels
	refused := func(want string) {
		t.Helper()
		err := l.check(m, "a", cfg)
		if !errors.Is(errors.Precondition, err) || !errors.IsErr(err, gateway.ErrUpgrading) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want a refusal naming %q", err, want)
		}
	}
	refused("node b has not told")
	l.set("b", featureLevel)
	l.set("c", 0) // a build from before levels
	refused("node c runs an older cairn (feature level 1")
	if err := l.check(m, "a", clustermap.Command{Op: clustermap.OpCreateBucket}); err != nil {
		t.Fatalf("an old command was held back: %v", err)
	}
	l.set("c", featureLevel)
	if err := l.check(m, "a", cfg); err != nil {
		t.Fatal(err)
	}
	l.set("c", 1)
	m.Nodes[2].State = clustermap.StateOut
	if err := l.check(m, "a", cfg); err != nil {
		t.Fatalf("an out node held the change back: %v", err)
	}
}

// TestLifecycleLevel: a bucket's lifecycle configuration waits for every node at level
// 7 (every storage node runs the lifecycle runner); other configurations do not.
func TestLifecycleLevel(t *testing.T) {
	m := &clustermap.Map{Nodes: []clustermap.Node{{ID: "a"}, {ID: "b"}}}
	var l levels
	l.set("b", 6)
	lc := clustermap.Command{Op: clustermap.OpSetBucketConfig, Name: "bkt", Key: "lifecycle"}
	if err := l.check(m, "a", lc); !errors.IsErr(err, gateway.ErrUpgrading) || !strings.Contains(err.Error(), "needs 7") {
		t.Fatalf("lifecycle with a node at level 6: %v", err)
	}
	if err := l.check(m, "a", clustermap.Command{Op: clustermap.OpSetBucketConfig, Name: "bkt", Key: "cors"}); err != nil {
		t.Fatalf("cors held back: %v", err)
	}
	l.set("b", 7)
	if err := l.check(m, "a", lc); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeError: the leader's refusals that mean "finish the upgrade" are recognized
// in a forwarded answer, whichever build the leader runs; other errors pass unchanged.
func TestUpgradeError(t *testing.T) {
	cfg := clustermap.Command{Op: clustermap.OpSetBucketConfig}
	for _, tc := range []struct {
		name string
		err  error
		up   bool
	}{
		{"current leader", errors.E(errors.Precondition, "the cluster is being upgraded: node b runs an older cairn"), true},
		{"older leader", errors.E(errors.Invalid, `unknown command "set_bucket_config"`), true},
		{"other precondition", errors.E(errors.Precondition, "bucket has no placement policy"), false},
		{"other invalid", errors.E(errors.Invalid, "missing kind"), false},
	} {
		got := upgradeError(cfg, tc.err)
		if errors.IsErr(got, gateway.ErrUpgrading) != tc.up || (!tc.up && got != tc.err) {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
	if upgradeError(cfg, nil) != nil {
		t.Error("nil error changed")
	}
}

// TestCommandLevels: the bucket configurations that enable ACLs and object owners need
// level 5; the others keep the level that added them.
func TestCommandLevels(t *testing.T) {
	for _, tc := range []struct {
		kind string
		want int
	}{{"cors", 2}, {"tagging", 2}, {"policy", 2}, {"versioning", 4}, {"acl", 5}, {"ownershipControls", 5}, {"notification", 7}} {
		if got := commandLevel(clustermap.Command{Op: clustermap.OpSetBucketConfig, Key: tc.kind}); got != tc.want {
			t.Errorf("set_bucket_config %s: level %d, want %d", tc.kind, got, tc.want)
		}
	}
	for _, op := range []string{clustermap.OpPutNotifyTarget, clustermap.OpRemoveNotifyTarget} {
		if got := commandLevel(clustermap.Command{Op: op}); got != 7 {
			t.Errorf("%s: level %d, want 7", op, got)
		}
	}
}

// A joining node older than the cluster's feature level is refused, with the reason; a
// join that says no level counts as the last released build without it (level 4).
func TestJoinLevelAllowed(t *testing.T) {
	for _, tc := range []struct {
		query   string
		cluster int
		ok      bool
	}{
		{"", 0, true},
		{"", 4, true},
		{"", 5, false},
		{"6", 6, true},
		{"7", 6, true},
		{"5", 6, false},
		{"x", 1, false},
		{"-1", 0, false},
	} {
		err := joinLevelAllowed(tc.query, tc.cluster)
		if (err == nil) != tc.ok {
			t.Errorf("level %q joining a cluster at %d: %v, want allowed %v", tc.query, tc.cluster, err, tc.ok)
		}
		if err != nil && tc.query != "x" && tc.query != "-1" && !strings.Contains(err.Error(), "older cairn") {
			t.Errorf("level %q: %v does not say why", tc.query, err)
		}
	}
}

// A node that holds shards of an erasure-coded volume is not drained or removed (its
// shards would not move); other nodes are.
func TestHoldsECShards(t *testing.T) {
	m := &clustermap.Map{Volumes: map[string]clustermap.Volume{
		"ec":   {Name: "ec", Class: "EC42", Nodes: []string{"a", "b", "c", "d", "e", "f"}},
		"repl": {Name: "repl"},
	}}
	if err := holdsECShards(m, clustermap.Node{ID: "c"}); err == nil || !strings.Contains(err.Error(), "ec") || !errors.Is(errors.Precondition, err) {
		t.Fatalf("a shard holder: %v, want a Precondition error naming the volume", err)
	}
	if err := holdsECShards(m, clustermap.Node{ID: "g"}); err != nil {
		t.Fatalf("a node without shards: %v", err)
	}
}

// A map with placement version 2 (as a cluster bootstrapped with --placement v2 starts)
// is at feature level 13: a node of level 12, which would ignore the version and compute
// version 1's tables, cannot join it, and set_placement waits for every node at 13.
func TestPlacementV2Level(t *testing.T) {
	boot := &clustermap.Map{Partitions: 64, Replicas: 3, Level: featureLevel, PlacementVersion: 2,
		Nodes: []clustermap.Node{{ID: "a", Addr: "10.0.0.1:9002", Roles: []string{clustermap.RoleStorage}}}}
	m, err := clustermap.ApplyCommand(&clustermap.Map{}, clustermap.Command{Op: clustermap.OpInit, Init: boot})
	if err != nil {
		t.Fatal(err)
	}
	if m.PlacementVersion != 2 || m.Level < clustermap.PlacementV2Level {
		t.Fatalf("bootstrap map: version %d level %d", m.PlacementVersion, m.Level)
	}
	if err := joinLevelAllowed("12", m.Level); err == nil || !strings.Contains(err.Error(), "older cairn") {
		t.Fatalf("a level-12 node joining a version-2 map: %v, want refused", err)
	}
	if err := joinLevelAllowed(fmt.Sprint(clustermap.PlacementV2Level), m.Level); err != nil {
		t.Fatalf("a level-%d node: %v", clustermap.PlacementV2Level, err)
	}
	set := clustermap.Command{Op: clustermap.OpSetPlacement, Placement: 2}
	if got := commandLevel(set); got != clustermap.PlacementV2Level || featureLevel < got {
		t.Fatalf("set_placement needs level %d (this build %d)", got, featureLevel)
	}
	old := &clustermap.Map{Level: 12, Nodes: []clustermap.Node{{ID: "a"}, {ID: "b"}}}
	var l levels
	l.set("b", 12)
	if err := l.check(old, "a", set); !errors.IsErr(err, gateway.ErrUpgrading) {
		t.Fatalf("set_placement with a node at level 12: %v", err)
	}
	l.set("b", clustermap.PlacementV2Level)
	if err := l.check(old, "a", set); err != nil {
		t.Fatal(err)
	}
}
