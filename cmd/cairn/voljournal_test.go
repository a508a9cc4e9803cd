package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// readVolume reads a whole volume through uri (with nbdcopy).
func readVolume(t *testing.T, uri string) ([]byte, error) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "img")
	if b, err := exec.Command(tool(t, "nbdcopy"), uri, out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nbdcopy %s: %v\n%s", uri, err, b)
	}
	return os.ReadFile(out)
}

// journalBytes is the size of the files of a node's volume journal.
func journalBytes(t *testing.T, dataDir string) int64 {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dataDir, "journal", "*.jnl"))
	var n int64
	for _, name := range names {
		if st, err := os.Stat(name); err == nil {
			n += st.Size()
		}
	}
	return n
}

// TestVolumeJournal: writes of a replicated volume go through the holders' journals
// (feature level 9). Reads during heavy unflushed writing see the newest bytes; data
// written and flushed survives SIGKILL of every node (all three hold every data object),
// and after the restart each 4 KiB block written after the last flush (by 4 KiB writes
// and by writes larger than InlineMax, journaled as references to unsynced chunks) holds
// its old bytes or one of the patterns written to it, never anything else.
func TestVolumeJournal(t *testing.T) {
	skipShort(t)
	tool(t, "qemu-io")
	tc := startCluster(t, 3, "--nbd-listen", "127.0.0.1:0")
	tc.waitVoters(3)
	// A new cluster starts at this build's feature level: volume writes are journaled.
	const size = 8 << 20
	const block = 4096
	tc.mustVolume(0, "create", "jv", "--size", "8MiB")
	v := tc.mustVolume(0, "attach", "jv")
	model := make([]byte, size)
	rng := rand.New(rand.NewPCG(17, 18))

	// Flushed: the whole volume, then pairs of a write and a read of the same range with
	// its pattern (no flush in between: the read must see the journal's newest bytes).
	cmds := []string{}
	for off := 0; off < size; off += 1 << 20 {
		p := byte(1 + off>>20)
		cmds = append(cmds, fmt.Sprintf("write -P %d %d %d", p, off, 1<<20))
		for i := off; i < off+1<<20; i++ {
			model[i] = p
		}
	}
	for i := range 150 {
		n := block * (1 + rng.IntN(32))
		off := block * rng.IntN((size-n)/block+1)
		p := byte(20 + i%200)
		cmds = append(cmds, fmt.Sprintf("write -P %d %d %d", p, off, n), fmt.Sprintf("read -P %d %d %d", p, off, n))
		for k := off; k < off+n; k++ {
			model[k] = p
		}
	}
	cmds = append(cmds, "flush")
	if out, ok := qemuIO(t, v.URI, cmds...); !ok {
		t.Fatalf("writes and reads of the newest bytes:\n%s", out)
	}

	for _, p := range tc.procs {
		if n := journalBytes(t, p.DataDir()); n <= 12 {
			t.Fatalf("node %s's volume journal holds %d bytes after the writes: they did not go through it", p.NodeID(), n)
		}
	}

	// Unflushed writes, cut by SIGKILL of every node: 4 KiB ones, and every eighth one
	// of 132 KiB to 1 MiB (over InlineMax: its chunks are appended unsynced to segments
	// and its journal record references them).
	cands := map[int][]byte{} // block -> patterns written to it after the flush
	cmds = cmds[:0]
	for i := range 400 {
		n := 1
		if i%8 == 7 {
			n = 33 + rng.IntN(224)
		}
		b := rng.IntN(size/block - n + 1)
		p := byte(1 + i%250)
		cmds = append(cmds, fmt.Sprintf("write -P %d %d %d", p, b*block, n*block))
		for k := b; k < b+n; k++ {
			cands[k] = append(cands[k], p)
		}
	}
	killed := false
	qemuIOThen(t, v.URI, func() {
		// The first write is answered: every node dies while the rest go on.
		for _, p := range tc.procs {
			p.Kill()
		}
		killed = true
	}, cmds...)
	if !killed {
		t.Fatal("no write was answered before the kill")
	}
	for _, p := range tc.procs {
		p.Restart()
	}
	var img []byte
	proctest.WaitFor(t, 60*time.Second, func() error {
		var err error
		img, err = readVolume(t, "nbd://"+tc.procs[0].NBDAddr()+"/jv") // a new port after the restart
		return err
	})
	if len(img) != size {
		t.Fatalf("read %d bytes of %d", len(img), size)
	}
	kept := 0
	for b := range size / block {
		got := img[b*block : (b+1)*block]
		if bytes.Equal(got, model[b*block:(b+1)*block]) {
			continue
		}
		ok := false
		for _, p := range cands[b] {
			if bytes.Equal(got, bytes.Repeat([]byte{p}, block)) {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("block %d after the kill holds neither its flushed bytes nor a pattern written to it since (first bytes %x; candidates %v)", b, got[:16], cands[b])
		}
		kept++
	}
	t.Logf("%d blocks written after the last flush read their new bytes after the kill", kept)
}
