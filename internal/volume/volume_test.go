package volume

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/topology"
)

// cluster is three nodes' stores, reached in process through Faults (no network): the
// logic of the volume data path is under test here; the internode protocol has its own
// conformance suite (replica).
type cluster struct {
	maps   *topology.Maps
	locals map[string]*replica.Local
	faults map[string]*replica.Faults // by holder
	stores map[string]*store.Store
	// deletes counts the data objects devices deleted after copying them on write.
	deletes atomic.Int64
}

const blockSize = 256 << 10

func newCluster(t testing.TB) *cluster {
	t.Helper()
	m := &clustermap.Map{Epoch: 1, Partitions: 16, Replicas: 3,
		Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 3, W: 2, R: 1, D: 2}},
		Buckets: map[string]clustermap.Bucket{clustermap.VolumeBucket: {Name: clustermap.VolumeBucket}},
		Volumes: map[string]clustermap.Volume{"vm": {Name: "vm", ID: "00000000000000aa", Size: 4 << 20, BlockSize: blockSize, Holder: "n1", Epoch: 1}}}
	return startNodes(t, m, 3, clustermap.VolumeBucket, false)
}

// startNodes adds n storage nodes n1..nN to m, each with a store in its own directory
// holding bucket (and its volume shards' writes fenced, with fence), and returns the
// in-process cluster serving m.
func startNodes(t testing.TB, m *clustermap.Map, n int, bucket string, fence bool) *cluster {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	c := &cluster{maps: &topology.Maps{}, locals: map[string]*replica.Local{}, faults: map[string]*replica.Faults{}, stores: map[string]*store.Store{}}
	for i := range n {
		id := "n" + strconv.Itoa(i+1)
		m.Nodes = append(m.Nodes, clustermap.Node{ID: id, Addr: "127.0.0.1:" + strconv.Itoa(7201+i), Zone: "z" + strconv.Itoa(i),
			Weight: 1, State: clustermap.StateUp, Roles: []string{clustermap.RoleStorage, clustermap.RoleGateway}})
		st, err := store.Open(store.Config{Dir: t.TempDir(), InlineMax: 16 << 10, ChunkSize: 256 << 10, SegmentSize: 16 << 20, Reserve: 1,
			CompactInterval: time.Hour, Logger: log, Clock: new(hlc.Clock)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.CreateBucket(bucket); err != nil {
			t.Fatal(err)
		}
		c.stores[id] = st
		c.locals[id] = &replica.Local{Node: id, Store: st}
		if fence {
			c.locals[id].Fence = Fence(c.maps, nil)
		}
		c.faults[id] = replica.NewFaults()
	}
	c.maps.Set(m)
	return c
}

// service returns node self's Service.
func (c *cluster) service(self string) *Service {
	topo := topology.NewTopology(c.maps, self, true, slog.New(slog.DiscardHandler))
	// Writes go through the holders' volume journals (answered unsynced; FLUSH syncs).
	return New(Config{Self: self, Maps: c.maps, Topology: topo, WriteTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler),
		Journal: func() bool { return true },
		// The writes queued for a holder other than self go in range batches.
		Batch:   func() bool { return true },
		Replica: func(t topology.Target) replica.Replica { return c.faults[t.ID].Wrap(c.locals[t.ID]) },
		Delete: func(_ context.Context, bucket, key string) error {
			c.deletes.Add(1)
			for _, st := range c.stores {
				if err := st.DeleteObject(bucket, key); err != nil && !errors.Is(errors.NotExist, err) {
					return err
				}
			}
			return nil
		}})
}

func (c *cluster) setMap(fn func(m *clustermap.Map)) {
	m := c.maps.Current().Clone()
	fn(m)
	m.Epoch++
	c.maps.Set(m)
}

func openDevice(t *testing.T, s *Service, name string) *conn {
	t.Helper()
	d, _, err := s.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.(*conn).Close() })
	return d.(*conn)
}

func readAt(t *testing.T, d *conn, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	if _, err := d.ReadAt(p, off); err != nil {
		t.Fatalf("read %d at %d: %v", n, off, err)
	}
	return p
}

// Random writes across object boundaries (data, zeroes, trims) read back as a model says,
// through the holder and through a device opened after a lease move; every holder keeps
// the same bytes.
func TestReadWriteModel(t *testing.T) {
	c := newCluster(t)
	d := openDevice(t, c.service("n1"), "vm")
	const size = 4 << 20
	model := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	if got := readAt(t, d, 0, size); !bytes.Equal(got, model) {
		t.Fatal("a new volume does not read as zeroes")
	}
	for i := range 200 {
		n := 1 + rng.IntN(64<<10)
		if i%10 == 0 {
			n = 1 + rng.IntN(700<<10) // across objects
		}
		off := rng.Int64N(size - int64(n) + 1)
		switch rng.IntN(6) {
		case 0:
			if err := d.Trim(off, int64(n)); err != nil {
				t.Fatal(err)
			}
			clear(model[off : off+int64(n)])
		case 1:
			if err := d.WriteZeroes(off, int64(n)); err != nil {
				t.Fatal(err)
			}
			clear(model[off : off+int64(n)])
		default:
			p := make([]byte, n)
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			if _, err := d.WriteAt(p, off); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		}
	}
	if got := readAt(t, d, 0, size); !bytes.Equal(got, model) {
		t.Fatal("the volume differs from its writes")
	}
	// Every holder of every object holds the same version.
	for i := int64(0); i < size/blockSize; i++ {
		var orders []uint64
		for _, st := range c.stores {
			o, err := st.StatObject(clustermap.VolumeBucket, ObjectKey("00000000000000aa", i))
			if errors.Is(errors.NotExist, err) {
				orders = append(orders, 0)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			orders = append(orders, o.HLC)
		}
		for _, o := range orders[1:] {
			if o != orders[0] {
				t.Fatalf("object %d: holders at orders %v", i, orders)
			}
		}
	}
	// The lease moves to n2: its device reads the same bytes; n1's device is refused.
	c.setMap(func(m *clustermap.Map) {
		v := m.Volumes["vm"]
		v.Holder, v.Epoch = "n2", 2
		m.Volumes["vm"] = v
	})
	if _, err := d.WriteAt([]byte("x"), 0); !errors.Is(errors.Permission, err) || !errors.IsErr(err, ErrLeaseLost) {
		t.Fatalf("write after the lease moved: %v", err)
	}
	if _, _, err := c.service("n1").Open(context.Background(), "vm"); !errors.Is(errors.Permission, err) {
		t.Fatalf("open on the old holder: %v", err)
	}
	d2 := openDevice(t, c.service("n2"), "vm")
	if got := readAt(t, d2, 0, size); !bytes.Equal(got, model) {
		t.Fatal("the new holder reads other bytes")
	}
	if _, err := d2.WriteAt([]byte("new holder"), 100); err != nil {
		t.Fatal(err)
	}
}

// A holder that is down misses writes; once back, the writer finds it behind (its order
// is older), copies it the object whole and goes on; a holder that does not answer blocks
// a write until the cluster marks it down, then is left behind.
func TestHolderMissesWrites(t *testing.T) {
	c := newCluster(t)
	d := openDevice(t, c.service("n1"), "vm")
	if _, err := d.WriteAt(bytes.Repeat([]byte("a"), 8192), 0); err != nil {
		t.Fatal(err)
	}
	// n3 is marked down: writes skip it.
	c.setMap(func(m *clustermap.Map) { m.Nodes[2].State = clustermap.StateDown })
	c.faults["n3"].Partition()
	if _, err := d.WriteAt(bytes.Repeat([]byte("b"), 4096), 4096); err != nil {
		t.Fatal(err)
	}
	// Back up: the next write finds it behind and catches it up first.
	c.faults["n3"].Heal()
	c.setMap(func(m *clustermap.Map) { m.Nodes[2].State = clustermap.StateUp })
	if _, err := d.WriteAt([]byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte("c"), bytes.Repeat([]byte("a"), 4095)...), bytes.Repeat([]byte("b"), 4096)...)
	r, err := c.stores["n3"].OpenObject(clustermap.VolumeBucket, ObjectKey("00000000000000aa", 0))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := r.WriteRange(context.Background(), &buf, 0, 8192); err != nil || !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("the holder that was down holds %q... (%v)", buf.Bytes()[:16], err)
	}
	r.Close()

	// n2 stops answering: the write waits, then goes through once n2 is marked down.
	c.faults["n2"].Partition()
	done := make(chan error, 1)
	go func() {
		_, err := d.WriteAt([]byte("d"), 1)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a write returned while a holder did not answer: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	c.setMap(func(m *clustermap.Map) { m.Nodes[1].State = clustermap.StateDown })
	if err := <-done; err != nil {
		t.Fatalf("write after the silent holder was marked down: %v", err)
	}
	if got := readAt(t, d, 0, 2); string(got) != "cd" {
		t.Fatalf("read %q", got)
	}
}

// A writer whose lease moved cannot change a byte, even through holders whose maps have
// not heard of the move: the new holder's writes moved their orders past its own.
func TestFencedWriter(t *testing.T) {
	c := newCluster(t)
	old := openDevice(t, c.service("n1"), "vm")
	if _, err := old.WriteAt([]byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	// n2 takes the lease and writes; n1's map does not know yet (its device still
	// believes it holds the lease).
	stale := c.maps.Current()
	c.setMap(func(m *clustermap.Map) {
		v := m.Volumes["vm"]
		v.Holder, v.Epoch = "n2", 2
		m.Volumes["vm"] = v
	})
	d2 := openDevice(t, c.service("n2"), "vm")
	if _, err := d2.WriteAt([]byte("AFTER!"), 0); err != nil {
		t.Fatal(err)
	}
	c.maps.Set(stale) // what n1 sees
	if _, err := old.WriteAt([]byte("stale!"), 0); !errors.Is(errors.Permission, err) {
		t.Fatalf("the old holder's write: %v", err)
	}
	for id, st := range c.stores {
		r, err := st.OpenObject(clustermap.VolumeBucket, ObjectKey("00000000000000aa", 0))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		r.WriteRange(context.Background(), &buf, 0, 6)
		r.Close()
		if buf.String() != "AFTER!" {
			t.Errorf("node %s holds %q", id, buf.String())
		}
	}
}

// The holders' fence refuses writes under an old lease and waits for a map that has not
// seen a new one; writes to other buckets pass.
func TestFence(t *testing.T) {
	c := newCluster(t)
	stale := errors.E(errors.Transient, "stale")
	fresh := error(nil)
	fence := Fence(c.maps, func() error { return fresh })
	c.setMap(func(m *clustermap.Map) {
		m.Layers = map[string]clustermap.Layer{"00000000000000cc": {ID: "00000000000000cc", Volume: "vm"}}
	})
	w := func(epoch uint64) object.RangeWrite {
		return object.RangeWrite{Bucket: clustermap.VolumeBucket, Key: ObjectKey("00000000000000aa", 3), Next: OrderOf(epoch) + 1}
	}
	for _, tc := range []struct {
		name  string
		w     object.RangeWrite
		fresh error
		kind  errors.Kind
	}{
		{"current lease", w(1), nil, errors.Other},
		{"old lease", w(0), nil, errors.Permission},
		{"lease the map has not seen", w(2), nil, errors.Transient},
		{"stale map", w(1), stale, errors.Transient},
		{"unknown volume", object.RangeWrite{Bucket: clustermap.VolumeBucket, Key: "00000000000000bb/0", Next: OrderOf(1) + 1}, nil, errors.Transient},
		{"frozen layer", object.RangeWrite{Bucket: clustermap.VolumeBucket, Key: "00000000000000cc/0", Next: OrderOf(1) + 1}, nil, errors.Permission},
		{"another bucket", object.RangeWrite{Bucket: "b", Key: "k", Next: 1}, stale, errors.Other},
	} {
		fresh = tc.fresh
		if err := fence(tc.w); errors.KindOf(err) != tc.kind {
			t.Errorf("%s: %v, want kind %v", tc.name, err, tc.kind)
		}
	}
}

// fakeLease is a confirmation source for Config.Fresh: stale until the test confirms.
type fakeLease struct {
	mu        sync.Mutex
	fresh     bool
	confirmed chan struct{}
	waiting   chan struct{} // one value per wait that found the map stale
}

func newFakeLease() *fakeLease {
	return &fakeLease{fresh: true, confirmed: make(chan struct{}), waiting: make(chan struct{}, 16)}
}

func (l *fakeLease) wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		fresh, ch := l.fresh, l.confirmed
		l.mu.Unlock()
		if fresh {
			return nil
		}
		l.waiting <- struct{}{}
		select {
		case <-ch:
		case <-ctx.Done():
			return errors.E(errors.Transient, "no confirmation")
		}
	}
}

// now is Config.FreshNow: whether wait would return at once.
func (l *fakeLease) now() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fresh
}

func (l *fakeLease) set(fresh bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fresh = fresh
	close(l.confirmed)
	l.confirmed = make(chan struct{})
}

// I/O on a holder whose map is not confirmed lately waits for a confirmation and then
// goes on (a starved node is not a lost lease); once confirmed, a map that gives the
// lease to another node fails the I/O without changing a byte; no confirmation within
// FreshWait fails it too.
func TestStaleMapWaits(t *testing.T) {
	c := newCluster(t)
	lease := newFakeLease()
	s := c.service("n1")
	s.cfg.Fresh, s.cfg.FreshNow = lease.wait, lease.now
	d := openDevice(t, s, "vm")
	if _, err := d.WriteAt([]byte("before"), 0); err != nil {
		t.Fatal(err)
	}

	lease.set(false)
	wrote, read := make(chan error, 1), make(chan error, 1)
	go func() { _, err := d.WriteAt([]byte("during"), 0); wrote <- err }()
	go func() { _, err := d.ReadAt(make([]byte, 6), 0); read <- err }()
	<-lease.waiting
	<-lease.waiting
	lease.set(true)
	if err := <-wrote; err != nil {
		t.Fatalf("write after the confirmation: %v", err)
	}
	if err := <-read; err != nil {
		t.Fatalf("read after the confirmation: %v", err)
	}
	if got := readAt(t, d, 0, 6); string(got) != "during" {
		t.Fatalf("read %q", got)
	}

	// Stale, then confirmed by a map in which the lease moved: refused.
	lease.set(false)
	go func() { _, err := d.WriteAt([]byte("stale!"), 0); wrote <- err }()
	<-lease.waiting
	c.setMap(func(m *clustermap.Map) {
		v := m.Volumes["vm"]
		v.Holder, v.Epoch = "n2", 2
		m.Volumes["vm"] = v
	})
	lease.set(true)
	if err := <-wrote; !errors.Is(errors.Permission, err) || !errors.IsErr(err, ErrLeaseLost) || !strings.Contains(err.Error(), `"n2"`) {
		t.Fatalf("write after the lease moved: %v", err)
	}
	for id, st := range c.stores {
		r, err := st.OpenObject(clustermap.VolumeBucket, ObjectKey("00000000000000aa", 0))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		r.WriteRange(context.Background(), &buf, 0, 6)
		r.Close()
		if buf.String() != "during" {
			t.Errorf("node %s holds %q", id, buf.String())
		}
	}

	// No confirmation within the bound: refused, on n2 (the holder now).
	s2 := c.service("n2")
	s2.cfg.Fresh, s2.cfg.FreshWait = lease.wait, time.Millisecond
	d2 := openDevice(t, s2, "vm")
	lease.set(false)
	if _, err := d2.WriteAt([]byte("late"), 0); !errors.Is(errors.Permission, err) || !errors.IsErr(err, ErrLeaseLost) {
		t.Fatalf("write with no confirmation: %v", err)
	}
	if _, _, err := s2.Open(context.Background(), "vm"); !errors.Is(errors.Permission, err) {
		t.Fatalf("open with no confirmation: %v", err)
	}
}

// A holder paused between taking a write itself and sending it on keeps a write no one
// was told was done, at (old epoch, sequence+1), ahead of the other holders. Once the
// lease moved, the new holder's device reads without it; when the paused holder comes
// back, its copy must lose (the first touch stamped the object with the new epoch), or a
// block the client read would change under it. Likewise for an object the paused
// holder alone created.
func TestPausedHolderWrite(t *testing.T) {
	c := newCluster(t)
	old := openDevice(t, c.service("n1"), "vm")
	if _, err := old.WriteAt([]byte("before"), 0); err != nil {
		t.Fatal(err)
	}
	if err := old.Flush(); err != nil {
		t.Fatal(err)
	}
	// n1's own store takes the next write of object 0 and the first of object 1; the
	// process stops before sending them on.
	key0, key1 := ObjectKey("00000000000000aa", 0), ObjectKey("00000000000000aa", 1)
	o, err := c.stores["n1"].StatObject(clustermap.VolumeBucket, key0)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []object.RangeWrite{
		{Key: key0, Data: []byte("unack!"), Prev: o.HLC, Next: Next(o.HLC, 1)},
		{Key: key1, Data: []byte("unack!"), Next: Next(0, 1)},
	} {
		w.Bucket, w.Size = clustermap.VolumeBucket, blockSize
		if _, err := c.stores["n1"].WriteRange(context.Background(), w); err != nil {
			t.Fatal(err)
		}
	}
	// The lease moves to holder (n1 in state n1State), whose device must read what the
	// client read: "before", and zeroes in the object no write was acknowledged for.
	moveAndRead := func(holder string, epoch uint64, n1State clustermap.NodeState, when string) {
		t.Helper()
		c.setMap(func(m *clustermap.Map) {
			m.Nodes[0].State = n1State
			v := m.Volumes["vm"]
			v.Holder, v.Epoch = holder, epoch
			m.Volumes["vm"] = v
		})
		d := openDevice(t, c.service(holder), "vm")
		if got := readAt(t, d, 0, 6); string(got) != "before" {
			t.Fatalf("%s, the volume reads %q", when, got)
		}
		if got := readAt(t, d, blockSize, 6); !bytes.Equal(got, make([]byte, 6)) {
			t.Fatalf("%s, the volume reads %q in an object never acknowledged", when, got)
		}
	}
	c.faults["n1"].Partition()
	moveAndRead("n2", 2, clustermap.StateDown, "with the paused holder cut off")
	// n1 comes back; a device that syncs every holder (the lease moves on to n3) and
	// the holders' own copies keep what the client read.
	c.faults["n1"].Heal()
	moveAndRead("n3", 3, clustermap.StateUp, "after the paused holder came back")
	for id, st := range c.stores {
		for _, key := range []string{key0, key1} {
			o, err := st.StatObject(clustermap.VolumeBucket, key)
			if err != nil {
				t.Fatalf("node %s, %s: %v", id, key, err)
			}
			if EpochOf(o.HLC) != 3 {
				t.Errorf("node %s holds %s at order %s, not stamped with epoch 3", id, key, orderString(o.HLC))
			}
		}
	}
}
