// Package volume serves block volumes (Sheepdog's design, docs/design/volumes.md): a
// volume, described in the cluster map, is a sequence of data objects of BlockSize bytes
// (keys "<id>/<index>" of clustermap.VolumeBucket), mutable objects written in place on
// every replica of a replicated class. Only the node holding the volume's write lease
// serves it (Service, the Catalog of this node's NBD server); its writes carry a write
// order, (lease epoch << 40) | sequence, that each holder checks against the order it is
// at, so a replica that missed writes is found and caught up (a whole-object copy) before
// it takes the next one, and a writer whose lease moved is refused.
package volume

import (
	"context"
	"fmt"
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
	// Fresh, if set, says whether this node may act on what its map says now: an error
	// while it has not heard from the Raft leader lately (a node that was paused or cut
	// off may hold a lease that moved).
	Fresh func() error
	// WriteTimeout bounds a write's wait for holders that do not answer (default 30 s):
	// a holder that cannot be reached is retried until the cluster marks it down, then
	// left to repair.
	WriteTimeout time.Duration
	// Observe, if set, is told of every I/O a device serves (op: read, write, trim, zero,
	// flush), for per-volume metrics.
	Observe func(volume, op string, bytes int64, d time.Duration, err error)
	Logger  *slog.Logger
}

// Service serves the volumes this node holds the write lease of.
type Service struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	open map[string]*Device // by volume name
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "volume"), open: map[string]*Device{}}
}

var _ nbd.Catalog = (*Service)(nil)

// info describes a volume as an NBD export.
func info(v clustermap.Volume) nbd.ExportInfo {
	return nbd.ExportInfo{Name: v.Name, Description: "cairn volume " + v.Name, Size: v.Size, MultiConn: true,
		MinBlock: 1, PreferredBlock: 4096, MaxBlock: uint32(min(v.BlockSize, nbd.MaxPayload))}
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

// List implements nbd.Catalog: the volumes attached to this node.
func (s *Service) List(context.Context) ([]nbd.ExportInfo, error) {
	var out []nbd.ExportInfo
	for _, v := range s.cfg.Maps.Current().Volumes {
		if v.Holder == s.cfg.Self {
			out = append(out, info(v))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Info implements nbd.Catalog.
func (s *Service) Info(_ context.Context, name string) (nbd.ExportInfo, error) {
	v, err := s.held(name)
	if err != nil {
		return nbd.ExportInfo{}, err
	}
	return info(v), nil
}

// Open implements nbd.Catalog: every connection to a volume shares one Device.
func (s *Service) Open(_ context.Context, name string) (nbd.Device, nbd.ExportInfo, error) {
	v, err := s.held(name)
	if err != nil {
		return nil, nbd.ExportInfo{}, err
	}
	if s.cfg.Fresh != nil {
		if err := s.cfg.Fresh(); err != nil {
			return nil, nbd.ExportInfo{}, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.open[name]
	if d == nil || d.vol.Epoch != v.Epoch || d.vol.ID != v.ID {
		d = &Device{s: s, vol: v, objs: map[int64]*objState{}}
		s.open[name] = d
	}
	d.vol.Size = v.Size // grown since it was opened: new connections see the new size
	d.refs++
	return &conn{d}, info(d.vol), nil
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

// Device is an attached volume: the nbd.Device its connections share.
type Device struct {
	s    *Service
	vol  clustermap.Volume // as attached: the epoch is the lease this device writes under
	refs int

	mu   sync.Mutex
	objs map[int64]*objState
}

// objState is what the device knows of one data object.
type objState struct {
	mu     sync.Mutex // one write (or catch-up) of the object at a time
	synced bool       // every holder reached was brought to order
	order  uint64     // the object's order on its holders (0: never written)
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

// check refuses I/O unless this node still holds the lease the device was opened under,
// by a map it may trust (Config.Fresh).
func (d *Device) check() error {
	if d.s.cfg.Fresh != nil {
		if err := d.s.cfg.Fresh(); err != nil {
			return errors.E(errors.Permission, fmt.Errorf("%w: %v", ErrLeaseLost, err))
		}
	}
	v, ok := d.s.cfg.Maps.Current().Volumes[d.vol.Name]
	if !ok || v.ID != d.vol.ID || v.Holder != d.s.cfg.Self || v.Epoch != d.vol.Epoch {
		return errors.E(errors.Permission, fmt.Errorf("%w (volume %s)", ErrLeaseLost, d.vol.Name))
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
	if err := d.check(); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.WriteTimeout)
	defer cancel()
	err = d.pieces(off, int64(len(p)), func(i, objOff, pos, k int64) error {
		st := d.obj(i)
		for try := 0; ; try++ {
			st.mu.Lock()
			err := d.sync(ctx, i, st)
			order := st.order
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
			if err = d.read(ctx, i, order, objOff, p[pos:pos+k]); err != errNewer || try == 100 {
				return err
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// read reads len(p) bytes of data object i at order from off, from the first holder that
// has it (this node's own copy first).
func (d *Device) read(ctx context.Context, i int64, order uint64, off int64, p []byte) error {
	key := ObjectKey(d.vol.ID, i)
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
	return errors.E(errors.IO, fmt.Errorf("volume %s, data object %d: %w", d.vol.Name, i, last))
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

// Flush implements nbd.Device: every write was durable on every holder when it returned.
func (d *Device) Flush() (err error) {
	defer func(start time.Time) { d.observe("flush", 0, start, err) }(time.Now())
	return d.check()
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
	if err := d.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.s.cfg.WriteTimeout)
	defer cancel()
	return d.pieces(off, n, func(i, objOff, pos, k int64) error {
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
func (d *Device) write(ctx context.Context, i int64, w object.RangeWrite) error {
	st := d.obj(i)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := d.sync(ctx, i, st); err != nil {
		return err
	}
	if w.Data == nil && st.order == 0 {
		return nil // zeroes into an object never written: it reads as zeroes already
	}
	if err := d.check(); err != nil {
		return err
	}
	w.Prev, w.Next = st.order, Next(st.order, d.vol.Epoch)
	for {
		ts, err := d.targets(w.Key)
		if err != nil {
			return err
		}
		done, retry, err := d.fanOut(ctx, ts, w)
		if err != nil {
			return err
		}
		if !retry {
			if done == 0 {
				return errors.Errorf("", errors.IO, "volume %s, data object %d: no holder took the write", d.vol.Name, i)
			}
			st.order = w.Next
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
			o, err := rw.WriteRange(ctx, w)
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
			d.s.log.Warn("a holder of a volume's data object did not take a write; retrying until it is marked down", "volume", d.vol.Name, "node", res.t.ID, "err", res.err)
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
	// it yet, that has w.Prev, then apply w).
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
func (d *Device) sync(ctx context.Context, i int64, st *objState) error {
	if st.synced {
		return nil
	}
	key := ObjectKey(d.vol.ID, i)
	ts, err := d.targets(key)
	if err != nil {
		return err
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
		return errors.Errorf("", errors.IO, "volume %s, data object %d: no holder can be reached", d.vol.Name, i)
	}
	if EpochOf(best) > d.vol.Epoch {
		return errors.E(errors.Permission, fmt.Errorf("%w: data object %d was written under lease epoch %d", ErrLeaseLost, i, EpochOf(best)))
	}
	for _, s := range stats {
		if s.err != nil || s.order == best {
			continue
		}
		if _, err := replica.Copy(ctx, d.s.cfg.Replica(src), d.s.cfg.Replica(s.t), clustermap.VolumeBucket, key, best, false); err != nil {
			return errors.E(errors.IO, fmt.Errorf("volume %s, data object %d: catching up node %s: %w", d.vol.Name, i, s.t.ID, err))
		}
	}
	st.order, st.synced = best, true
	return nil
}

// Fence returns the check a holder makes before each range write (replica.Local.Fence):
// a write to a volume's data object must carry the lease epoch the holder's map gives
// the volume, and the holder's map must be fresh (fresh, if set). A writer whose lease
// moved is refused (Permission); a writer ahead of this holder's map waits for it
// (Transient: it tries again).
func Fence(maps topology.MapSource, fresh func() error) func(object.RangeWrite) error {
	return func(w object.RangeWrite) error {
		if w.Bucket != clustermap.VolumeBucket {
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
		v, ok := maps.Current().VolumeByID(id)
		epoch := EpochOf(w.Next)
		switch {
		case !ok:
			return errors.E(errors.Permission, fmt.Errorf("%w: no volume has id %s", ErrLeaseLost, id))
		case epoch < v.Epoch:
			return errors.E(errors.Permission, fmt.Errorf("%w: a write under lease epoch %d of volume %s, whose lease is at epoch %d", ErrLeaseLost, epoch, v.Name, v.Epoch))
		case epoch > v.Epoch:
			return errors.Errorf("", errors.Transient, "a write under lease epoch %d of volume %s: this node's map is at epoch %d", epoch, v.Name, v.Epoch)
		}
		return nil
	}
}
