package gateway

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Hints is the durable retry queue of replica writes that failed (LeoFS's repair queue,
// Dynamo's hinted handoff): one entry per (node, bucket, key) with the newest version the
// node must reach. It lives in its own small pebble database so an entry is synced before
// the write it belongs to is acknowledged.
type Hints struct {
	db      *pebble.DB
	free    func() int64 // free bytes on the queue's disk
	pending atomic.Int64
	mu      sync.Mutex // serialises the read-modify-writes of Add and done
}

// hintsReserve is the free space the queue leaves on its disk: below it, Add refuses
// (the write it belongs to still counts its other replicas; anti-entropy repairs the one
// that missed it) rather than let the queue's database run into a full disk, which
// pebble treats as fatal.
const hintsReserve = 64 << 20

// OpenHints opens (or creates) the queue in dir.
func OpenHints(dir string) (*Hints, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, errors.E(errors.Op("gateway.OpenHints"), errors.IO, err)
	}
	h := &Hints{db: db, free: func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return hintsReserve // unknown: let pebble try
		}
		return int64(st.Bavail) * int64(st.Bsize)
	}}
	it, err := db.NewIter(nil)
	if err == nil {
		n := int64(0)
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		it.Close()
		h.pending.Store(n)
	}
	return h, nil
}

// Close closes the queue.
func (h *Hints) Close() error { return h.db.Close() }

// Len is the number of queued entries.
func (h *Hints) Len() int64 { return h.pending.Load() }

func hintKey(node, bucket, key string) []byte {
	b := make([]byte, 0, len(node)+len(bucket)+len(key)+2)
	b = append(b, node...)
	b = append(b, 0)
	b = append(b, bucket...)
	b = append(b, 0)
	return append(b, key...)
}

func splitHint(k []byte) (node, bucket, key string, ok bool) {
	i := bytes.IndexByte(k, 0)
	if i < 0 {
		return "", "", "", false
	}
	j := bytes.IndexByte(k[i+1:], 0)
	if j < 0 {
		return "", "", "", false
	}
	return string(k[:i]), string(k[i+1 : i+1+j]), string(k[i+2+j:]), true
}

// Add queues (node, bucket, key) to reach at least version, durably.
func (h *Hints) Add(node, bucket, key string, version uint64) error {
	if h.free() < hintsReserve {
		return errors.Errorf(errors.Op("gateway.Hints.Add"), errors.NoSpace,
			"the disk of the hint queue has less than %d MiB free: not queued", hintsReserve>>20)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := hintKey(node, bucket, key)
	if v, c, err := h.db.Get(k); err == nil {
		old := binary.BigEndian.Uint64(v)
		c.Close()
		if old >= version {
			return nil
		}
	} else {
		h.pending.Add(1) // undone below if the write fails
	}
	var v [16]byte
	binary.BigEndian.PutUint64(v[:], version)
	binary.BigEndian.PutUint64(v[8:], uint64(time.Now().UnixNano()))
	if err := h.db.Set(k, v[:], pebble.Sync); err != nil {
		h.pending.Add(-1)
		return errors.E(errors.IO, err)
	}
	return nil
}

// AddUploadEnd queues node to receive an upload's end record (it missed the upload's
// completion or abort, and may hold the upload and its parts), durably. Its key has an
// empty bucket, which no object hint has; its value is an object hint's followed by the
// record.
func (h *Hints) AddUploadEnd(node string, e *object.UploadEnd) error {
	if h.free() < hintsReserve {
		return errors.Errorf(errors.Op("gateway.Hints.AddUploadEnd"), errors.NoSpace,
			"the disk of the hint queue has less than %d MiB free: not queued", hintsReserve>>20)
	}
	rec, err := json.Marshal(e)
	if err != nil {
		return errors.E(errors.Invalid, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := hintKey(node, "", e.Bucket+"\x00"+e.Key+"\x00"+e.UploadID)
	if _, c, err := h.db.Get(k); err == nil {
		c.Close()
		return nil // queued already
	}
	v := make([]byte, 16, 16+len(rec))
	binary.BigEndian.PutUint64(v[8:], uint64(time.Now().UnixNano()))
	v = append(v, rec...)
	h.pending.Add(1)
	if err := h.db.Set(k, v, pebble.Sync); err != nil {
		h.pending.Add(-1)
		return errors.E(errors.IO, err)
	}
	return nil
}

// hintEntry is one queued replica write: an object version, or an upload's end record
// (end set, bucket and key empty).
type hintEntry struct {
	node, bucket, key string
	version           uint64
	added             time.Time
	raw               []byte
	end               *object.UploadEnd
}

// entries returns up to n queued entries, skipping every entry of a node for which skip
// is true (one seek per skipped node, so a long queue for a node that is down does not
// hide the others).
func (h *Hints) entries(n int, skip func(node string) bool) ([]hintEntry, error) {
	it, err := h.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []hintEntry
	for valid := it.First(); valid && len(out) < n; valid = it.Next() {
		nd, b, k, ok := splitHint(it.Key())
		v := it.Value()
		if !ok || len(v) < 16 || (b != "" && len(v) != 16) {
			continue
		}
		var end *object.UploadEnd
		if b == "" {
			end = new(object.UploadEnd)
			if json.Unmarshal(v[16:], end) != nil {
				continue
			}
		}
		if skip(nd) {
			if !it.SeekGE(append([]byte(nd), 1)) { // past "node\x00..."
				break
			}
			it.Prev() // the loop's Next lands on the first entry of the next node
			continue
		}
		out = append(out, hintEntry{node: nd, bucket: b, key: k, version: binary.BigEndian.Uint64(v),
			added: time.Unix(0, int64(binary.BigEndian.Uint64(v[8:16]))), raw: append([]byte{}, v...), end: end})
	}
	return out, it.Error()
}

// done removes e unless a newer version was queued meanwhile.
func (h *Hints) done(e hintEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := hintKey(e.node, e.bucket, e.key)
	v, c, err := h.db.Get(k)
	if err != nil {
		return
	}
	same := bytes.Equal(v, e.raw)
	c.Close()
	if same && h.db.Delete(k, pebble.NoSync) == nil {
		h.pending.Add(-1)
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}

// Fatalf ends the process: pebble calls it when its database can no longer be used (a
// failed log write, for one), and it may hold internal locks when it does, so the queue
// cannot go on. Queued entries are durable; a restart carries on with them.
func (quietLogger) Fatalf(format string, args ...any) {
	slog.Error("the hint queue's database failed: stopping the node (restart it)", "cause", fmt.Sprintf(format, args...))
	os.Exit(1)
}

// RunHints delivers queued replica writes to their nodes until ctx ends: every interval it
// takes the queue's entries for nodes that are up, finds the newest record of each object
// among its replicas, and copies it (or its tombstone) to the node; an upload's end record
// is sent as it is (the node drops the upload and its parts).
func (g *Gateway) RunHints(ctx context.Context, interval time.Duration) {
	if g.cfg.Hints == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := g.cfg.Maps.Current()
		es, err := g.cfg.Hints.entries(512, func(id string) bool {
			n, ok := m.Node(id)
			return ok && n.State == "down"
		})
		if err != nil {
			g.log.Error("reading the hint queue", "err", err)
			continue
		}
		for _, e := range es {
			if ctx.Err() != nil {
				return
			}
			n, ok := m.Node(e.node)
			if !ok || n.State == "out" {
				g.cfg.Hints.done(e) // the node left: recovery re-creates its copies elsewhere
				continue
			}
			if n.State == "down" {
				continue
			}
			dst := topology.Target{ID: n.ID, Addr: n.Addr, Local: n.ID == g.cfg.NodeID && g.cfg.Store != nil}
			var err error
			if e.end != nil {
				if err = g.replica(dst).EndUpload(ctx, e.end); errors.Is(errors.NotExist, err) {
					err = nil // the bucket is gone: nothing to deliver
				}
			} else {
				err = g.deliver(ctx, dst, e)
			}
			if err == nil {
				g.cfg.Hints.done(e)
				continue
			}
			g.log.Debug("hint not delivered yet", "node", e.node, "bucket", e.bucket, "key", e.key, "err", err)
		}
	}
}

// errNotYet means the version a hint asks for is not on any replica (yet).
var errNotYet = errors.E(errors.Transient, "version not found on any replica yet")

// deliver brings dst up to the newest version of e's object known among its replicas.
func (g *Gateway) deliver(ctx context.Context, dst topology.Target, e hintEntry) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := g.HeadBucket(ctx, e.bucket); err != nil {
		return nil // the bucket is gone: nothing to deliver
	}
	_, ts, err := g.topo.Replicas(e.bucket, e.key)
	if err != nil {
		return err
	}
	var srcs []topology.Target
	for _, t := range ts {
		if t.ID != dst.ID && !t.Down {
			srcs = append(srcs, t)
		}
	}
	if g.cfg.Store != nil && dst.ID != g.cfg.NodeID {
		srcs = append(srcs, topology.Target{ID: g.cfg.NodeID, Local: true})
	}
	os, _ := gather(srcs, func(t topology.Target) (*object.Object, error) { return g.replica(t).Stat(ctx, e.bucket, e.key) })
	var best *object.Object
	var src topology.Target
	for i, o := range os {
		if o != nil && (best == nil || o.HLC > best.HLC) {
			best, src = o, srcs[i]
		}
	}
	if best == nil || best.HLC < e.version {
		if time.Since(e.added) > time.Minute {
			return nil // the write never landed anywhere (it failed as a whole): drop the hint
		}
		return errNotYet
	}
	if cur, err := g.replica(dst).Stat(ctx, e.bucket, e.key); err == nil && cur.HLC >= best.HLC {
		return nil
	} else if err != nil && !errors.Is(errors.NotExist, err) {
		return err
	}
	if best.Deleted {
		_, err := g.replica(dst).Delete(ctx, e.bucket, e.key, best.HLC, best.ModTime)
		return err
	}
	_, err = g.copyVersion(ctx, src, dst, e.bucket, e.key, best.HLC, false)
	return err
}

// copyVersion copies version of bucket/key from src to dst, streaming, and returns the
// body bytes copied. With repair (dst local only) it replaces a record of the same
// version: a damaged copy.
func (g *Gateway) copyVersion(ctx context.Context, src, dst topology.Target, bucket, key string, version uint64, repair bool) (int64, error) {
	rd, err := g.replica(src).Open(ctx, bucket, key, replica.OpenOptions{Version: version})
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	o := rd.Info()
	size := o.BodySize() // a striped object's record has no body: copying it copies the record
	pr, pw := io.Pipe()
	go func() {
		_, err := rd.WriteRange(ctx, pw, 0, size)
		pw.CloseWithError(err)
	}()
	defer pr.CloseWithError(replica.ErrReaderGone)
	meta := *o
	meta.Body, meta.Chunks, meta.Inline, meta.Embedded = nil, nil, false, false
	_, err = g.replica(dst).Put(ctx, replica.Write{Bucket: bucket, Key: key, Meta: &meta, Body: pr, Size: size, Version: o.HLC, FinalNow: &meta,
		Repair: repair && dst.Local})
	if err != nil {
		return 0, err
	}
	return size, nil
}

// ReplicaState is one replica's record of an object, for operators and tests.
type ReplicaState struct {
	Node    string `json:"node"`
	HLC     uint64 `json:"hlc"`
	ETag    string `json:"etag,omitempty"`
	Size    int64  `json:"size"`
	Deleted bool   `json:"deleted,omitempty"`
	Missing bool   `json:"missing,omitempty"`
	Error   string `json:"error,omitempty"`
	// Class is the storage class the object was written with ("" for STANDARD), Layout
	// how it is stored: "copy" (this record holds the bytes) or "EC K+M" (the record of
	// an erasure-coded object whose shards are on other nodes).
	Class  string `json:"class,omitempty"`
	Layout string `json:"layout,omitempty"`
}

// Replicas reads bucket/key's record directly from each of its replicas.
func (g *Gateway) Replicas(ctx context.Context, bucket, key string) ([]ReplicaState, error) {
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, err
	}
	os, errs := gather(ts, func(t topology.Target) (*object.Object, error) { return g.replica(t).Stat(ctx, bucket, key) })
	out := make([]ReplicaState, len(ts))
	for i, t := range ts {
		out[i].Node = t.ID
		switch {
		case errors.Is(errors.NotExist, errs[i]):
			out[i].Missing = true
		case errs[i] != nil:
			out[i].Error = errs[i].Error()
		default:
			o := os[i]
			out[i].HLC, out[i].ETag, out[i].Size, out[i].Deleted, out[i].Class = o.HLC, o.ETag, o.Size, o.Deleted, o.StorageClass
			out[i].Layout = "copy"
			if o.Striped {
				out[i].Layout = fmt.Sprintf("EC %d+%d", o.Stripe.K, o.Stripe.M)
				if o.Stripe.K == 1 {
					out[i].Layout = fmt.Sprintf("%d copies of %d KiB chunks", o.Stripe.M+1, o.Stripe.Size>>10)
				}
			}
		}
	}
	return out, nil
}
