// Package stripe is the erasure-coded data path: objects of a sharded class are cut into
// stripes of K shard units, each stripe encoded into K data and M parity shards (package
// erasure: every shard carries its own checksum), and the shards go to the K+M distinct
// nodes of the stripe's partition in the class's placement table (package topology), as
// records of the internal bucket topology.ShardBucket. The object's record lives on the
// key's holders like any other, marked striped and without a body: the coordinator
// (package gateway) writes it once Put has stored the stripes. Stripes of one object land
// in different partitions, so a large object spreads over the whole cluster. A node
// holds at most one shard of a stripe, under the stripe's name (a tag the PUT chose, not
// its version, which is taken once the body is complete: PutPrefix): the shard's header says
// which one it is, so a shard stays readable where it is when placement changes shift
// positions.
//
// The shard size of a full stripe is the class's chunk size (clustermap.DefaultChunk,
// 1 MiB, unless the class sets one): a stripe holds K chunks of the object (4 MiB for
// 4+2). A MiB keeps each shard one sequential write and read on its node, and a ranged
// read fetches at most a stripe more than it needs. Replicated classes other than
// STANDARD are stored the same way with a code of 1+(N-1): every shard is a whole
// checksummed copy of its chunk, on N distinct nodes of the class.
//
// Path writes stripes (put.go), reads them back with reconstruction and read repair
// (read.go), and heals a stripe's missing or damaged shards (heal.go), all through the
// replica seam; the repair loops (package repair) decide when. See
// docs/design/20261123_classes_and_ec.md.
package stripe

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/erasure"
	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// Config configures a Path.
type Config struct {
	// Self is this node's id.
	Self string
	// Maps gives the cluster map; Topology places the shards. Both required.
	Maps     topology.MapSource
	Topology *topology.Topology
	// Replica reaches a node (this node's store included) through the replica seam.
	Replica func(topology.Target) replica.Replica
	// Clock versions the shard records.
	Clock *hlc.Clock
	// Timeout bounds one shard's read or write (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Path is the erasure-coded data path of one gateway.
type Path struct {
	self    string
	maps    topology.MapSource
	topo    *topology.Topology
	replica func(topology.Target) replica.Replica
	clock   *hlc.Clock
	timeout time.Duration
	log     *slog.Logger
	codes   ecState
	// bg tracks shard repairs started by reads, for Close.
	bg sync.WaitGroup
}

// New returns a Path.
func New(cfg Config) *Path {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = new(hlc.Clock)
	}
	return &Path{self: cfg.Self, maps: cfg.Maps, topo: cfg.Topology, replica: cfg.Replica, clock: cfg.Clock,
		timeout: cfg.Timeout, log: cfg.Logger, codes: ecState{codes: map[[2]int]*erasure.Code{}}}
}

// othersThan returns the storage nodes of m that are not down and not among ts: where to
// look for shards when placement changed since a stripe was written.
func (p *Path) othersThan(m *clustermap.Map, ts []topology.Target) []topology.Target {
	in := make(map[string]bool, len(ts))
	for _, t := range ts {
		in[t.ID] = true
	}
	var out []topology.Target
	for _, n := range m.StorageNodes() {
		if !in[n.ID] && n.State != clustermap.StateDown {
			out = append(out, topology.Target{ID: n.ID, Addr: n.Addr, Local: p.topo.IsLocal(n.ID)})
		}
	}
	return out
}

// Close waits for the shard repairs that reads started.
func (p *Path) Close() { p.bg.Wait() }

// Key names stripe i of version v of bucket/key: fixed length whatever the key. PUTs
// named their stripes so before feature level 9 (see PutPrefix); objects written so stay
// readable under these names.
func Key(bucket, key string, v uint64, i int64) string {
	h := sha256.New()
	io.WriteString(h, bucket)
	h.Write([]byte{0})
	io.WriteString(h, key)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:12]) + "/" + strconv.FormatUint(v, 16) + "/" + strconv.FormatInt(i, 10)
}

// PartKey names stripe i of part n of a multipart upload of bucket/key.
func PartKey(bucket, key, upload string, n int, i int64) string {
	return Key(bucket, key, 0, 0)[:24] + "/" + upload + "." + strconv.Itoa(n) + "/" + strconv.FormatInt(i, 10)
}

// stripeRef is one stripe of an object: its name and the bytes of the object it holds.
type stripeRef struct {
	name   string
	off, n int64
}

// RelayoutPrefix starts the tag a rewrite (policy apply) names its stripes with, in
// place of an upload id; RelayoutGrace is how long they are safe from collection before a
// record names them: a rewrite whose stripes took more than half of it to write gives up
// before writing the record.
const (
	RelayoutPrefix = "relayout-"
	RelayoutGrace  = time.Hour
)

// PutPrefix starts the tag an erasure-coded PUT names its stripes with (from feature
// level 9; before, a PUT named them by its version, Key): "put-" + its provisional
// version + a random nonce, in hex. The PUT's record, written once the body is complete
// and its version taken, lists the tag as its layout (Stripe.Upload, one part), so the
// stripes are PartKey(bucket, key, tag, 1, i). PutGrace is how long such stripes are safe
// from collection, from the provisional version, while no record names them: a PUT whose
// body took more than half of it gives up before writing the record.
const (
	PutPrefix = "put-"
	PutGrace  = 6 * time.Hour
)

// PutTag returns a new tag for the stripes of a PUT whose provisional version is v.
func PutTag(v uint64) string {
	var nonce [8]byte
	rand.Read(nonce[:])
	return PutPrefix + strconv.FormatUint(v, 16) + "-" + hex.EncodeToString(nonce[:])
}

// PutTagVersion returns the provisional version a PUT's tag names; ok is false if tag is
// not one (an upload id, a rewrite's tag).
func PutTagVersion(tag string) (v uint64, ok bool) {
	rest, ok := strings.CutPrefix(tag, PutPrefix)
	if !ok {
		return 0, false
	}
	hv, nonce, ok := strings.Cut(rest, "-")
	if !ok || len(nonce) != 16 {
		return 0, false
	}
	if b, err := hex.DecodeString(nonce); err != nil || hex.EncodeToString(b) != nonce {
		return 0, false
	}
	v, err := strconv.ParseUint(hv, 16, 64)
	if err != nil || strconv.FormatUint(v, 16) != hv { // only the form PutTag writes
		return 0, false
	}
	return v, true
}

// Names lists the names of the stripes of the erasure-coded object o (its record), in
// order.
func Names(bucket, key string, o *object.Object) []string {
	refs := refsOf(bucket, key, o)
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = r.name
	}
	return out
}

// refsOf lists the stripes of the erasure-coded object o (its record), in order.
func refsOf(bucket, key string, o *object.Object) []stripeRef {
	ss := o.Stripe.Size
	var out []stripeRef
	add := func(size int64, name func(i int64) string) {
		var base int64
		if len(out) > 0 {
			last := out[len(out)-1]
			base = last.off + last.n
		}
		for i := int64(0); i == 0 || i*ss < size; i++ {
			out = append(out, stripeRef{name: name(i), off: base + i*ss, n: min(ss, size-i*ss)})
		}
	}
	if o.Stripe.Upload == "" {
		add(o.Size, func(i int64) string { return Key(bucket, key, o.HLC, i) })
		return out
	}
	sizes := o.PartSizes
	if len(sizes) == 0 {
		sizes = []int64{o.Size} // an object rewritten into another layout (relayout-V)
	}
	for p, num := range o.Stripe.Parts {
		if p < len(sizes) {
			add(sizes[p], func(i int64) string { return PartKey(bucket, key, o.Stripe.Upload, num, i) })
		}
	}
	return out
}

// CodeClass returns the class whose placement table holds the shards of a stripe coded
// k+p: the class named (an object's StorageClass) if it uses that code, else the first
// class by name that does, else an unnamed class of that code on any device. The table
// depends only on the code and the device class.
func CodeClass(m *clustermap.Map, k, p int, name string) clustermap.Class {
	same := func(c clustermap.Class) bool {
		ck, cp := c.Shards()
		return c.Sharded() && ck == k && cp == p
	}
	if c, ok := m.ResolveClass(name); ok && name != "" && same(c) {
		return c
	}
	for _, c := range ShardedClasses(m) {
		if same(c) {
			return c
		}
	}
	return clustermap.Class{Name: fmt.Sprintf("ec%d+%d", k, p), K: k, M: p, N: k + p}
}

// ShardedClasses returns the classes of m stored as shards (every class but STANDARD),
// by name, with their names set.
func ShardedClasses(m *clustermap.Map) []clustermap.Class {
	names := make([]string, 0, len(m.Classes))
	for n := range m.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []clustermap.Class
	for _, n := range names {
		c := m.Classes[n]
		c.Name = n
		if c.Sharded() {
			out = append(out, c)
		}
	}
	return out
}

// LayoutOf is the record's description of how cls cuts objects into stripes.
func LayoutOf(cls clustermap.Class) object.Stripe {
	k, m := cls.Shards()
	return object.Stripe{K: k, M: m, Size: int64(k) * cls.ChunkSize()}
}

// ecState caches codes and placement tables per class.
type ecState struct {
	mu    sync.Mutex
	codes map[[2]int]*erasure.Code
}

func (p *Path) Code(k, m int) (*erasure.Code, error) {
	p.codes.mu.Lock()
	defer p.codes.mu.Unlock()
	if c := p.codes.codes[[2]int{k, m}]; c != nil {
		return c, nil
	}
	c, err := erasure.New(k, m)
	if err != nil {
		return nil, err
	}
	if p.codes.codes == nil {
		p.codes.codes = map[[2]int]*erasure.Code{}
	}
	p.codes.codes[[2]int{k, m}] = c
	return c, nil
}

// PartUpload parses the name of a stripe of a multipart part, hash/UPLOAD.N/i, and
// returns the upload; ok is false for any other name (a whole object's stripes written
// before feature level 9 are hash/VERSION/i, the version in hex). The stripes of a PUT
// (hash/put-TAG.1/i) and of a rewrite (hash/relayout-V.N/i) parse as parts of an upload
// named by their tag.
func PartUpload(name string) (upload string, ok bool) {
	_, rest, ok := strings.Cut(name, "/")
	if !ok {
		return "", false
	}
	mid, i, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	upload, n, ok := strings.Cut(mid, ".")
	if !ok || upload == "" || !digits(n) || !digits(i) {
		return "", false
	}
	return upload, true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
