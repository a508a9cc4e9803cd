// Package volume serves block volumes (Sheepdog's design, docs/design/volumes.md): a
// volume, described in the cluster map, is a sequence of data objects of BlockSize bytes
// (keys "<id>/<index>" of clustermap.VolumeBucket), mutable objects written in place on
// every replica of a replicated class. Only the node holding the volume's write lease
// serves it (Service, the Catalog of this node's NBD server); its writes carry a write
// order, (lease epoch << 40) | sequence, that each holder checks against the order it is
// at, so a replica that missed writes is found and caught up (a whole-object copy) before
// it takes the next one, and a writer whose lease moved is refused.
//
// A volume's head is the one writable layer over a chain of frozen ones (snapshots,
// docs/design/volume-snapshots.md): a data object the head lacks reads as the newest
// layer of the chain that has it, and its first write copies it into the head whole
// (copy on write). A snapshot's export ("volume@snapshot") is read-only and served by
// any node, as many as wanted. Reclaim frees the data objects of layers no one reads.
package volume

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nbd"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// OrderOf is the first write order of a lease epoch; the writes of an epoch follow it one
// by one (Next).
func OrderOf(epoch uint64) uint64 { return epoch << 40 }

// EpochOf is the lease epoch of a write order.
func EpochOf(order uint64) uint64 { return order >> 40 }

// Next is the order of the write that follows one at prev, by a writer at epoch.
func Next(prev, epoch uint64) uint64 {
	if EpochOf(prev) == epoch {
		return prev + 1
	}
	return OrderOf(epoch) + 1
}

// ObjectKey is the key of a volume's data object number i.
func ObjectKey(id string, i int64) string { return fmt.Sprintf("%s/%016x", id, i) }

// Config configures a Service.
type Config struct {
	// Self is this node's id.
	Self string
	Maps topology.MapSource
	// Topology finds the holders of a data object; Replica reaches one.
	Topology *topology.Topology
	Replica  func(topology.Target) replica.Replica
	// Fresh, if set, returns once this node may act on what its map says now: while the
	// Raft leader has not confirmed the map lately (a node that was paused, cut off or
	// starved of CPU may hold a lease that moved), it waits for the next confirmation
	// until ctx ends, and then returns an error. An I/O that finds the map unconfirmed
	// therefore waits instead of failing; only one that sees no confirmation within
	// FreshWait (or finds the lease moved once confirmed) fails, with ErrLeaseLost.
	Fresh func(ctx context.Context) error
	// FreshNow, if set, says without waiting whether Fresh would return nil at once: an
	// I/O that finds the map fresh skips Fresh and the deadline it is given (two per I/O,
	// a timer each, on the hot path of every read and write).
	FreshNow func() bool
	// FreshWait bounds an I/O's wait for Fresh (default 30 s; the I/O's own deadline,
	// WriteTimeout, bounds it too).
	FreshWait time.Duration
	// WriteTimeout bounds a write's wait for holders that do not answer (default 30 s):
	// a holder that cannot be reached is retried until the cluster marks it down, then
	// left to repair.
	WriteTimeout time.Duration
	// Observe, if set, is told of every I/O a device serves (op: read, write, trim, zero,
	// flush; stamp: a data object moved to the device's lease epoch, Device.sync), for
	// per-volume metrics.
	Observe func(volume, op string, bytes int64, d time.Duration, err error)
	// Delete, if set, deletes an object of every holder: a device deletes the data
	// object of an unnamed layer it copied on write and that no one else reads
	// (DeadAfterCopy). Unset, the sweep of the next attach frees it.
	Delete func(ctx context.Context, bucket, key string) error
	// Journal, if set and true, lets a replicated volume's writes be answered once they
	// are in the volume journal of every holder, unsynced (RangeWrite.Unsynced); a FLUSH
	// (and a FUA write) then syncs the journal of every holder written since the last
	// one. It must say false until every node takes journal syncs (feature level 9).
	// Unset or false, every write is synced before it is answered.
	Journal func() bool
	// Batch, if set and true, lets the writes queued for one remote holder go in one
	// request (a range batch, replica.RangeBatcher; see batch.go). It must say false
	// until every node serves range batches (feature level 11). Unset or false, every
	// write is one request to each remote holder.
	Batch  func() bool
	Logger *slog.Logger

	// crash, if set (tests), is asked before each shard write of an erasure-coded
	// volume (phase 1: intents, 2: shards) whether the writer dies instead.
	crash func(phase, shard int) bool
	// retry, if set (tests), replaces the 200 ms an erasure-coded write waits before it
	// tries again a shard holder that did not answer.
	retry time.Duration
}

// Service serves the volumes this node holds the write lease of.
type Service struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	open map[string]*Device // by volume name

	sendMu  sync.Mutex
	senders map[string]*sender // by holder node id
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.FreshWait <= 0 {
		cfg.FreshWait = 30 * time.Second
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "volume"), open: map[string]*Device{}}
}

var _ nbd.Catalog = (*Service)(nil)

// info describes a volume (or, ro, a snapshot) as an NBD export.
func info(v clustermap.Volume, ro bool) nbd.ExportInfo {
	what := "cairn volume "
	if ro {
		what = "cairn snapshot (read-only) "
	}
	return nbd.ExportInfo{Name: v.Name, Description: what + v.Name, Size: v.Size, MultiConn: true, ReadOnly: ro,
		MinBlock: 1, PreferredBlock: 4096, MaxBlock: uint32(min(v.BlockSize, nbd.MaxPayload))}
}

// snapshotView returns snapshot key ("volume@name") as the volume a read-only device
// reads: its layer as the top, the snapshot's size.
func snapshotView(m *clustermap.Map, key string) (clustermap.Volume, error) {
	s, ok := m.Snapshots[key]
	if !ok {
		return clustermap.Volume{}, errors.Errorf("", errors.NotExist, "no snapshot %s", key)
	}
	return clustermap.Volume{Name: key, ID: s.Layer, Parent: m.Layers[s.Layer].Parent, Size: s.Size, BlockSize: s.BlockSize, Class: s.Class, Created: s.Created}, nil
}

// held returns the volume name if this node holds its lease.
func (s *Service) held(name string) (clustermap.Volume, error) {
	v, ok := s.cfg.Maps.Current().Volumes[name]
	switch {
	case !ok:
		return v, errors.Errorf("", errors.NotExist, "no volume %s", name)
	case v.Holder != s.cfg.Self:
		who := v.Holder
		if who == "" {
			who = "no node"
		}
		return v, errors.Errorf("", errors.Permission, "volume %s is attached on %s, not on this node (%s): attach it here first", name, who, s.cfg.Self)
	}
	return v, nil
}

// List implements nbd.Catalog: the volumes attached to this node, and every snapshot.
func (s *Service) List(context.Context) ([]nbd.ExportInfo, error) {
	var out []nbd.ExportInfo
	m := s.cfg.Maps.Current()
	for _, v := range m.Volumes {
		if v.Holder == s.cfg.Self {
			out = append(out, info(v, false))
		}
	}
	for k, s := range m.Snapshots {
		out = append(out, nbd.ExportInfo{Name: k, Description: "cairn snapshot (read-only) " + k, Size: s.Size, ReadOnly: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Info implements nbd.Catalog.
func (s *Service) Info(_ context.Context, name string) (nbd.ExportInfo, error) {
	if strings.Contains(name, "@") {
		v, err := snapshotView(s.cfg.Maps.Current(), name)
		return info(v, true), err
	}
	v, err := s.held(name)
	if err != nil {
		return nbd.ExportInfo{}, err
	}
	return info(v, false), nil
}

// fresh waits (Config.Fresh) until this node's map is confirmed, at most FreshWait and
// until ctx ends; its error is ErrLeaseLost (Permission): this node cannot show that it
// still holds any lease.
func (s *Service) fresh(ctx context.Context) error {
	if s.cfg.Fresh == nil || s.cfg.FreshNow != nil && s.cfg.FreshNow() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.FreshWait)
	defer cancel()
	if err := s.cfg.Fresh(ctx); err != nil {
		return errors.E(errors.Permission, fmt.Errorf("%w: %v", ErrLeaseLost, err))
	}
	return nil
}

// Open implements nbd.Catalog: every connection to a volume (or to a snapshot,
// "volume@name", read-only, on any node) shares one Device.
func (s *Service) Open(ctx context.Context, name string) (nbd.Device, nbd.ExportInfo, error) {
	ro := strings.Contains(name, "@")
	var v clustermap.Volume
	var err error
	if ro {
		v, err = snapshotView(s.cfg.Maps.Current(), name)
	} else {
		v, err = s.held(name)
	}
	if err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	if !ro {
		if err := s.fresh(ctx); err != nil {
			return nil, nbd.ExportInfo{}, err
		}
		if v, err = s.held(name); err != nil { // the map as confirmed
			return nil, nbd.ExportInfo{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.open[name]
	if d != nil {
		d.gate.Lock()
		if d.vol.Epoch != v.Epoch || d.vol.Created != v.Created || (ro && d.vol.ID != v.ID) {
			d.gate.Unlock()
			d = nil // another lease, or another volume of the same name
		}
	}
	if d == nil {
		m := s.cfg.Maps.Current()
		d = &Device{s: s, ro: ro, vol: v, chain: m.Chain(v.Parent), objs: map[int64]*objState{}}
		if d.ec, err = layoutOf(m, v); err != nil {
			return nil, nbd.ExportInfo{}, err
		}
		d.gate.Lock()
		s.open[name] = d
	}
	d.vol.Size = v.Size // grown since it was opened: new connections see the new size
	in := info(d.vol, ro)
	d.gate.Unlock()
	d.refs++
	return &conn{d}, in, nil
}

// OpenRead returns a read-only device of a snapshot ("volume@name") or of a detached
// volume, for export (its reads fail once the volume is attached or the snapshot
// deleted), and the function that closes it.
func (s *Service) OpenRead(ctx context.Context, name string) (io.ReaderAt, func() error, error) {
	if strings.Contains(name, "@") {
		d, _, err := s.Open(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		return d, d.(*conn).Close, nil
	}
	m := s.cfg.Maps.Current()
	v, ok := m.Volumes[name]
	switch {
	case !ok:
		return nil, nil, errors.Errorf("", errors.NotExist, "no volume %s", name)
	case v.Holder != "":
		return nil, nil, errors.Errorf("", errors.Precondition, "volume %s is attached on %s: export a snapshot of it (cairn volume snapshot %s SNAP), or detach it", name, v.Holder, name)
	}
	d := &Device{s: s, ro: true, vol: v, chain: m.Chain(v.Parent), objs: map[int64]*objState{}}
	var err error
	if d.ec, err = layoutOf(m, v); err != nil {
		return nil, nil, err
	}
	return d, func() error { return nil }, nil
}

// conn is one NBD connection's handle on a shared Device.
type conn struct{ *Device }

// Close implements io.Closer: the last connection's close forgets the device's state.
func (c *conn) Close() error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	c.refs--
	if c.refs == 0 && s.open[c.vol.Name] == c.Device {
		delete(s.open, c.vol.Name)
	}
	return nil
}

// Device is an attached volume (or a snapshot, read-only): the nbd.Device its
// connections share.
type Device struct {
	s    *Service
	ro   bool // a snapshot's export
	refs int  // guarded by s.mu

	// gate is held shared by every I/O, alone to move the device to a new head (a
	// snapshot was taken: move) once the I/O in flight on the old one is done.
	gate  sync.RWMutex
	vol   clustermap.Volume // as attached: the epoch is the lease this device writes under; ID its head
	chain []string          // the frozen layers under the head, newest first
	ec    *ecLayout         // an erasure-coded volume's (nil: replicated)

	mu   sync.Mutex
	objs map[int64]*objState
	// dirty: the holders sent unsynced writes since the last FLUSH took the set (by id).
	dirty map[string]topology.Target

	warns warnLimit // the "retrying" warnings, at most one a holder every warnEvery
}

// warnEvery is how often a device logs that one holder keeps failing the same way
// (retried writes: every write in flight retries every 200 ms while a holder is slow or
// its map stale, and each would log a line).
const warnEvery = 10 * time.Second

// warnLimit lets through one warning of a kind every warnEvery and counts the others.
type warnLimit struct {
	mu      sync.Mutex
	last    map[string]time.Time
	skipped map[string]int
}

// allow reports whether the warning of kind may be logged now and how many were held
// back since the last one that was.
func (w *warnLimit) allow(kind string, now time.Time) (ok bool, held int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last, w.skipped = map[string]time.Time{}, map[string]int{}
	}
	if t, seen := w.last[kind]; seen && now.Sub(t) < warnEvery {
		w.skipped[kind]++
		return false, 0
	}
	held = w.skipped[kind]
	w.last[kind] = now
	delete(w.skipped, kind)
	return true, held
}

// objState is what the device knows of one data object.
type objState struct {
	mu     sync.Mutex // one write (or catch-up) of the object at a time
	synced bool       // every holder reached was brought to order, and base found
	order  uint64     // the object's order in the head on its holders (0: the head lacks it)
	// base is the layer of the chain that has the object when the head lacks it ("":
	// none, it reads as zeroes), at baseOrder.
	base      string
	baseOrder uint64
	unsure    bool     // a write of it failed: its holders may differ
	ec        *ecState // an erasure-coded volume's shards
}

func (d *Device) obj(i int64) *objState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.objs[i]
	if st == nil {
		st = &objState{}
		d.objs[i] = st
	}
	return st
}

// ErrLeaseLost refuses the I/O of a device whose volume's lease moved.
var ErrLeaseLost = errors.New("this node no longer holds the volume's write lease")

// errMoved says that the volume's head moved (a snapshot): the device moves with it.
var errMoved = errors.New("the volume's head moved")

// enter checks that the device may serve I/O (check) and holds the gate shared, moving
// the device to a new head first if a snapshot gave the volume one. The caller calls
// d.gate.RUnlock when done, if enter returned no error. A wait for this node's map to
// be confirmed (Config.Fresh) happens before the gate is taken.
func (d *Device) enter(ctx context.Context) error {
	if !d.ro {
		if err := d.s.fresh(ctx); err != nil {
			return err
		}
	}
	for {
		d.gate.RLock()
		err := d.check(ctx)
		if err != errMoved {
			if err != nil {
				d.gate.RUnlock()
			}
			return err
		}
		d.gate.RUnlock()
		d.gate.Lock()
		if d.check(ctx) == errMoved {
			d.move()
		}
		d.gate.Unlock()
	}
}

// move moves the device to the volume's new head: what it knew of the old head's data
// objects becomes its knowledge of the base they are read from (the new head is empty:
// only this device writes it). The caller holds the gate alone.
func (d *Device) move() {
	m := d.s.cfg.Maps.Current()
	v := m.Volumes[d.vol.Name]
	old := d.vol.ID
	d.mu.Lock()
	objs := map[int64]*objState{}
	if v.Parent == old { // one snapshot since: else find every object again
		for i, st := range d.objs {
			switch {
			case !st.synced || st.unsure:
			case st.order > 0:
				objs[i] = &objState{synced: true, base: old, baseOrder: st.order}
			default:
				objs[i] = &objState{synced: true, base: st.base, baseOrder: st.baseOrder}
			}
		}
	}
	d.objs = objs
	d.mu.Unlock()
	d.vol, d.chain = v, m.Chain(v.Parent)
	d.s.log.Info("a volume's device moved to its new head (snapshot)", "volume", v.Name, "head", v.ID, "frozen", old)
}

// check refuses I/O unless this node still holds the lease the device was opened under,
// by a map it may trust (Config.Fresh: a map not confirmed lately is waited for, not
// refused at once); errMoved if the volume has a new head.
func (d *Device) check(ctx context.Context) error {
	if d.ro {
		m := d.s.cfg.Maps.Current()
		if !strings.Contains(d.vol.Name, "@") { // a detached volume read for export
			if v, ok := m.Volumes[d.vol.Name]; !ok || v.ID != d.vol.ID || v.Holder != "" {
				return errors.Errorf("", errors.Precondition, "volume %s was attached, rolled back or deleted during the read", d.vol.Name)
			}
			return nil
		}
		s, ok := m.Snapshots[d.vol.Name]
		if !ok || s.Layer != d.vol.ID {
			return errors.Errorf("", errors.NotExist, "snapshot %s was deleted", d.vol.Name)
		}
		return nil
	}
	if err := d.s.fresh(ctx); err != nil {
		return err
	}
	v, ok := d.s.cfg.Maps.Current().Volumes[d.vol.Name]
	if !ok || v.Created != d.vol.Created || v.Holder != d.s.cfg.Self || v.Epoch != d.vol.Epoch {
		return errors.E(errors.Permission, fmt.Errorf("%w (volume %s): the map gives it to %q at lease epoch %d, this device writes under epoch %d", ErrLeaseLost, d.vol.Name, v.Holder, v.Epoch, d.vol.Epoch))
	}
	if v.ID != d.vol.ID {
		return errMoved
	}
	return nil
}

// pieces splits [off, off+n) at data-object boundaries.
func (d *Device) pieces(off, n int64, fn func(i, objOff, pos, k int64) error) error {
	bs := d.vol.BlockSize
	for pos := int64(0); pos < n; {
		i := (off + pos) / bs
		objOff := (off + pos) % bs
		k := min(bs-objOff, n-pos)
		if err := fn(i, objOff, pos, k); err != nil {
			return err
		}
		pos += k
	}
	return nil
}

func (d *Device) targets(key string) ([]topology.Target, error) {
	_, ts, err := d.s.cfg.Topology.Replicas(clustermap.VolumeBucket, key)
	if err != nil {
		return nil, err
	}
	return ts, nil
}

// observe reports an operation that started at start to Config.Observe.
func (d *Device) observe(op string, n int64, start time.Time, err error) {
	if d.s.cfg.Observe != nil {
		d.s.cfg.Observe(d.vol.Name, op, n, time.Since(start), err)
	}
}

// ReadAt implements io.ReaderAt.
func (d *Device) ReadAt(p []byte, off int64) (n int, err error) {
	defer func(start time.Time) { d.observe("read", int64(n), start, err) }(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.WriteTimeout)
	defer cancel()
	if err := d.enter(ctx); err != nil {
		return 0, err
	}
	defer d.gate.RUnlock()
	err = d.pieces(off, int64(len(p)), func(i, objOff, pos, k int64) error {
		if d.ec != nil {
			return d.ecRead(ctx, i, objOff, p[pos:pos+k])
		}
		st := d.obj(i)
		for try := 0; ; try++ {
			st.mu.Lock()
			err := d.sync(ctx, i, st)
			layer, order := d.vol.ID, st.order
			if order == 0 {
				layer, order = st.base, st.baseOrder
			}
			st.mu.Unlock()
			if err != nil {
				return err
			}
			if order == 0 {
				clear(p[pos : pos+k])
				return nil
			}
			// The order read names the version every holder has; a write that lands
			// meanwhile moves them past it: read again at the new order.
			if err = d.read(ctx, ObjectKey(layer, i), order, objOff, p[pos:pos+k]); err != errNewer || try == 100 {
				return err
			}
			if layer != d.vol.ID { // a frozen layer's holders differ: find it again
				st.mu.Lock()
				st.synced = false
				st.mu.Unlock()
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// read reads len(p) bytes of data object key at order from off, from the first holder
// that has it (this node's own copy first).
func (d *Device) read(ctx context.Context, key string, order uint64, off int64, p []byte) error {
	ts, err := d.targets(key)
	if err != nil {
		return err
	}
	sort.SliceStable(ts, func(a, b int) bool { return ts[a].Local && !ts[b].Local })
	var last error
	newer := false
	for _, t := range ts {
		if t.Down {
			continue
		}
		rd, err := d.s.cfg.Replica(t).Open(ctx, clustermap.VolumeBucket, key, replica.OpenOptions{Version: order, Off: off, N: int64(len(p))})
		if err != nil {
			newer = newer || errors.Is(errors.Precondition, err)
			last = err
			continue
		}
		w := &sliceWriter{p: p}
		_, err = rd.WriteRange(ctx, w, off, int64(len(p)))
		rd.Close()
		if err == nil && w.n == len(p) {
			return nil
		}
		last = err
	}
	if newer {
		return errNewer
	}
	if last == nil {
		last = errors.E(errors.Transient, "no holder of the data object can be reached")
	}
	return errors.E(errors.IO, fmt.Errorf("volume %s, data object %s: %w", d.vol.Name, key, last))
}

// errNewer says that the holders of a data object moved past the order a read asked for
// (a write landed in between): the read is done again.
var errNewer = errors.New("the data object was written during the read")

type sliceWriter struct {
	p []byte
	n int
}

func (w *sliceWriter) Write(b []byte) (int, error) {
	m := copy(w.p[w.n:], b)
	w.n += m
	if m < len(b) {
		return m, errors.E(errors.Invalid, "more bytes than asked for")
	}
	return m, nil
}

// WriteAt implements io.WriterAt.
func (d *Device) WriteAt(p []byte, off int64) (n int, err error) {
	defer func(start time.Time) { d.observe("write", int64(n), start, err) }(time.Now())
	if err := d.writeRange(off, int64(len(p)), p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush implements nbd.Device: it syncs the volume journal of every holder that took an
// unsynced write since the last FLUSH (a write synced when it was answered needs nothing).
func (d *Device) Flush() (err error) {
	defer func(start time.Time) { d.observe("flush", 0, start, err) }(time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.WriteTimeout)
	defer cancel()
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.gate.RUnlock()
	return d.flushJournals(ctx)
}

// flushJournals syncs the journals of the holders in d.dirty. A holder that does not
// answer is tried again every 200 ms until it answers or the cluster marks it down (its
// copies missed nothing the others lack: the writes it took unsynced are on every other
// holder, which it catches up from); then the FLUSH fails.
func (d *Device) flushJournals(ctx context.Context) error {
	d.mu.Lock()
	dirty := d.dirty
	d.dirty = nil
	d.mu.Unlock()
	if len(dirty) == 0 {
		return nil
	}
	errs := make(chan error, len(dirty))
	for _, t := range dirty {
		go func() {
			for {
				r, ok := d.s.cfg.Replica(t).(replica.JournalSyncer)
				if !ok {
					errs <- nil // a holder without a journal synced every write
					return
				}
				err := r.SyncJournal(ctx)
				if err == nil {
					errs <- nil
					return
				}
				if n, ok := d.s.cfg.Maps.Current().Node(t.ID); !ok || n.State == clustermap.StateDown || n.State == clustermap.StateOut {
					errs <- nil
					return
				}
				if ok, held := d.warns.allow("sync "+t.ID, time.Now()); ok {
					d.s.log.Warn("a holder of a volume's data objects did not sync its journal; retrying until it is marked down", "volume", d.vol.Name, "node", t.ID, "err", err, "same_warnings_held", held)
				}
				select {
				case <-ctx.Done():
					errs <- errors.Errorf("", errors.IO, "volume %s: node %s did not sync its journal within %s: %v", d.vol.Name, t.ID, d.s.cfg.WriteTimeout, err)
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	var first error
	for range dirty {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		d.mu.Lock()
		if d.dirty == nil {
			d.dirty = map[string]topology.Target{}
		}
		for id, t := range dirty {
			d.dirty[id] = t
		}
		d.mu.Unlock()
	}
	return first
}

// Trim implements nbd.Device: the range becomes a hole (it reads as zeroes).
func (d *Device) Trim(off, n int64) (err error) {
	defer func(start time.Time) { d.observe("trim", n, start, err) }(time.Now())
	return d.writeRange(off, n, nil)
}

// WriteZeroes implements nbd.Zeroer.
func (d *Device) WriteZeroes(off, n int64) (err error) {
	defer func(start time.Time) { d.observe("zero", n, start, err) }(time.Now())
	return d.writeRange(off, n, nil)
}

// writeRange writes p (nil: n zeroes) at off.
func (d *Device) writeRange(off, n int64, p []byte) error {
	if d.ro {
		return errors.Errorf("", errors.Permission, "snapshot %s is read-only", d.vol.Name)
	}
	for {
		err := d.writeRangeOnce(off, n, p)
		if err != errMoved {
			return err
		}
		// A snapshot froze the head under the write: it goes again into the new head
		// (its bytes may be in the snapshot too: it was not acknowledged before it).
	}
}

func (d *Device) writeRangeOnce(off, n int64, p []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.WriteTimeout)
	defer cancel()
	if err := d.enter(ctx); err != nil {
		return err
	}
	defer d.gate.RUnlock()
	return d.pieces(off, n, func(i, objOff, pos, k int64) error {
		if d.ec != nil {
			var data []byte
			if p != nil {
				data = p[pos : pos+k]
			}
			return d.ecWrite(ctx, i, objOff, k, data)
		}
		w := object.RangeWrite{Bucket: clustermap.VolumeBucket, Key: ObjectKey(d.vol.ID, i), Size: d.vol.BlockSize, Off: objOff}
		if p != nil {
			w.Data = p[pos : pos+k]
		} else {
			w.Len = k
		}
		return d.write(ctx, i, w)
	})
}

// write applies w to data object i on every holder.
func (d *Device) write(ctx context.Context, i int64, w object.RangeWrite) (err error) {
	st := d.obj(i)
	st.mu.Lock()
	defer st.mu.Unlock()
	// A write that failed may be on some holders and not on others (a holder that
	// took it and whose answer was lost, or that was still to be sent a batch that
	// held it): the next use of the object brings its holders to one order again first
	// (sync). Else the next write would carry this one's orders, and a holder that took
	// this one would count the next as taken already and miss it.
	defer func() {
		if err != nil {
			st.synced = false
		}
	}()
	if err := d.sync(ctx, i, st); err != nil {
		return err
	}
	if w.Data == nil && st.order == 0 && st.base == "" {
		return nil // zeroes into an object never written: it reads as zeroes already
	}
	return d.apply(ctx, i, st, w, false)
}

// apply applies w to data object i on every holder, once the device knows the object
// (sync); stamp, that w is sync's stamp (it changes no byte). The caller holds st.mu.
func (d *Device) apply(ctx context.Context, i int64, st *objState, w object.RangeWrite, stamp bool) error {
	if err := d.check(ctx); err != nil {
		return err
	}
	cow := ""
	whole := w.Off == 0 && (int64(len(w.Data)) == d.vol.BlockSize || (w.Data == nil && w.Len == d.vol.BlockSize))
	if st.order == 0 && st.base != "" && whole {
		cow = st.base // the write replaces the object whole: nothing to copy
	} else if st.order == 0 && st.base != "" {
		// Copy on write: the head's first version of the object is the base's, with
		// the write applied, in one range write: a crash leaves the head without it
		// (reads go on to the base) or with all of it, never between.
		buf := make([]byte, d.vol.BlockSize)
		if err := d.read(ctx, ObjectKey(st.base, i), st.baseOrder, 0, buf); err != nil {
			st.synced = false
			return err
		}
		if w.Data != nil {
			copy(buf[w.Off:], w.Data)
		} else {
			clear(buf[w.Off : w.Off+w.Len])
		}
		cow = st.base
		w.Off, w.Data, w.Len = 0, buf, 0
	}
	w.Prev, w.Next = st.order, Next(st.order, d.vol.Epoch)
	// A stamp (sync) is synced when answered whatever the journal: a power cut must
	// not take the holders back to the order a returning holder could beat.
	w.Unsynced = !stamp && d.s.cfg.Journal != nil && d.s.cfg.Journal()
	for {
		ts, err := d.targets(w.Key)
		if err != nil {
			return err
		}
		if w.Unsynced {
			d.mu.Lock()
			if d.dirty == nil {
				d.dirty = map[string]topology.Target{}
			}
			for _, t := range ts {
				if !t.Down {
					d.dirty[t.ID] = t
				}
			}
			d.mu.Unlock()
		}
		done, retry, err := d.fanOut(ctx, ts, w)
		if err != nil {
			st.unsure = true
			if errors.Is(errors.Permission, err) && d.frozen() {
				return errMoved
			}
			return err
		}
		if !retry {
			if done == 0 {
				st.unsure = true
				return errors.Errorf("", errors.IO, "volume %s, data object %d: no holder took the write", d.vol.Name, i)
			}
			st.order, st.unsure = w.Next, false
			if cow != "" {
				st.base, st.baseOrder = "", 0
				if d.s.cfg.Delete != nil && DeadAfterCopy(d.s.cfg.Maps.Current(), d.vol, cow) {
					if err := d.s.cfg.Delete(ctx, clustermap.VolumeBucket, ObjectKey(cow, i)); err != nil {
						d.s.log.Warn("could not delete a data object copied on write that no one reads any more; the next attach reclaims it", "volume", d.vol.Name, "key", ObjectKey(cow, i), "err", err)
					}
				}
			}
			return nil
		}
		// A holder did not answer: wait for it, or for the cluster to mark it down.
		select {
		case <-ctx.Done():
			return errors.Errorf("", errors.IO, "volume %s, data object %d: a holder did not take the write within %s", d.vol.Name, i, d.s.cfg.WriteTimeout)
		case <-time.After(200 * time.Millisecond):
		}
		// The holders that took it are at w.Next; the others get it again from w.Prev.
	}
}

// frozen reports whether a holder's refusal of a write comes from a snapshot that froze
// the head: this node's map shows the volume with another head within 2 s (a holder's
// map may be ahead of this node's).
func (d *Device) frozen() bool {
	for deadline := time.Now().Add(2 * time.Second); ; {
		if v, ok := d.s.cfg.Maps.Current().Volumes[d.vol.Name]; ok && v.ID != d.vol.ID && v.Epoch == d.vol.Epoch {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fanOut sends w to every holder not marked down that is not at w.Next yet. It reports
// how many holders are at w.Next, and whether one must be tried again (it did not
// answer).
func (d *Device) fanOut(ctx context.Context, ts []topology.Target, w object.RangeWrite) (done int, retry bool, err error) {
	type result struct {
		t   topology.Target
		o   *object.Object
		err error
	}
	var live []topology.Target
	for _, t := range ts {
		if !t.Down {
			live = append(live, t)
		}
	}
	results := make(chan result, len(live))
	for _, t := range live {
		go func() {
			r := d.s.cfg.Replica(t)
			rw, ok := r.(replica.RangeWriter)
			if !ok {
				results <- result{t: t, err: errors.E(errors.Invalid, "holder takes no range writes")}
				return
			}
			o, err := d.writeTo(ctx, t, r, rw, w)
			if errors.Is(errors.Precondition, err) {
				o, err = d.resolve(ctx, r, ts, w)
			}
			results <- result{t, o, err}
		}()
	}
	for range live {
		res := <-results
		switch {
		case res.err == nil:
			done++
		case errors.Is(errors.Permission, res.err):
			err = errors.E(errors.Permission, fmt.Errorf("node %s refused the write: %w", res.t.ID, res.err))
		case errors.Is(errors.Transient, res.err) || errors.Is(errors.IO, res.err):
			if ok, held := d.warns.allow("write "+res.t.ID, time.Now()); ok {
				d.s.log.Warn("a holder of a volume's data object did not take a write; retrying until it is marked down", "volume", d.vol.Name, "node", res.t.ID, "err", res.err, "same_warnings_held", held)
			}
			retry = true
		case errors.Is(errors.NoSpace, res.err):
			err = errors.E(errors.NoSpace, fmt.Errorf("node %s: %w", res.t.ID, res.err)) // ENOSPC to the client
		default:
			err = errors.E(errors.IO, fmt.Errorf("node %s: %w", res.t.ID, res.err))
		}
	}
	return done, retry, err
}

// resolve handles a holder that refused w for its order: one that is at w.Next already
// took it (an earlier try whose answer was lost); one behind w.Prev missed writes and gets
// the object whole from a holder at w.Next, then counts as done; one ahead of w.Next was
// written by a newer lease: this writer is fenced.
func (d *Device) resolve(ctx context.Context, r replica.Replica, ts []topology.Target, w object.RangeWrite) (*object.Object, error) {
	o, err := r.Stat(ctx, w.Bucket, w.Key)
	if err != nil && !errors.Is(errors.NotExist, err) {
		return nil, err
	}
	cur := uint64(0)
	if o != nil && !o.Deleted {
		cur = o.HLC
	}
	switch {
	case cur == w.Next:
		return o, nil
	case cur > w.Next || EpochOf(cur) > d.vol.Epoch:
		return nil, errors.E(errors.Permission, fmt.Errorf("%w: the holder is at write order %s, past this writer's %s", ErrLeaseLost, orderString(cur), orderString(w.Next)))
	}
	// Behind: copy the object from a holder that has w.Next (or, when no holder has
	// it yet, that has w.Prev, then apply w). w itself is in flight to the other
	// holders meanwhile, so a source seen at w.Prev may move to w.Next while it is
	// copied (Precondition: "changed since it was opened"): look again, a few times.
	for range 3 {
		o, err := d.copyFrom(ctx, r, ts, w)
		if errors.Is(errors.Precondition, err) {
			continue
		}
		return o, err
	}
	return nil, errors.Errorf("", errors.Transient, "holder %s is behind and every holder to copy from moved on while it was copied", r.ID())
}

// copyFrom copies w's object to r, which is behind, from a holder at w.Next, or else from
// one at w.Prev and then applies w on r.
func (d *Device) copyFrom(ctx context.Context, r replica.Replica, ts []topology.Target, w object.RangeWrite) (*object.Object, error) {
	cur := uint64(0)
	if o, err := r.Stat(ctx, w.Bucket, w.Key); err == nil && !o.Deleted {
		cur = o.HLC
	}
	for _, want := range []uint64{w.Next, w.Prev} {
		for _, t := range ts {
			if t.Down || t.ID == r.ID() {
				continue
			}
			src := d.s.cfg.Replica(t)
			so, err := src.Stat(ctx, w.Bucket, w.Key)
			if err != nil || so.Deleted || so.HLC != want {
				continue
			}
			if _, err := replica.Copy(ctx, src, r, w.Bucket, w.Key, want, false); err != nil {
				return nil, err
			}
			d.s.log.Info("caught up a holder that missed writes of a volume's data object", "volume", d.vol.Name, "node", r.ID(), "key", w.Key, "from", orderString(cur), "to", orderString(want))
			if want == w.Next {
				return so, nil
			}
			return r.(replica.RangeWriter).WriteRange(ctx, w)
		}
	}
	return nil, errors.Errorf("", errors.Transient, "holder %s is at order %s, behind %s, and no holder to copy from answered", r.ID(), orderString(cur), orderString(w.Prev))
}

func orderString(o uint64) string {
	return strconv.FormatUint(EpochOf(o), 10) + "." + strconv.FormatUint(o&(1<<40-1), 10)
}

// sync brings data object i's holders to one order before the device first uses it
// under this lease: the highest order any reachable holder has wins (every write a client
// was told was done is on every holder; a write that reached only some is kept, as a disk
// may keep a write it did not acknowledge), and the holders behind get the object whole.
// The caller holds st.mu.
//
// The lease holder's device then stamps the object with its own lease epoch (stamp)
// when it must, so that no copy left by an earlier lease can win later.
func (d *Device) sync(ctx context.Context, i int64, st *objState) error {
	if st.synced {
		return nil
	}
	order, all, err := d.syncKey(ctx, ObjectKey(d.vol.ID, i), !d.ro)
	if err != nil {
		return err
	}
	st.order, st.base, st.baseOrder = order, "", 0
	if order == 0 {
		// The head lacks it: the newest layer of the chain that has it is read.
		for _, l := range d.chain {
			bo, _, err := d.syncKey(ctx, ObjectKey(l, i), false)
			if err != nil {
				return err
			}
			if bo > 0 {
				st.base, st.baseOrder = l, bo
				break
			}
		}
	}
	st.synced, st.unsure = true, false
	// A copy written under an earlier lease may be ahead of what its writer was told
	// was done: a holder paused (or cut off) between taking a write itself and sending
	// it on keeps the write alone, at (old epoch, sequence+1). Unstamped, that copy
	// would win when its holder comes back (a higher order), and a block this device
	// had read would change under the client. Stamped at this lease's epoch, every
	// holder reached is past any order of an earlier lease.
	if !d.ro && (order > 0 && EpochOf(order) < d.vol.Epoch || order == 0 && !all) {
		if err := d.stamp(ctx, i, st); err != nil {
			st.synced = false
			return err
		}
	}
	return nil
}

// stamp moves data object i to this lease's epoch on every holder without changing a
// byte: it writes the object's first byte again (a hole where it reads as zeroes; where
// the head lacks the object and a base has it, the write copies the base on write as
// any first write does). It is synced when answered. The caller holds st.mu.
func (d *Device) stamp(ctx context.Context, i int64, st *objState) (err error) {
	defer func(start time.Time) { d.observe("stamp", 0, start, err) }(time.Now())
	w := object.RangeWrite{Bucket: clustermap.VolumeBucket, Key: ObjectKey(d.vol.ID, i), Size: d.vol.BlockSize}
	switch {
	case st.order > 0 || st.base != "":
		layer, order := d.vol.ID, st.order
		if order == 0 {
			layer, order = st.base, st.baseOrder
		}
		w.Data = make([]byte, 1)
		if err := d.read(ctx, ObjectKey(layer, i), order, 0, w.Data); err != nil {
			return err
		}
	default:
		w.Len = 1
	}
	return d.apply(ctx, i, st, w, true)
}

// syncKey brings the holders of data object key to one order and returns it (0: no
// holder has it), and whether every holder answered; lease, that a later lease epoch
// than the device's means its lease moved.
func (d *Device) syncKey(ctx context.Context, key string, lease bool) (uint64, bool, error) {
	ts, err := d.targets(key)
	if err != nil {
		return 0, false, err
	}
	type stat struct {
		t     topology.Target
		order uint64
		err   error
	}
	stats := make([]stat, len(ts))
	var wg sync.WaitGroup
	for j, t := range ts {
		if t.Down {
			stats[j] = stat{t: t, err: errors.E(errors.Transient, "marked down")}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := d.s.cfg.Replica(t).Stat(ctx, clustermap.VolumeBucket, key)
			switch {
			case errors.Is(errors.NotExist, err):
				stats[j] = stat{t: t}
			case err != nil:
				stats[j] = stat{t: t, err: err}
			case o.Deleted:
				stats[j] = stat{t: t}
			default:
				stats[j] = stat{t: t, order: o.HLC}
			}
		}()
	}
	wg.Wait()
	var best uint64
	var src topology.Target
	reached := 0
	for _, s := range stats {
		if s.err != nil {
			continue
		}
		reached++
		if s.order > best {
			best, src = s.order, s.t
		}
	}
	if reached == 0 {
		return 0, false, errors.Errorf("", errors.IO, "volume %s, data object %s: no holder can be reached", d.vol.Name, key)
	}
	if lease && EpochOf(best) > d.vol.Epoch {
		return 0, false, errors.E(errors.Permission, fmt.Errorf("%w: data object %s was written under lease epoch %d", ErrLeaseLost, key, EpochOf(best)))
	}
	for _, s := range stats {
		if s.err != nil || s.order == best {
			continue
		}
		if _, err := replica.Copy(ctx, d.s.cfg.Replica(src), d.s.cfg.Replica(s.t), clustermap.VolumeBucket, key, best, false); err != nil {
			return 0, false, errors.E(errors.IO, fmt.Errorf("volume %s, data object %s: catching up node %s: %w", d.vol.Name, key, s.t.ID, err))
		}
	}
	return best, reached == len(ts), nil
}

// Fence returns the check a holder makes before each range write (replica.Local.Fence):
// a write to a volume's data object must carry the lease epoch the holder's map gives
// the volume, and the holder's map must be fresh (fresh, if set). A writer whose lease
// moved is refused (Permission); a writer ahead of this holder's map waits for it
// (Transient: it tries again).
func Fence(maps topology.MapSource, fresh func() error) func(object.RangeWrite) error {
	return func(w object.RangeWrite) error {
		if w.Bucket != clustermap.VolumeBucket && w.Bucket != ECBucket {
			return nil
		}
		if fresh != nil {
			if err := fresh(); err != nil {
				return errors.E(errors.Transient, fmt.Errorf("a volume write cannot be checked against a stale cluster map: %w", err))
			}
		}
		id, _, ok := strings.Cut(w.Key, "/")
		if !ok {
			return errors.Errorf("", errors.Invalid, "%q is not a volume's data object", w.Key)
		}
		m := maps.Current()
		v, ok := m.VolumeByID(id)
		epoch := EpochOf(w.Next)
		_, frozen := m.Layers[id]
		_, gone := m.Garbage[id]
		switch {
		case frozen || gone:
			return errors.E(errors.Permission, fmt.Errorf("%w: layer %s is a snapshot's, frozen (or garbage)", ErrLeaseLost, id))
		case !ok:
			// A head this node's map does not know yet (a snapshot just gave the volume
			// a new one), or a volume deleted: nothing is written, the writer retries.
			return errors.Errorf("", errors.Transient, "no volume has id %s in this node's map (epoch %d)", id, m.Epoch)
		case epoch < v.Epoch:
			return errors.E(errors.Permission, fmt.Errorf("%w: a write under lease epoch %d of volume %s, whose lease is at epoch %d", ErrLeaseLost, epoch, v.Name, v.Epoch))
		case epoch > v.Epoch:
			return errors.Errorf("", errors.Transient, "a write under lease epoch %d of volume %s: this node's map is at epoch %d", epoch, v.Name, v.Epoch)
		}
		return nil
	}
}
