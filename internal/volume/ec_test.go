package volume

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

const ecSize = 1 << 20 // four data objects of blockSize

// newECCluster is six nodes' stores and a volume "ev" in class EC42 (4+2, W=5),
// attached on n1 at epoch 1.
func newECCluster(t *testing.T) *cluster {
	t.Helper()
	m := &clustermap.Map{Epoch: 1, Partitions: 16, Replicas: 3,
		Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2},
			"EC42": {Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2}},
		Buckets: map[string]clustermap.Bucket{clustermap.VolumeBucket: {Name: clustermap.VolumeBucket}},
		Volumes: map[string]clustermap.Volume{"ev": {Name: "ev", ID: "00000000000000ec", Size: ecSize, BlockSize: blockSize, Class: "EC42", Holder: "n1", Epoch: 1,
			Nodes: []string{"n1", "n2", "n3", "n4", "n5", "n6"}}}}
	return startNodes(t, m, 6, ECBucket, true)
}

// lease moves volume ev's lease to a new epoch (the next writer) and returns its device.
func (c *cluster) lease(t *testing.T, crash func(phase, shard int) bool) *conn {
	t.Helper()
	c.setMap(func(m *clustermap.Map) {
		v := m.Volumes["ev"]
		v.Epoch++
		m.Volumes["ev"] = v
	})
	s := c.service("n1")
	s.cfg.crash = crash
	return openDevice(t, s, "ev")
}

func (c *cluster) setDown(id string, down bool) {
	c.setMap(func(m *clustermap.Map) {
		for i := range m.Nodes {
			if m.Nodes[i].ID == id {
				m.Nodes[i].State = clustermap.StateUp
				if down {
					m.Nodes[i].State = clustermap.StateDown
				}
			}
		}
	})
}

// Random writes against a byte model on an erasure-coded volume, with a write torn after
// j of its 2(K+M) shard writes (intents, then shards) for every j, and holders marked
// down and back: each next lease reads the torn write's range as either the old or the
// new content, and everything else as the model says.
func TestECTornWrites(t *testing.T) {
	c := newECCluster(t)
	rng := rand.New(rand.NewPCG(3, 4))
	model := make([]byte, ecSize)
	var crashAfter, sent int
	armed := false
	hook := func(phase, shard int) bool {
		if !armed {
			return false
		}
		sent++
		return sent > crashAfter
	}
	d := c.lease(t, hook)
	check := func(d *conn, what string) {
		t.Helper()
		if got := readAt(t, d, 0, ecSize); !bytes.Equal(got, model) {
			t.Fatalf("%s: the volume differs from the model at byte %d", what, firstDiff(got, model))
		}
	}
	write := func(d *conn) (off int64, p []byte, err error) {
		n := 1 + rng.IntN(48<<10)
		if rng.IntN(3) == 0 {
			n = (1 + rng.IntN(12)) * 4096
		}
		off = rng.Int64N(ecSize - int64(n))
		if rng.IntN(2) == 0 {
			off &^= 4095
		}
		switch rng.IntN(6) {
		case 0:
			err = d.Trim(off, int64(n))
		case 1:
			err = d.WriteZeroes(off, int64(n))
		default:
			p = make([]byte, n)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			_, err = d.WriteAt(p, off)
		}
		if p == nil {
			p = make([]byte, n)
		}
		return off, p, err
	}
	down := ""
	for j := 0; j < 2*6; j++ {
		for range 12 {
			off, p, err := write(d)
			if err != nil {
				t.Fatalf("write at %d: %v", off, err)
			}
			copy(model[off:], p)
		}
		if down != "" { // back before the torn write: the check repairs what it missed
			c.setDown(down, false)
			down = ""
		}
		check(d, "before the torn write")
		// A write inside one data object, torn after j shard writes.
		i := rng.Int64N(ecSize / blockSize)
		n := 1 + rng.Int64N(40<<10)
		off := i*blockSize + rng.Int64N(blockSize-n)
		p := make([]byte, n)
		for x := range p {
			p[x] = byte(rng.Uint32())
		}
		readAt(t, d, i*blockSize, blockSize) // a shard that came back behind is found,
		readAt(t, d, i*blockSize, blockSize) // and repaired: the torn write is the next
		crashAfter, sent, armed = j, 0, true
		_, err := d.WriteAt(p, off)
		armed = false
		if !errors.Is(errors.IO, err) {
			t.Fatalf("j=%d: the torn write returned %v", j, err)
		}
		// Sometimes a holder is down for the next lease (and back after its writes).
		if j%3 == 1 {
			down = "n" + strconv.Itoa(1+rng.IntN(6))
			c.setDown(down, true)
		}
		d = c.lease(t, hook)
		got := readAt(t, d, off, int(n))
		switch {
		case bytes.Equal(got, p) && j < 4:
			t.Fatalf("j=%d: a write whose intents reached fewer than K holders was rolled forward", j)
		case bytes.Equal(got, p):
			copy(model[off:], p)
			t.Logf("j=%d: rolled forward", j)
		case bytes.Equal(got, model[off:off+n]) && j >= 6:
			t.Fatalf("j=%d: a write whose second phase had begun was rolled back", j)
		case bytes.Equal(got, model[off:off+n]):
			t.Logf("j=%d: rolled back", j)
		default:
			t.Fatalf("j=%d: the torn write reads as neither the old nor the new content", j)
		}
		check(d, fmt.Sprintf("j=%d, the next lease", j))
	}
	// Every holder up, then two down: the degraded reads decode, writes need five.
	if down != "" {
		c.setDown(down, false)
	}
	d = c.lease(t, hook)
	check(d, "all holders up")
	c.setDown("n2", true)
	c.setDown("n5", true)
	d = c.lease(t, hook)
	check(d, "two holders down")
	if _, err := d.WriteAt(make([]byte, 4096), 0); !errors.Is(errors.IO, err) {
		t.Fatalf("a write with 2 of 6 holders down (W=5) returned %v", err)
	}
	check(d, "two holders down, after a refused write")
	c.setDown("n2", false)
	c.setDown("n5", false)
	d = c.lease(t, hook)
	check(d, "back up")

	// Detached, it reads the same for export (read-only, on another node).
	c.setMap(func(m *clustermap.Map) {
		v := m.Volumes["ev"]
		v.Holder = ""
		m.Volumes["ev"] = v
	})
	rd, closeRead, err := c.service("n3").OpenRead(context.Background(), "ev")
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, ecSize)
	if _, err := rd.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
		t.Fatalf("the export of the detached volume differs from the model (%v)", err)
	}
	closeRead()

	// Deleting the volume's shards leaves no live object in any store.
	s := c.service("n1")
	for {
		_, more, err := s.DeleteShards(context.Background(), "00000000000000ec")
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
	}
	for id, st := range c.stores {
		res, err := st.List(ECBucket, object.ListOptions{Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Objects) > 0 {
			t.Fatalf("node %s keeps %s after the delete", id, res.Objects[0].Key)
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Reads of an erasure-coded data object run while it is written: each read returns one
// write's content whole (the writes fill the same range with one byte each), never a mix.
func TestECReadsDuringWrites(t *testing.T) {
	c := newECCluster(t)
	d := c.lease(t, nil)
	const n = 24 << 10
	off := int64(blockSize + 1000) // unaligned: reads and writes of partial stripes
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			p := make([]byte, n)
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := d.ReadAt(p, off); err != nil {
					errs <- err
					return
				}
				for _, b := range p {
					if b != p[0] {
						errs <- fmt.Errorf("a read mixes two writes: %d and %d", p[0], b)
						return
					}
				}
			}
		}()
	}
	for v := range 60 {
		if _, err := d.WriteAt(bytes.Repeat([]byte{byte(v + 1)}, n), off); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := readAt(t, d, off, n); !bytes.Equal(got, bytes.Repeat([]byte{60}, n)) {
		t.Fatal("the last write does not read back")
	}
}
