package bench

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// object is one key of a keyspace and what this run last wrote to it.
type object struct {
	key  string
	size atomic.Int64  // size last written or listed
	ver  atomic.Uint32 // version last written by this run; 0: none
}

// keyspace is a fixed set of keys that workers pick from at random.
type keyspace struct {
	objs []object
	// owned says the run created these keys, so cleanup deletes them all (also those
	// whose writes failed: a timed-out PUT may have landed).
	owned bool
}

// newKeyspace names n keys prefix+"obj00000000", ...; their sizes start unknown (-1).
func newKeyspace(prefix, name string, n int) *keyspace {
	ks := &keyspace{objs: make([]object, n), owned: true}
	for i := range ks.objs {
		ks.objs[i].key = indexKey(prefix+name, int64(i))
		ks.objs[i].size.Store(-1)
	}
	return ks
}

// indexKey is base followed by i in at least eight digits, so keys list in index order.
func indexKey(base string, i int64) string {
	b := make([]byte, 0, len(base)+12)
	b = append(b, base...)
	digits := strconv.AppendInt(nil, i, 10)
	for range 8 - len(digits) {
		b = append(b, '0')
	}
	return string(append(b, digits...))
}

// pick chooses an object uniformly at random.
func (ks *keyspace) pick(r *rand.Rand) *object {
	return &ks.objs[r.IntN(len(ks.objs))]
}

// keys lists every key.
func (ks *keyspace) keys() []string {
	out := make([]string, len(ks.objs))
	for i := range ks.objs {
		out[i] = ks.objs[i].key
	}
	return out
}

// freshObject is an object a worker created under a new key.
type freshObject struct {
	key  string
	size int64
	ver  uint32
	ok   bool // the PUT succeeded
}

// keyspaceOf makes a keyspace of the objects whose PUT succeeded.
func keyspaceOf(fresh []freshObject) *keyspace {
	n := 0
	for _, f := range fresh {
		if f.ok {
			n++
		}
	}
	ks := &keyspace{objs: make([]object, 0, n)}
	for _, f := range fresh {
		if f.ok {
			ks.objs = ks.objs[:len(ks.objs)+1]
			o := &ks.objs[len(ks.objs)-1]
			o.key = f.key
			o.size.Store(f.size)
			o.ver.Store(f.ver)
		}
	}
	return ks
}
