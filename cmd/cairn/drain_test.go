package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/server"

	"github.com/cairnfs/cairn/internal/proc"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// Draining a node moves every partition off it: its objects get their copies on the
// others, it removes its own only once they are confirmed, and only then does `remove`
// succeed. Reads stay correct throughout. Conflicting or bad requests change nothing.
func TestClusterDrainAndRemove(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 4)
	ctx := context.Background()
	tc.createBucket(0, "bkt")
	want := tc.writeObjects(0, "bkt", 40)
	tc.waitAllReplicas(0, "bkt", want, 3, 30*time.Second)

	refused := func(wantMsg string, args ...string) {
		t.Helper()
		out, err := tc.admin(0, args...)
		if err == nil || !strings.Contains(out, wantMsg) {
			t.Fatalf("admin %v: %v\n%s\nwant a refusal mentioning %q", args, err, out, wantMsg)
		}
	}
	refused("no node", "drain", "node9")
	refused("no node", "remove", "node9")
	refused("drain it", "remove", "node4")

	// Slow copying down so that the drain is seen in progress.
	if out, err := tc.admin(0, "recovery", "set", "--rate", "4KiB"); err != nil {
		t.Fatalf("recovery set: %v\n%s", err, out)
	}
	if out, err := tc.admin(0, "drain", "node4"); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	// With node4 draining, 3 nodes are left for 3 copies: draining one more is refused.
	refused("would leave 2 storage node(s) up to hold 3 copies", "drain", "node3")
	refused("still holds", "remove", "node4")
	for _, n := range tc.status(0).Nodes {
		if want := map[string]string{"node3": "up", "node4": "draining"}[n.ID]; want != "" && string(n.State) != want {
			t.Fatalf("%s is %s after the refused commands, want %s", n.ID, n.State, want)
		}
	}
	// Every object reads back through every node while the drain runs, and no placement
	// includes node4 any more.
	for k, etag := range want {
		for i := range tc.procs {
			got, err := getBody(ctx, tc.procs[i].client(), "bkt", k)
			if err != nil || md5hex(got) != etag {
				t.Fatalf("read %s via node%d during the drain: %v", k, i+1, err)
			}
		}
		for _, n := range tc.replicas(0, "bkt", k).Nodes {
			if n == "node4" {
				t.Fatalf("%s still placed on draining node4", k)
			}
		}
	}
	out, err := tc.admin(0, "recovery")
	if err != nil || !strings.Contains(out, "TO HAND OFF") {
		t.Fatalf("recovery: %v\n%s", err, out)
	}
	t.Logf("during the drain:\n%s", out)

	if out, err := tc.admin(0, "recovery", "set", "--rate", "unlimited"); err != nil {
		t.Fatalf("recovery set: %v\n%s", err, out)
	}
	proctest.WaitFor(t, 90*time.Second, func() error {
		out, err := tc.admin(0, "remove", "node4")
		if err == nil {
			return nil
		}
		rec, _ := tc.admin(0, "recovery")
		err = fmt.Errorf("remove after the drain: %v\n%s\n%s", err, out, rec)
		if !strings.Contains(out, "still holds") {
			return proc.Permanent(err)
		}
		return err
	})
	var st server.Status
	out, err = tc.admin(0, "--json", "status")
	if err != nil || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for _, n := range st.Nodes {
		if n.ID == "node4" {
			t.Fatalf("node4 still in the map after remove: %+v", n)
		}
	}
	tc.waitAllReplicas(0, "bkt", want, 3, 30*time.Second)
	for k, etag := range want {
		got, err := getBody(ctx, tc.procs[1].client(), "bkt", k)
		if err != nil || md5hex(got) != etag {
			t.Fatalf("read %s after the drain: %v", k, err)
		}
	}
}
