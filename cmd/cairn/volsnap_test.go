package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
	"github.com/cairnfs/cairn/internal/volume"
)

// blockModel is a volume's content as 4 KiB blocks, each a qemu-io pattern byte.
type blockModel []byte

const modelBlock = 4096

func (m blockModel) write(pattern byte, off, n int) string {
	for b := off / modelBlock; b < (off+n)/modelBlock; b++ {
		m[b] = pattern
	}
	return fmt.Sprintf("write -P %d %d %d", pattern, off, n)
}

// reads returns the qemu-io commands that check every block of the model.
func (m blockModel) reads() []string {
	var cmds []string
	for b := 0; b < len(m); {
		e := b
		for e+1 < len(m) && m[e+1] == m[b] {
			e++
		}
		cmds = append(cmds, fmt.Sprintf("read -P %d %d %d", m[b], b*modelBlock, (e-b+1)*modelBlock))
		b = e + 1
	}
	return cmds
}

func (m blockModel) clone() blockModel { return append(blockModel(nil), m...) }

// checkModel reads the whole export at uri with qemu-io patterns and fails unless it
// is exactly the model.
func checkModel(t *testing.T, what, uri string, m blockModel) {
	t.Helper()
	if out, ok := qemuIO(t, uri, m.reads()...); !ok {
		t.Fatalf("%s (%s) does not read as the model says:\n%s", what, uri, out)
	}
}

// TestVolumeSnapshots: snapshots of an attached volume with writes between them,
// read-only exports of them on every node, a clone written on another node, a
// rollback, and the refusals, all through real NBD clients (qemu-io patterns checked
// against a model of every 4 KiB block); deleting the whole family returns every data
// object.
func TestVolumeSnapshots(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3, "--nbd-listen", "127.0.0.1:0")
	tc.waitVoters(3)
	const size = 16 << 20
	tc.mustVolume(0, "create", "vm", "--size", "16MiB")
	vm := tc.mustVolume(0, "attach", "vm")
	model := make(blockModel, size/modelBlock)
	if out, ok := qemuIO(t, vm.URI, model.write(1, 0, size), "flush"); !ok {
		t.Fatalf("fill: %s", out)
	}
	// The first snapshot waits for the cluster's feature level (7).
	var s1 server.SnapshotInfo
	proctest.WaitFor(t, 30*time.Second, func() error {
		out, err := tc.volume(0, "snapshot", "vm", "s1", "--json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return json.Unmarshal([]byte(out), &s1)
	})
	if s1.Key != "vm@s1" || s1.Size != size || s1.CommandBytes == 0 || s1.CommandBytes > 512 {
		t.Fatalf("snapshot: %+v", s1)
	}
	m1 := model.clone()
	// Writes after the snapshot (copy on write of two data objects), then another.
	if out, ok := qemuIO(t, vm.URI, model.write(2, 1<<20, 64<<10), model.write(3, 8<<20, 4096), "flush"); !ok {
		t.Fatalf("writes after s1: %s", out)
	}
	if out, err := tc.volume(0, "snapshot", "vm", "s2"); err != nil || !strings.Contains(out, "vm@s2") {
		t.Fatalf("snapshot s2: %v\n%s", err, out)
	}
	m2 := model.clone()
	if out, ok := qemuIO(t, vm.URI, model.write(4, 0, 4096), model.write(4, 12<<20, 4<<20), "flush"); !ok {
		t.Fatalf("writes after s2: %s", out)
	}
	if out, err := tc.volume(0, "snapshot", "vm", "s2"); err == nil || !strings.Contains(out, "exists") {
		t.Fatalf("a second s2: %v\n%s", err, out)
	}
	checkModel(t, "vm", vm.URI, model)

	// A snapshot taken while a client writes: no write fails, the volume has every one,
	// and the snapshot holds, block by block, the content before or after the batch.
	pre := model.clone()
	var cmds []string
	for k := range 48 {
		cmds = append(cmds, model.write(byte(10+k), (k*337%4096)*modelBlock, 16*modelBlock))
	}
	var midErr error
	out, ok := qemuIOThen(t, vm.URI, func() {
		_, midErr = tc.volume(1, "snapshot", "vm", "mid") // through another node than the holder
	}, cmds...)
	if !ok || midErr != nil {
		t.Fatalf("writes during a snapshot: %v\n%s", midErr, out)
	}
	checkModel(t, "vm after writes during a snapshot", vm.URI, model)
	midImg := filepath.Join(t.TempDir(), "mid.img")
	if out, err := exec.Command(tool(t, "nbdcopy"), "nbd://"+tc.procs[2].NBDAddr()+"/vm@mid", midImg).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, out)
	}
	mid, _ := os.ReadFile(midImg)
	before, after := 0, 0
	for b := range model {
		if pre[b] != model[b] {
			if mid[b*modelBlock] == pre[b] {
				before++
			} else {
				after++
			}
		}
	}
	t.Logf("vm@mid: %d changed blocks as before the batch, %d as after", before, after)
	for b := range model {
		if got := mid[b*modelBlock]; got != pre[b] && got != model[b] || !bytes.Equal(mid[b*modelBlock:(b+1)*modelBlock], bytes.Repeat([]byte{got}, modelBlock)) {
			t.Fatalf("vm@mid block %d holds %d: neither %d (before) nor %d (after)", b, got, pre[b], model[b])
		}
	}
	if out, err := tc.volume(1, "delete", "vm@mid"); err != nil {
		t.Fatalf("delete vm@mid: %v\n%s", err, out)
	}

	// Read-only exports of the snapshots, on nodes that do not hold the lease too.
	for i, p := range tc.procs {
		checkModel(t, "vm@s1", "nbd://"+p.NBDAddr()+"/vm@s1", m1)
		if i > 0 {
			checkModel(t, "vm@s2", "nbd://"+p.NBDAddr()+"/vm@s2", m2)
		}
	}
	if _, ok := qemuIO(t, "nbd://"+tc.procs[1].NBDAddr()+"/vm@s1", "write -P 9 0 4096"); ok {
		t.Fatal("a write to a snapshot's export was accepted")
	}
	if out, err := exec.Command(tool(t, "nbdinfo"), "--json", "nbd://"+tc.procs[1].NBDAddr()+"/vm@s1").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), `"is_read_only": true`) || !strings.Contains(string(out), fmt.Sprintf(`"export-size": %d`, size)) {
		t.Fatalf("nbdinfo of a snapshot's export: %v\n%s", err, out)
	}
	out, err := tc.volume(0, "snapshots", "vm")
	if err != nil || !strings.Contains(out, "vm@s1") || !strings.Contains(out, "vm@s2") {
		t.Fatalf("snapshots: %v\n%s", err, out)
	}

	// Backups: a full export of s1, an incremental one from s1 to s2, both imported into
	// a new volume, compared with qemu-img.
	dir := t.TempDir()
	full, incr, back := filepath.Join(dir, "s1.img"), filepath.Join(dir, "s1-s2.cvb"), filepath.Join(dir, "r.img")
	if out, err := tc.volume(0, "export", "vm@s1", full); err != nil || !strings.Contains(out, "exported vm@s1") {
		t.Fatalf("export: %v\n%s", err, out)
	}
	qemuCompare(t, full, "nbd://"+tc.procs[1].NBDAddr()+"/vm@s1")
	stdout, err := tc.volumeStdout(0, "export", "vm@s1", "-", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(full); !bytes.Equal(b, stdout) {
		t.Fatalf("export to stdout: %d bytes differ from the file's %d", len(stdout), len(b))
	}
	// An export into a FILE that is not a regular one (a pipe here; a block device the
	// same) gets its holes written as zeroes: seeking over them failed on a pipe
	// ("illegal seek") and left a block device's old bytes in them.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	piped := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		piped <- b
	}()
	if out, err := tc.volume(0, "export", "vm@s1", fifo, "--quiet"); err != nil {
		t.Fatalf("export into a pipe: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(full); !bytes.Equal(b, <-piped) {
		t.Fatal("export into a pipe: the bytes differ from the file's")
	}
	if out, err := tc.volume(0, "export", "vm@s2", incr, "--since", "s1"); err != nil || !strings.Contains(out, "68 KiB changed") {
		t.Fatalf("incremental export: %v\n%s", err, out)
	}
	if fi, err := os.Stat(incr); err != nil || fi.Size() > 80<<10 {
		t.Fatalf("the incremental backup of 68 KiB of changes: %v %v", fi.Size(), err)
	}
	if out, err := tc.volume(0, "export", "vm@s1", filepath.Join(dir, "x"), "--since", "s2"); err == nil || !strings.Contains(out, "not older") {
		t.Fatalf("an incremental export from a later snapshot: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "export", "vm", filepath.Join(dir, "x")); err == nil || !strings.Contains(out, "attached") {
		t.Fatalf("an export of an attached volume: %v\n%s", err, out)
	}
	// The admin API's data endpoints stay within the volume, whatever the offset.
	ac := tc.healAdmin(0)
	for _, idx := range []int64{4, -1, 1 << 62} {
		if _, err := ac.object("vm@s1", idx); err == nil || !strings.Contains(err.Error(), "index") && !strings.Contains(err.Error(), "past the end") {
			t.Fatalf("data object %d of a 16 MiB snapshot: %v", idx, err)
		}
	}
	for _, off := range []string{"16777216", "9223372036854775800", "-4096"} {
		var out map[string]int
		err := ac.doBody(http.MethodPost, "volume/write?name=vm&off="+off, []byte("x"), &out)
		if err == nil || !strings.Contains(err.Error(), "within the volume") && !strings.Contains(err.Error(), "byte offset") {
			t.Fatalf("a write at %s: %v", off, err)
		}
	}
	if out, err := tc.volume(0, "import", "r", incr); err == nil || !strings.Contains(out, "clone of the base snapshot") {
		t.Fatalf("an incremental import into a new volume: %v\n%s", err, out)
	}
	// An image larger than the volume is refused before anything is written: the import
	// overwrote the volume's first 8 MiB (its data objects), then failed.
	tc.mustVolume(0, "create", "tiny", "--size", "8MiB")
	if out, err := tc.volume(0, "import", "tiny", full); err == nil || !strings.Contains(out, "larger than volume tiny") {
		t.Fatalf("an image larger than the volume: %v\n%s", err, out)
	}
	tiny := filepath.Join(dir, "tiny.img")
	if out, err := tc.volume(0, "export", "tiny", tiny, "--quiet"); err != nil {
		t.Fatalf("export tiny: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(tiny); err != nil || len(b) != 8<<20 || !bytes.Equal(b, make([]byte, 8<<20)) {
		t.Fatalf("a refused import wrote into the volume (%d bytes, %v)", len(b), err)
	}
	if out, err := tc.volume(0, "delete", "tiny"); err != nil {
		t.Fatalf("delete tiny: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "import", "r", full); err != nil || !strings.Contains(out, "imported into r") {
		t.Fatalf("import: %v\n%s", err, out)
	}
	// The backup names its base (vm@s1's layer): r, the full image imported, has
	// another chain, and is refused before anything is written (the backup applied to
	// anything but its base silently left garbage).
	if out, err := tc.volume(0, "import", "r", incr); err == nil || !strings.Contains(out, "is not at vm@s1") || !strings.Contains(out, "nothing written") {
		t.Fatalf("an incremental import onto another volume than its base: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "export", "r", back); err != nil {
		t.Fatalf("export of the imported volume: %v\n%s", err, out)
	}
	qemuCompare(t, back, full)
	// The operator vouches r's snapshot holds the base (a restore into another cluster).
	tc.mustVolume(0, "snapshot", "r", "s1")
	if out, err := tc.volume(0, "import", "r", incr, "--onto", "s1"); err != nil || !strings.Contains(out, "applied an incremental backup") {
		t.Fatalf("incremental import --onto: %v\n%s", err, out)
	}
	// A snapshot at which r is, of the base's size, but not a copy of it: the base's
	// digests in the backup differ where it writes.
	tc.mustVolume(0, "snapshot", "r", "s2")
	if out, err := tc.volume(0, "import", "r", incr, "--onto", "s2"); err == nil || !strings.Contains(out, "differs from the base's") || !strings.Contains(out, "nothing written") {
		t.Fatalf("incremental import --onto a snapshot that is not the base: %v\n%s", err, out)
	}
	// A backup cut short is found only at its end, after its records were written: the
	// error says so (it said only "truncated"). r is past its base now: --force-base.
	cut := filepath.Join(dir, "cut.cvb")
	if b, err := os.ReadFile(incr); err != nil || os.WriteFile(cut, b[:len(b)-16], 0o600) != nil {
		t.Fatal(err)
	}
	if out, err := tc.volume(0, "import", "r", cut, "--onto", "s1"); err == nil || !strings.Contains(out, "written since it was at r@s1") {
		t.Fatalf("an incremental import onto a volume written since its base: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "import", "r", cut, "--force-base"); err == nil || !strings.Contains(out, "truncated") || !strings.Contains(out, "written into r before") {
		t.Fatalf("a truncated incremental import: %v\n%s", err, out)
	}
	// Commands go through node1 (each returns once node1's map has it); attach waits for
	// every node to have the lease.
	r := tc.mustVolume(0, "attach", "r", "--node", "node3")
	qemuCompare(t, r.URI, "nbd://"+tc.procs[0].NBDAddr()+"/vm@s2")
	tc.mustVolume(0, "detach", "r")
	for _, args := range [][]string{{"delete", "r@s2"}, {"delete", "r@s1"}, {"delete", "r"}} {
		if out, err := tc.volume(0, args...); err != nil {
			t.Fatalf("%v: %v\n%q", args, err, out)
		}
	}

	// A clone of s1, written on node2.
	if out, err := tc.volume(0, "clone", "vm@s1", "c1"); err != nil || !strings.Contains(out, "cloned") {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "clone", "vm@nope", "c2"); err == nil || !strings.Contains(out, "no snapshot") {
		t.Fatalf("clone of an unknown snapshot: %v\n%s", err, out)
	}
	// A fresh clone of the base is at it: the backup applies (c1 reads as s2).
	if out, err := tc.volume(0, "import", "c1", incr); err != nil || !strings.Contains(out, "applied an incremental backup") {
		t.Fatalf("incremental import into a clone of its base: %v\n%s", err, out)
	}
	// A version 1 backup does not name its base: refused without --force-base.
	var v1 bytes.Buffer
	if bw, err := volume.NewBackupWriter(&v1, volume.BackupHeader{Version: 1, Size: size, BlockSize: 4 << 20}); err != nil || bw.Record(0, 0, []byte("x")) != nil || bw.Close() != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "v1.cvb"), v1.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := tc.volume(0, "import", "c1", filepath.Join(dir, "v1.cvb")); err == nil || !strings.Contains(out, "version 1, which does not name its base") {
		t.Fatalf("a version 1 incremental import: %v\n%s", err, out)
	}
	c1 := tc.mustVolume(0, "attach", "c1", "--node", "node2")
	mc := m2.clone()
	if out, ok := qemuIO(t, c1.URI, mc.write(5, 2<<20, 8192), mc.write(6, 15<<20, 1<<20), "flush"); !ok {
		t.Fatalf("clone writes: %s", out)
	}
	checkModel(t, "c1", c1.URI, mc)
	checkModel(t, "vm@s1 after the clone's writes", "nbd://"+tc.procs[2].NBDAddr()+"/vm@s1", m1)

	// Rollback: refused while attached; then vm reads as s1, and s2 stays.
	if out, err := tc.volume(0, "rollback", "vm", "s1"); err == nil || !strings.Contains(out, "detach") {
		t.Fatalf("rollback of an attached volume: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "rollback", "vm", "nope"); err == nil || !strings.Contains(out, "no snapshot") {
		t.Fatalf("rollback to an unknown snapshot: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "rollback", "vm", "other@s1"); err == nil || !strings.Contains(out, "not of vm") {
		t.Fatalf("rollback to another volume's snapshot: %v\n%s", err, out)
	}
	tc.mustVolume(0, "detach", "vm")
	// The snapshot by its full name, as clone takes it.
	if out, err := tc.volume(0, "rollback", "vm", "vm@s1"); err != nil || !strings.Contains(out, "rolled back") {
		t.Fatalf("rollback: %v\n%s", err, out)
	}
	vm = tc.mustVolume(0, "attach", "vm")
	model = m1.clone()
	checkModel(t, "vm after the rollback", vm.URI, model)
	if out, ok := qemuIO(t, vm.URI, model.write(7, 4<<20, 4096), "flush"); !ok {
		t.Fatalf("write after the rollback: %s", out)
	}
	checkModel(t, "vm", vm.URI, model)
	checkModel(t, "vm@s2 after the rollback", "nbd://"+tc.procs[1].NBDAddr()+"/vm@s2", m2)

	// Refusals while others depend on a snapshot.
	if out, err := tc.volume(0, "delete", "vm@s1"); err == nil || !strings.Contains(out, "c1") {
		t.Fatalf("delete of a snapshot with a clone: %v\n%s", err, out)
	}
	if out, err := tc.volume(0, "delete", "vm@nope"); err == nil || !strings.Contains(out, "no snapshot") {
		t.Fatalf("delete of an unknown snapshot: %v\n%s", err, out)
	}
	tc.mustVolume(0, "detach", "vm")
	if out, err := tc.volume(0, "delete", "vm"); err == nil || !strings.Contains(out, "snapshots") {
		t.Fatalf("delete of a volume with snapshots: %v\n%s", err, out)
	}

	// The whole family goes, and with it every data object.
	tc.mustVolume(1, "detach", "c1")
	for _, args := range [][]string{{"delete", "c1"}, {"delete", "vm@s2"}, {"delete", "vm@s1"}, {"delete", "vm"}} {
		if out, err := tc.volume(1, args...); err != nil { // node2 applied c1's detach
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	proctest.WaitFor(t, 60*time.Second, func() error {
		out, err := tc.volume(0, "space", "--json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		var sp server.VolumeSpace
		if err := json.Unmarshal([]byte(out), &sp); err != nil {
			return err
		}
		if sp.Objects != 0 || sp.Garbage != 0 {
			return fmt.Errorf("after deleting the family: %+v", sp)
		}
		return nil
	})
}

// qemuCompare fails unless qemu-img compare finds images a and b (files or NBD URIs)
// identical.
// TestSnapshotNodeDown: a snapshot taken just as a storage node dies returns once that
// node is marked down, and says it was taken. It waited the whole 30 s for the node the
// map said up when the snapshot applied, then failed with "the lease moved ... retry the
// attach" though the snapshot was there (and taking it again said "exists").
func TestSnapshotNodeDown(t *testing.T) {
	skipShort(t)
	tc := startCluster(t, 3, "--nbd-listen", "127.0.0.1:0", "--down-after", "1s")
	tc.waitVoters(3)
	tc.mustVolume(0, "create", "d", "--size", "8MiB")
	tc.mustVolume(0, "attach", "d")
	proctest.WaitFor(t, 30*time.Second, func() error { // the cluster's feature level (7)
		if out, err := tc.volume(0, "snapshot", "d", "s1"); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	tc.procs[2].Kill()
	if out, err := tc.volume(0, "snapshot", "d", "s2"); err != nil || !strings.Contains(out, "d@s2") {
		t.Fatalf("a snapshot as a node dies: %v\n%s", err, out)
	}
}

func qemuCompare(t *testing.T, a, b string) {
	t.Helper()
	if out, err := exec.Command(tool(t, "qemu-img"), "compare", "-f", "raw", "-F", "raw", a, b).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img compare %s %s: %v\n%s", a, b, err, out)
	}
}

// volumeStdout runs cairn volume against node i and returns its standard output alone.
func (tc *testCluster) volumeStdout(i int, args ...string) ([]byte, error) {
	cmd := exec.Command(proctest.Bin(tc.t), append([]string{"volume", "--admin", tc.procs[i].AdminAddr()}, args...)...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cairn volume %v: %v\n%s", args, err, stderr.String())
	}
	return out, nil
}
