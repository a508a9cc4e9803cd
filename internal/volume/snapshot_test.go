package volume

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// apply applies a map command to the cluster's map.
func (c *cluster) apply(t *testing.T, cmd clustermap.Command) error {
	t.Helper()
	nm, err := clustermap.ApplyCommand(c.maps.Current(), cmd)
	if err == nil {
		c.maps.Set(nm)
	}
	return err
}

// storeObjects is Objects over the cluster's stores (each holds every data object: 3
// nodes, 3 copies).
type storeObjects struct{ c *cluster }

func (o storeObjects) List(_ context.Context, layer string, fn func(int64) error) error {
	res, err := o.c.stores["n1"].List(clustermap.VolumeBucket, object.ListOptions{Prefix: layer + "/", Max: 1 << 20})
	if err != nil {
		return err
	}
	for _, e := range res.Objects {
		i, err := strconv.ParseInt(strings.TrimPrefix(e.Key, layer+"/"), 16, 64)
		if err != nil {
			return err
		}
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

func (o storeObjects) Delete(_ context.Context, layer string, i int64) error {
	for _, st := range o.c.stores {
		if err := st.DeleteObject(clustermap.VolumeBucket, ObjectKey(layer, i)); err != nil && !errors.Is(errors.NotExist, err) {
			return err
		}
	}
	return nil
}

// reclaim runs Reclaim on every Garbage entry until none is left.
func (c *cluster) reclaim(t *testing.T) {
	t.Helper()
	for m := c.maps.Current(); len(m.Garbage) > 0; m = c.maps.Current() {
		for l, g := range m.Garbage {
			if _, err := Reclaim(context.Background(), m, storeObjects{c}, l, g); err != nil {
				t.Fatal(err)
			}
			if err := c.apply(t, clustermap.Command{Op: clustermap.OpReclaimDone, Layer: l, Seq: g.Seq}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestSnapshotChainModel (two seeds): random writes (data, zeroes, trims, across objects) with
// snapshots, clones and rollbacks between them, read back through the volumes' devices
// and through read-only snapshot devices exactly as a model of bytes says, while
// snapshots are deleted and reclaimed (devices delete what they copied on write from a
// layer no one else reads); a snapshot device refuses writes; deleting everything
// leaves no data object.
func TestSnapshotChainModel(t *testing.T) {
	var deletes int64
	for seed := range uint64(2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { deletes += snapshotChainRun(t, seed) })
	}
	if deletes == 0 {
		t.Fatal("no device deleted a data object it copied on write from a layer no one else reads")
	}
}

// snapshotChainRun is one run of TestSnapshotChainModel; it returns how many data objects
// its devices deleted after copying them on write.
func snapshotChainRun(t *testing.T, seed uint64) int64 {
	c := newCluster(t)
	s := c.service("n1")
	const size = 2 << 20
	rng := rand.New(rand.NewPCG(seed, 18))
	model := map[string][]byte{"vm": make([]byte, size)} // by export name
	devs := map[string]*conn{"vm": openDevice(t, s, "vm")}
	ids := 0x100
	newID := func() string { ids++; return fmt.Sprintf("%016x", ids) }
	write := func(name string) {
		if devs[name] == nil {
			devs[name] = openDevice(t, s, name)
		}
		d, m := devs[name], model[name]
		off := rng.Int64N(size - 1)
		n := 1 + rng.Int64N(min(size-off, 400<<10))
		switch rng.IntN(4) {
		case 0:
			if err := d.Trim(off, n); err != nil {
				t.Fatal(err)
			}
			clear(m[off : off+n])
		case 1:
			if err := d.WriteZeroes(off, n); err != nil {
				t.Fatal(err)
			}
			clear(m[off : off+n])
		default:
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(rng.IntN(255) + 1)
			}
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(m[off:], p)
		}
	}
	verify := func(step int) {
		t.Helper()
		for name, m := range model {
			d := devs[name]
			if d == nil {
				d = openDevice(t, s, name)
				devs[name] = d
			}
			if got := readAt(t, d, 0, size); !bytes.Equal(got, m) {
				i := 0
				for got[i] == m[i] {
					i++
				}
				t.Fatalf("step %d: %s differs from the model at byte %d", step, name, i)
			}
		}
	}
	// The volume starts full, so that writes after a snapshot copy on write.
	full := make([]byte, size)
	for i := range full {
		full[i] = byte(rng.IntN(255) + 1)
	}
	if _, err := devs["vm"].WriteAt(full, 0); err != nil {
		t.Fatal(err)
	}
	copy(model["vm"], full)
	volumes := []string{"vm"}
	var snaps []string
	rollbacks, deleted := 0, 0
	for step := range 45 {
		switch op := rng.IntN(9); {
		case op < 4:
			write(volumes[rng.IntN(len(volumes))])
		case op < 6: // snapshot, with the volume attached (its device moves)
			v := volumes[rng.IntN(len(volumes))]
			name := fmt.Sprintf("s%d", step)
			if err := c.apply(t, clustermap.Command{Op: clustermap.OpSnapshotVolume, Name: v, Snapshot: name, Layer: newID()}); err != nil {
				t.Fatal(err)
			}
			key := clustermap.SnapshotKey(v, name)
			model[key] = bytes.Clone(model[v])
			snaps = append(snaps, key)
		case op == 6 && len(snaps) > 0: // clone
			src := snaps[rng.IntN(len(snaps))]
			name := fmt.Sprintf("c%d", step)
			if err := c.apply(t, clustermap.Command{Op: clustermap.OpCloneVolume, Snapshot: src, Volume: &clustermap.Volume{Name: name, ID: newID()}}); err != nil {
				t.Fatal(err)
			}
			if err := c.apply(t, clustermap.Command{Op: clustermap.OpAttachVolume, Name: name, NodeID: "n1"}); err != nil {
				t.Fatal(err)
			}
			model[name] = bytes.Clone(model[src])
			volumes = append(volumes, name)
		case op == 7 && len(snaps) > 0: // rollback: detached, then attached again
			key := snaps[rng.IntN(len(snaps))]
			sn := c.maps.Current().Snapshots[key]
			if d := devs[sn.Volume]; d != nil {
				d.Close()
			}
			delete(devs, sn.Volume)
			for _, cmd := range []clustermap.Command{{Op: clustermap.OpDetachVolume, Name: sn.Volume},
				{Op: clustermap.OpRollbackVolume, Name: sn.Volume, Snapshot: sn.Name, Layer: newID()},
				{Op: clustermap.OpAttachVolume, Name: sn.Volume, NodeID: "n1"}} {
				if err := c.apply(t, cmd); err != nil {
					t.Fatal(err)
				}
			}
			model[sn.Volume] = bytes.Clone(model[key])
			rollbacks++
		case op == 8 && len(snaps) > 0: // delete a snapshot (refused while two depend on it)
			k := rng.IntN(len(snaps))
			sn := c.maps.Current().Snapshots[snaps[k]]
			if c.apply(t, clustermap.Command{Op: clustermap.OpDeleteSnapshot, Name: sn.Volume, Snapshot: sn.Name}) == nil {
				if d := devs[snaps[k]]; d != nil {
					d.Close()
				}
				delete(devs, snaps[k])
				delete(model, snaps[k])
				snaps = append(snaps[:k], snaps[k+1:]...)
				deleted++
			}
		}
		c.reclaim(t)
		if step%3 == 2 {
			verify(step)
		}
	}
	verify(-1)
	if len(snaps) < 2 || len(volumes) < 2 || rollbacks+deleted < 2 {
		t.Fatalf("too few operations: %d snapshots, %d volumes, %d rollbacks, %d deleted", len(snaps), len(volumes), rollbacks, deleted)
	}
	if _, err := devs[snaps[0]].WriteAt([]byte("x"), 0); !errors.Is(errors.Permission, err) {
		t.Fatalf("a write to a snapshot: %v", err)
	}
	// The whole family goes (as the admin API deletes: a volume's head objects first),
	// and with it every data object.
	for _, d := range devs {
		d.Close()
	}
	for round := 0; ; round++ {
		m := c.maps.Current()
		if len(m.Volumes)+len(m.Snapshots) == 0 {
			break
		}
		if round > 100 {
			t.Fatalf("the family cannot be deleted: %v %v", m.Volumes, m.Snapshots)
		}
		for _, sn := range m.Snapshots {
			c.apply(t, clustermap.Command{Op: clustermap.OpDeleteSnapshot, Name: sn.Volume, Snapshot: sn.Name})
		}
		for _, v := range c.maps.Current().Volumes {
			if c.apply(t, clustermap.Command{Op: clustermap.OpDetachVolume, Name: v.Name}) != nil {
				t.Fatal("detach")
			}
			var idx []int64
			storeObjects{c}.List(context.Background(), v.ID, func(i int64) error { idx = append(idx, i); return nil })
			for _, i := range idx {
				storeObjects{c}.Delete(context.Background(), v.ID, i)
			}
			c.apply(t, clustermap.Command{Op: clustermap.OpDeleteVolume, Name: v.Name})
		}
		c.reclaim(t)
	}
	for id, st := range c.stores {
		res, err := st.List(clustermap.VolumeBucket, object.ListOptions{Max: 10})
		if err != nil || len(res.Objects) > 0 {
			t.Fatalf("node %s holds data objects of a deleted family: %v %v", id, res, err)
		}
	}
	return c.deletes.Load()
}

// TestSnapshotUnderWrites: a snapshot taken while a writer writes keeps every write
// acknowledged before it, and the volume every write acknowledged at all; writes go on
// without an error through the device's move to the new head.
func TestSnapshotUnderWrites(t *testing.T) {
	c := newCluster(t)
	s := c.service("n1")
	d := openDevice(t, s, "vm")
	var acked atomic.Int64 // the last counter acknowledged, written at offset 0 of each object
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := int64(1); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			p := []byte(fmt.Sprintf("%016d", n))
			for obj := range int64(4) {
				if _, err := d.WriteAt(p, obj*blockSize+n%64*16); err != nil {
					werr = err
					return
				}
			}
			acked.Store(n)
		}
	}()
	for acked.Load() < 20 {
		if werr != nil {
			t.Fatal(werr)
		}
	}
	before := acked.Load()
	if err := c.apply(t, clustermap.Command{Op: clustermap.OpSnapshotVolume, Name: "vm", Snapshot: "s", Layer: "00000000000000bb"}); err != nil {
		t.Fatal(err)
	}
	for acked.Load() < before+20 {
		if werr != nil {
			t.Fatal(werr)
		}
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatalf("a write during the snapshot: %v", werr)
	}
	last := acked.Load()
	snap := openDevice(t, s, "vm@s")
	for obj := range int64(4) {
		for n := int64(1); n <= last; n++ {
			p := readAt(t, snap, obj*blockSize+n%64*16, 16)
			got := readAt(t, d, obj*blockSize+n%64*16, 16)
			// The newest write to each slot: n's slot holds the largest counter with that residue.
			if n+64 > before && n <= before {
				var sn int64
				fmt.Sscanf(string(p), "%d", &sn)
				if sn < n {
					t.Fatalf("object %d: the snapshot lost write %d acknowledged before it (holds %d)", obj, n, sn)
				}
			}
			if n+64 > last {
				if want := fmt.Sprintf("%016d", n); string(got) != want {
					t.Fatalf("object %d: the volume reads %q, want %q", obj, got, want)
				}
			}
		}
	}
}

// TestCopyOnWriteCrash: a copy on write that reached only some holders before its
// writer died (the write was never acknowledged) leaves every data object whole: the
// next lease's device finds the head's copy on one holder, spreads it, and the object
// reads as the base with the write, or (when no holder took it) as the base; the
// snapshot never changes.
func TestCopyOnWriteCrash(t *testing.T) {
	for _, reached := range []int{1, 0} {
		t.Run(fmt.Sprintf("reached %d", reached), func(t *testing.T) {
			c := newCluster(t)
			d := openDevice(t, c.service("n1"), "vm")
			base := bytes.Repeat([]byte("A"), blockSize)
			if _, err := d.WriteAt(base, 0); err != nil {
				t.Fatal(err)
			}
			if err := c.apply(t, clustermap.Command{Op: clustermap.OpSnapshotVolume, Name: "vm", Snapshot: "s", Layer: "00000000000000bb"}); err != nil {
				t.Fatal(err)
			}
			// The holders the write does not reach fail it for good (a crash of the
			// writer before they got it: it is never retried).
			for _, n := range []string{"n1", "n2", "n3"}[reached:] {
				c.faults[n].Fail(errors.E(errors.Invalid, "crashed"))
			}
			if _, err := d.WriteAt([]byte("B"), 100); err == nil {
				t.Fatal("a write no holder but some took was acknowledged")
			}
			d.Close() // the writer is gone
			for _, f := range c.faults {
				f.Heal()
			}
			c.setMap(func(m *clustermap.Map) {
				v := m.Volumes["vm"]
				v.Epoch = 2
				m.Volumes["vm"] = v
			})
			d2 := openDevice(t, c.service("n1"), "vm")
			want := bytes.Clone(base)
			if reached > 0 {
				want[100] = 'B'
			}
			if got := readAt(t, d2, 0, blockSize); !bytes.Equal(got, want) {
				t.Fatal("the data object is neither the base nor the base with the write")
			}
			for id, l := range c.locals { // and every holder has the same version
				o, err := l.Stat(context.Background(), clustermap.VolumeBucket, ObjectKey("00000000000000bb", 0))
				if err == nil && o.Deleted {
					err = errors.E(errors.NotExist, "deleted")
				}
				switch {
				case reached == 0 && !errors.Is(errors.NotExist, err):
					t.Errorf("node %s has a head object no write made: %v", id, err)
				case reached > 0 && (err != nil || o.HLC != OrderOf(2)+1): // spread, then stamped by lease 2
					t.Errorf("node %s: %v %+v", id, err, o)
				}
			}
			if got := readAt(t, openDevice(t, c.service("n2"), "vm@s"), 0, blockSize); !bytes.Equal(got, base) {
				t.Fatal("the snapshot changed")
			}
		})
	}
}
