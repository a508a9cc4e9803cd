package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// volumeCmd runs `cairn volume` against node i.
func (tc *testCluster) volume(i int, args ...string) (string, error) {
	cmd := exec.Command(proctest.Bin(tc.t), append([]string{"volume", "--admin", tc.procs[i].AdminAddr()}, args...)...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (tc *testCluster) mustVolume(i int, args ...string) server.VolumeInfo {
	tc.t.Helper()
	out, err := tc.volume(i, append(args, "--json")...)
	if err != nil {
		tc.t.Fatalf("cairn volume %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var v server.VolumeInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		tc.t.Fatalf("cairn volume %s --json: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// qemuIO runs qemu-io commands against an NBD URI and reports whether every one succeeded.
func qemuIO(t *testing.T, uri string, cmds ...string) (string, bool) {
	t.Helper()
	return qemuIOThen(t, uri, nil, cmds...)
}

// qemuIOThen is qemuIO that calls after (if set) once the first write is done.
func qemuIOThen(t *testing.T, uri string, after func(), cmds ...string) (string, bool) {
	t.Helper()
	args := []string{"-f", "raw"}
	if strings.Contains(uri, "@") { // a snapshot's export is read-only
		args = append(args, "-r")
	}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	// Line-buffered, so that after runs as the first write is reported, not at exit.
	cmd := exec.Command(tool(t, "stdbuf"), append([]string{"-oL", tool(t, "qemu-io")}, append(args, uri)...)...)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if after != nil && strings.HasPrefix(sc.Text(), "wrote ") {
			after()
			after = nil
		}
	}
	err = cmd.Wait()
	s := out.String()
	ok := err == nil && !strings.Contains(s, "failed") && !strings.Contains(s, "error") && !strings.Contains(s, "Error")
	return s, ok
}

// tool returns the path of a client program that make deps installs.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is missing: install Debian's qemu-utils and libnbd-bin (make deps-apt does)", name)
	}
	return p
}

// volumeSum is the SHA-256 of a whole volume read through uri (with nbdcopy).
func volumeSum(t *testing.T, uri string) [32]byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "img")
	if b, err := exec.Command(tool(t, "nbdcopy"), uri, out).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy %s: %v\n%s", uri, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestVolumes: block volumes through a 3-node cluster of processes, with real NBD
// clients. An image written with qemu-img reads back identical; random writes with
// patterns, each batch followed by a flush, go on while the serving node is killed; the
// volume is attached on another node (--force, once the first is marked down) and every
// acknowledged write reads back; the killed node comes back and its copies catch up; a
// paused holder whose lease moved cannot change a byte once it resumes.
func TestVolumes(t *testing.T) {
	skipShort(t)
	tool(t, "qemu-img")
	tc := startCluster(t, 3, "--nbd-listen", "127.0.0.1:0")
	tc.waitVoters(3)
	const size = 32 << 20
	tc.mustVolume(0, "create", "vm", "--size", "32MiB")
	if out, err := tc.volume(0, "create", "vm", "--size", "1MiB"); err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("a second volume vm: %v\n%s", err, out)
	}
	v := tc.mustVolume(0, "attach", "vm")
	if v.Holder != "node1" || v.URI != "nbd://"+tc.procs[0].NBDAddr()+"/vm" {
		t.Fatalf("attach: %+v", v)
	}
	if out, err := tc.volume(1, "attach", "vm", "--node", "node2"); err == nil || !strings.Contains(out, "node1") {
		t.Fatalf("a second attach for write: %v\n%s", err, out)
	}

	// An image in and back out, with qemu-img.
	src := filepath.Join(t.TempDir(), "src.img")
	img := make([]byte, size)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < size/2; i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			img[i+k] = byte(v >> (8 * k))
		}
	}
	if err := os.WriteFile(src, img, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool(t, "qemu-img"), "convert", "-n", "-f", "raw", "-O", "raw", src, v.URI).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v\n%s", err, out)
	}
	if out, err := exec.Command(tool(t, "qemu-img"), "compare", "-f", "raw", "-F", "raw", src, v.URI).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img compare: %v\n%s", err, out)
	}

	// Batches of pattern writes, each ending with a flush, while node1 is killed.
	const block = 4096
	type write struct {
		off, n  int
		pattern byte
		batch   int
	}
	var writes []write
	acked := map[int]bool{}
	killedAt := -1
	for batch := 0; batch < 12; batch++ {
		var kill func()
		if batch == 5 {
			kill = func() { tc.procs[0].Kill() } // in the middle of the batch
			killedAt = batch
		}
		var cmds []string
		for range 6 {
			n := block * (1 + rng.IntN(256)) // 4 KiB to 1 MiB
			off := block * rng.IntN((size-n)/block+1)
			w := write{off: off, n: n, pattern: byte(1 + rng.IntN(250)), batch: batch}
			writes = append(writes, w)
			cmds = append(cmds, fmt.Sprintf("write -P %d %d %d", w.pattern, w.off, w.n))
		}
		if batch%2 == 1 {
			cmds = append(cmds, "flush")
		} else {
			cmds[len(cmds)-1] = strings.Replace(cmds[len(cmds)-1], "write ", "write -f ", 1) // FUA
			// The earlier writes of the batch are not flushed: only FUA's own write counts.
		}
		_, ok := qemuIOThen(t, v.URI, kill, cmds...)
		acked[batch] = ok
		if batch < killedAt || killedAt < 0 {
			if !ok {
				t.Fatalf("batch %d failed before any fault", batch)
			}
		}
	}
	if acked[killedAt] || acked[killedAt+1] {
		t.Fatal("a batch was acknowledged by a killed node")
	}
	waitStateVia(tc, 1, "node1", clustermap.StateDown)
	v = tc.mustVolume(1, "attach", "vm", "--node", "node2", "--force")
	if v.Holder != "node2" || v.Epoch != 2 {
		t.Fatalf("forced attach: %+v", v)
	}
	// Expected content: what acknowledged writes left, unless a later unacknowledged one
	// touched the block (its content is then either).
	expect := make([]int, size/block) // -1: undefined; else the pattern
	for i := range expect {
		expect[i] = -2 // as the image left it
	}
	for _, w := range writes {
		// cairn makes every write durable before it answers it: every write of a batch
		// qemu-io finished without an error reads back, flushed (or FUA) or not.
		durable := acked[w.batch]
		for b := w.off / block; b < (w.off+w.n)/block; b++ {
			if durable {
				expect[b] = int(w.pattern)
			} else {
				expect[b] = -1
			}
		}
	}
	checked := 0
	var cmds []string
	for b := 0; b < len(expect); b++ {
		if expect[b] < 0 {
			continue
		}
		e := b
		for e+1 < len(expect) && expect[e+1] == expect[b] && e-b < 255 {
			e++
		}
		cmds = append(cmds, fmt.Sprintf("read -P %d %d %d", expect[b], b*block, (e-b+1)*block))
		checked += e - b + 1
		b = e
	}
	for i := 0; i < len(cmds); i += 200 {
		if out, ok := qemuIO(t, v.URI, cmds[i:min(i+200, len(cmds))]...); !ok {
			t.Fatalf("acknowledged writes do not read back through the new holder:\n%s", out)
		}
	}
	if checked < len(expect)/10 {
		t.Fatalf("only %d blocks checked", checked)
	}
	// The image's untouched blocks too.
	got := filepath.Join(t.TempDir(), "got.img")
	if out, err := exec.Command(tool(t, "nbdcopy"), v.URI, got).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, out)
	}
	gb, _ := os.ReadFile(got)
	for b, e := range expect {
		if e == -2 && !bytes.Equal(gb[b*block:(b+1)*block], img[b*block:(b+1)*block]) {
			t.Fatalf("block %d, untouched since qemu-img wrote it, differs", b)
		}
	}

	// node1 comes back: every data object's copies reach one version.
	tc.procs[0].Restart()
	waitStateVia(tc, 1, "node1", clustermap.StateUp)
	if _, ok := qemuIO(t, v.URI, "write -P 77 0 65536", "flush"); !ok {
		t.Fatal("write after node1 came back")
	}
	proctest.WaitFor(t, 60*time.Second, func() error {
		for i := int64(0); i < size/clustermap.DefaultBlockSize; i++ {
			key := fmt.Sprintf("%s/%016x", v.ID, i)
			rv := tc.replicas(1, clustermap.VolumeBucket, key)
			var versions []string
			same := len(rv.Replicas) == 3
			for _, r := range rv.Replicas {
				versions = append(versions, fmt.Sprintf("%s:%d:%v:%s", r.Node, r.HLC, r.Missing, r.Error))
				same = same && !r.Missing && r.Error == "" && r.HLC == rv.Replicas[0].HLC
			}
			if !same {
				return fmt.Errorf("data object %d: copies %v", i, versions)
			}
		}
		return nil
	})

	// node2, the holder, is paused with a writer connected; the lease moves to node3;
	// when node2 resumes, the writer's requests change nothing.
	before := volumeSum(t, v.URI)
	writer := exec.Command(tool(t, "fio"), "--name=w", "--ioengine=nbd", "--uri="+v.URI, "--rw=randwrite", "--bs=4k",
		"--size=32m", "--iodepth=8", "--time_based", "--runtime=3600", "--continue_on_error=all")
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	defer writer.Process.Kill()
	proctest.WaitFor(t, 30*time.Second, func() error { // the writer is writing
		if volumeSum(t, v.URI) == before {
			return fmt.Errorf("no write yet")
		}
		return nil
	})
	tc.procs[1].Pause()
	waitStateVia(tc, 2, "node2", clustermap.StateDown)
	v3 := tc.mustVolume(2, "attach", "vm", "--node", "node3", "--force")
	if v3.Epoch != 3 {
		t.Fatalf("attach on node3: %+v", v3)
	}
	if _, ok := qemuIO(t, v3.URI, "write -P 99 8192 8192", "flush"); !ok {
		t.Fatal("write through node3")
	}
	moved := volumeSum(t, v3.URI)
	tc.procs[1].Resume()
	// The writer keeps sending to node2 for a while: all of it must be refused.
	waitStateVia(tc, 2, "node2", clustermap.StateUp)
	writer.Process.Kill()
	writer.Wait()
	if after := volumeSum(t, v3.URI); after != moved {
		t.Fatal("the paused holder changed the volume after its lease moved")
	}
	if before == moved {
		t.Fatal("node3's write did not change the volume")
	}
	// node3 served I/O: its per-volume metrics say so.
	resp, err := http.Get(tc.procs[2].AdminURL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`cairn_volume_ops_total{op="write",result="ok",volume="vm"}`, `cairn_volume_bytes_total{op="read",volume="vm"}`,
		`cairn_volume_op_duration_seconds_count{op="write",volume="vm"}`} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("node3's metrics lack %s", want)
		}
	}
	if out, err := tc.volume(2, "delete", "vm"); err == nil || !strings.Contains(out, "attached") {
		t.Fatalf("delete of an attached volume: %v\n%s", err, out)
	}
	tc.mustVolume(2, "detach", "vm")
	if out, err := tc.volume(2, "delete", "vm"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
}

// waitStateVia waits until node i's map has node id in state want.
func waitStateVia(tc *testCluster, i int, id string, want clustermap.NodeState) {
	tc.t.Helper()
	proctest.WaitFor(tc.t, 30*time.Second, func() error {
		for _, n := range tc.status(i).Nodes {
			if n.ID == id && n.State != want {
				return fmt.Errorf("node %s is %s, want %s", id, n.State, want)
			}
		}
		return nil
	})
}
