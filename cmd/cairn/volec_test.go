package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestVolumeErasureCoded: a volume in a 4+2 class on six processes, written and read
// with qemu-io patterns against a model of every 4 KiB block: the lease holder is
// killed in the middle of a batch (the write in flight torn between shards, or not) and
// the volume attached on another node reads every acknowledged write and the torn one
// as old or new; writes go on with that node down (five shards: the class's W), reads
// stay correct with a second node killed (decoded from the four left) while writes are
// refused, the nodes come back and writes go on, and a new lease on a third node reads
// the same.
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

	// The lease holder killed in the middle of a batch: the write in flight is torn
	// between shards (or not), and the new lease on node2 repairs it before serving it:
	// every acknowledged write reads back, the torn one as either its old or its new
	// content. node1 down, writes go to the five left.
	var cmds []string
	torn := model.clone()
	for p := range 30 {
		n := (1 + rng.IntN(64)) * modelBlock
		off := rng.IntN(size/modelBlock-n/modelBlock) * modelBlock
		cmds = append(cmds, torn.write(byte(60+p), off, n))
	}
	out, _ := qemuIOThen(t, v.URI, func() { tc.procs[0].Kill() }, cmds...)
	acked := strings.Count(out, "wrote ")
	if acked == len(cmds) {
		t.Fatal("every write of the batch was answered after the holder was killed")
	}
	var inFlight []int // blocks of the write that may be torn: old or new content
	var tornPattern byte
	for c, cmd := range cmds[:acked+1] {
		var pattern, off, n int
		if _, err := fmt.Sscanf(cmd, "write -P %d %d %d", &pattern, &off, &n); err != nil {
			t.Fatal(err)
		}
		for b := off / modelBlock; b < (off+n)/modelBlock; b++ {
			if c < acked {
				model[b] = byte(pattern)
			} else {
				inFlight, tornPattern = append(inFlight, b), byte(pattern)
			}
		}
	}
	waitStateVia(tc, 1, "node1", clustermap.StateDown)
	v = tc.mustVolume(1, "attach", "ev", "--node", "node2", "--force")
	proctest.WaitFor(t, 10*time.Second, func() error {
		if out, ok := qemuIO(t, v.URI, "read 0 4096"); !ok {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	img := readImage(t, v.URI)
	newer := 0
	for _, b := range inFlight {
		if got := img[b*modelBlock]; got == tornPattern || got == model[b] {
			if got == tornPattern && got != model[b] {
				newer++
			}
			model[b] = got
		}
	}
	t.Logf("holder killed after %d answered writes; the next write (%d blocks) reads as new in %d blocks", acked, len(inFlight), newer)
	for b := range model {
		if !bytes.Equal(img[b*modelBlock:(b+1)*modelBlock], bytes.Repeat([]byte{model[b]}, modelBlock)) {
			t.Fatalf("block %d after the holder was killed: want pattern %d (or the torn write's %d), got %d", b, model[b], tornPattern, img[b*modelBlock])
		}
	}
	batch("node1 down", 100)
	checkModel(t, "node1 down", v.URI, model)

	// Two killed: reads decode from four shards; a write is refused (W=5).
	tc.procs[4].Kill()
	checkModel(t, "node5 killed, not marked down yet", v.URI, model)
	waitStateVia(tc, 1, "node5", clustermap.StateDown)
	checkModel(t, "node1 and node5 down", v.URI, model)
	if out, ok := qemuIO(t, v.URI, "write -P 200 0 4096"); ok {
		t.Fatalf("a write with 2 of 6 shard holders down was acknowledged:\n%s", out)
	}
	checkModel(t, "node1 and node5 down, after a refused write", v.URI, model)

	// Back: their shards are behind, and are rebuilt when next used.
	tc.procs[0].Restart()
	tc.procs[4].Restart()
	waitStateVia(tc, 1, "node1", clustermap.StateUp)
	waitStateVia(tc, 1, "node5", clustermap.StateUp)
	batch("every node back", 140)
	checkModel(t, "every node back", v.URI, model)

	// A new lease on another node reads the same.
	tc.mustVolume(1, "detach", "ev")
	v = tc.mustVolume(2, "attach", "ev", "--node", "node3")
	proctest.WaitFor(t, 10*time.Second, func() error {
		if out, ok := qemuIO(t, v.URI, "read 0 4096"); !ok {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	checkModel(t, "attached on node3", v.URI, model)
	batch("attached on node3", 180)
	checkModel(t, "attached on node3, written", v.URI, model)
	tc.mustVolume(2, "detach", "ev")
	if out, err := tc.volume(2, "delete", "ev"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
}

// readImage reads a whole export through uri (with nbdcopy).
func readImage(t *testing.T, uri string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "img")
	if b, err := exec.Command(tool(t, "nbdcopy"), uri, out).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy %s: %v\n%s", uri, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
