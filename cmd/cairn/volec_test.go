package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestVolumeErasureCoded: a volume in a 4+2 class on six processes, written and read
// with qemu-io patterns against a model of every 4 KiB block: writes go on with one
// node killed (five shards: the class's W), reads stay correct with two killed (decoded
// from the four left) while writes are refused, the nodes come back and writes go on,
// and a new lease on another node reads the same.
func TestVolumeErasureCoded(t *testing.T) {
	skipShort(t)
	tool(t, "qemu-io")
	tc := startCluster(t, 6, "--nbd-listen", "127.0.0.1:0")
	tc.waitVoters(3)
	if out, err := tc.admin(0, "class", "create", "EC42", "--ec", "4+2"); err != nil {
		t.Fatalf("class create: %v\n%s", err, out)
	}
	if out, err := tc.admin(0, "class", "create", "EC32", "--ec", "3+2"); err != nil {
		t.Fatalf("class create: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "create", "odd", "--size", "1MiB", "--class", "EC32"); err == nil || !strings.Contains(out, "power of two") {
		t.Fatalf("a volume in a 3+2 class: %v\n%s", err, out)
	}
	const size = 16 << 20
	tc.mustVolume(0, "create", "ev", "--size", "16MiB", "--class", "EC42")
	v := tc.mustVolume(0, "attach", "ev")
	if out, err := tc.volume(0, "snapshot", "ev", "s1"); err == nil || !strings.Contains(out, "erasure-coded") {
		t.Fatalf("a snapshot of an erasure-coded volume: %v\n%s", err, out)
	}
	model := make(blockModel, size/modelBlock)
	rng := rand.New(rand.NewPCG(5, 6))
	batch := func(what string, pattern byte) {
		t.Helper()
		var cmds []string
		for range 40 {
			n := (1 + rng.IntN(64)) * modelBlock
			off := rng.IntN(size/modelBlock-n/modelBlock) * modelBlock
			cmds = append(cmds, model.write(pattern, off, n))
			pattern++
		}
		if out, ok := qemuIO(t, v.URI, cmds...); !ok {
			t.Fatalf("%s: writes failed:\n%s", what, out)
		}
	}
	batch("all nodes up", 1)
	checkModel(t, "all nodes up", v.URI, model)

	// One node killed: writes go to the five left.
	tc.procs[5].Kill()
	tc.waitState("node6", clustermap.StateDown, 30*time.Second)
	waitStateVia(tc, 0, "node6", clustermap.StateDown)
	batch("node6 down", 60)
	checkModel(t, "node6 down", v.URI, model)

	// Two killed: reads decode from four shards; a write is refused (W=5).
	tc.procs[4].Kill()
	checkModel(t, "node5 killed, not marked down yet", v.URI, model)
	waitStateVia(tc, 0, "node5", clustermap.StateDown)
	checkModel(t, "node5 and node6 down", v.URI, model)
	if out, ok := qemuIO(t, v.URI, "write -P 200 0 4096"); ok {
		t.Fatalf("a write with 2 of 6 shard holders down was acknowledged:\n%s", out)
	}
	checkModel(t, "node5 and node6 down, after a refused write", v.URI, model)

	// Back: their shards are behind, and are rebuilt when next used.
	tc.procs[4].Restart()
	tc.procs[5].Restart()
	waitStateVia(tc, 0, "node5", clustermap.StateUp)
	waitStateVia(tc, 0, "node6", clustermap.StateUp)
	batch("every node back", 120)
	checkModel(t, "every node back", v.URI, model)

	// A new lease on another node reads the same.
	tc.mustVolume(0, "detach", "ev")
	v = tc.mustVolume(1, "attach", "ev", "--node", "node2")
	proctest.WaitFor(t, 10*time.Second, func() error {
		if out, ok := qemuIO(t, v.URI, "read 0 4096"); !ok {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	checkModel(t, "attached on node2", v.URI, model)
	batch("attached on node2", 180)
	checkModel(t, "attached on node2, written", v.URI, model)
	tc.mustVolume(1, "detach", "ev")
	if out, err := tc.volume(1, "delete", "ev"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
}
