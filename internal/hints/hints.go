// Package hints is the durable retry queue of replica writes that failed (LeoFS's repair
// queue, Dynamo's hinted handoff): one entry per (node, bucket, key) with the newest
// version the node must reach, or an upload's end record the node missed. It lives in its
// own small pebble database so that an entry is synced before the write it belongs to is
// acknowledged. The coordinator (package gateway) queues entries; the repair loops
// (package repair) deliver them.
package hints

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Queue is the durable retry queue of replica writes that failed (LeoFS's repair queue,
// Dynamo's hinted handoff): one entry per (node, bucket, key) with the newest version the
// node must reach. It lives in its own small pebble database so an entry is synced before
// the write it belongs to is acknowledged.
type Queue struct {
	db      *pebble.DB
	free    func() int64 // free bytes on the queue's disk
	pending atomic.Int64
	mu      sync.Mutex // serialises the read-modify-writes of Add and done
}

// reserve is the free space the queue leaves on its disk: below it, Add refuses
// (the write it belongs to still counts its other replicas; anti-entropy repairs the one
// that missed it) rather than let the queue's database run into a full disk, which
// pebble treats as fatal.
const reserve = 64 << 20

// Open opens (or creates) the queue in dir.
func Open(dir string) (*Queue, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		return nil, errors.E(errors.Op("hints.Open"), errors.IO, err)
	}
	h := &Queue{db: db, free: func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			return reserve // unknown: let pebble try
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
func (h *Queue) Close() error { return h.db.Close() }

// Len is the number of queued entries.
func (h *Queue) Len() int64 { return h.pending.Load() }

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
func (h *Queue) Add(node, bucket, key string, version uint64) error {
	if h.free() < reserve {
		return errors.Errorf(errors.Op("hints.Queue.Add"), errors.NoSpace,
			"the disk of the hint queue has less than %d MiB free: not queued", reserve>>20)
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
func (h *Queue) AddUploadEnd(node string, e *object.UploadEnd) error {
	if h.free() < reserve {
		return errors.Errorf(errors.Op("hints.Queue.AddUploadEnd"), errors.NoSpace,
			"the disk of the hint queue has less than %d MiB free: not queued", reserve>>20)
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

// Entry is one queued replica write: an object version, or an upload's end record
// (end set, bucket and key empty).
type Entry struct {
	Node, Bucket, Key string
	Version           uint64    // the version the node must reach
	Added             time.Time // when it was first queued
	End               *object.UploadEnd
	raw               []byte // the stored value, for Done
}

// entries returns up to n queued entries, skipping every entry of a node for which skip
// is true (one seek per skipped node, so a long queue for a node that is down does not
// hide the others).
func (h *Queue) Entries(n int, skip func(node string) bool) ([]Entry, error) {
	it, err := h.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []Entry
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
		out = append(out, Entry{Node: nd, Bucket: b, Key: k, Version: binary.BigEndian.Uint64(v),
			Added: time.Unix(0, int64(binary.BigEndian.Uint64(v[8:16]))), raw: append([]byte{}, v...), End: end})
	}
	return out, it.Error()
}

// done removes e unless a newer version was queued meanwhile.
func (h *Queue) Done(e Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := hintKey(e.Node, e.Bucket, e.Key)
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

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Errorf(string, ...any) {}

// Fatalf ends the process: pebble calls it when its database can no longer be used (a
// failed log write, for one), and it may hold internal locks when it does, so the queue
// cannot go on. Queued entries are durable; a restart carries on with them.
func (quietLogger) Fatalf(format string, args ...any) {
	slog.Error("the hint queue's database failed: stopping the node (restart it)", "cause", fmt.Sprintf(format, args...))
	os.Exit(1)
}
