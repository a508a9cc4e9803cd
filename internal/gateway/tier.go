package gateway

// Archived versions (docs/design/tiering.md): Migrate copies a version to an archive
// tier (an external S3 bucket, or a class of this cluster: classTier) and replaces its record on every holder with a stub; reads of a stub
// stream from the tier (background passes) or recall the version (a client's GET: it is
// written back to its holders once, however many GETs wait for it).

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// TierStore is the bucket of an external archive tier, as package tier's Client serves it.
type TierStore interface {
	// Put stores size bytes of body under key with their MD5 as Content-MD5 and checks
	// that the tier's ETag is that MD5.
	Put(ctx context.Context, key string, body io.Reader, size int64, md5sum []byte) (string, error)
	// GetRange returns n bytes of key from off.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Delete removes key (absent is not an error).
	Delete(ctx context.Context, key string) error
}

// TierStats counts this gateway's tier work since it started.
type TierStats struct {
	Migrated      int64 // versions archived
	MigratedBytes int64
	Recalled      int64 // versions brought back by a GET
	RecallBytes   int64
	TierReads     int64 // ranges read from a tier (streamed reads and recalls)
}

// tierState is the gateway's tier bookkeeping.
type tierState struct {
	migrated, migratedBytes, recalled, recallBytes, reads atomic.Int64
	mu                                                    sync.Mutex
	inflight                                              map[string]*recallCall
	// streams counts, per version, the GETs streaming from its tier copy: a recall
	// deletes the copy only once none is left (streamsIdle).
	streams map[string]*streamCount
}

type streamCount struct {
	n    int
	idle chan struct{} // closed when n drops to 0
}

type recallCall struct {
	done chan struct{}
	err  error
}

// TierStats returns the gateway's tier counters.
func (g *Gateway) TierStats() TierStats {
	t := &g.tiers
	return TierStats{Migrated: t.migrated.Load(), MigratedBytes: t.migratedBytes.Load(), Recalled: t.recalled.Load(),
		RecallBytes: t.recallBytes.Load(), TierReads: t.reads.Load()}
}

func (g *Gateway) tierStore(name string) (TierStore, error) {
	m := g.cfg.Maps.Current()
	if t, ok := m.Tiers[name]; ok && t.Kind == clustermap.TierClass {
		if _, ok := m.Buckets[clustermap.TierBucket]; !ok || m.Level < clustermap.TierBucketLevel {
			return nil, errors.Errorf("", errors.Precondition, "class tier %s was added before the cluster reached feature level %d: remove it and add it again", name, clustermap.TierBucketLevel)
		}
		return &classTier{g: g, name: name, class: t.Class}, nil
	}
	if g.cfg.Tiers == nil {
		return nil, errors.Errorf("", errors.Precondition, "this node reaches no archive tiers")
	}
	return g.cfg.Tiers(name)
}

// Migrate archives version v of bucket/key (its current version) in the tier named
// tierName: it copies the bytes to the tier (which checks them against their MD5), then
// replaces the version's record on every holder with a stub that keeps everything but
// the body, which each holder's store drops. It returns the bytes moved: 0 when there is
// nothing to do (a newer version or a delete came first, the version is archived
// already, empty, a block volume's, or under Object Lock and the tier external, which
// cannot enforce the lock; a class tier's copy is deleted only when its stub is, so it
// keeps the lock's guarantee). A failure before the stub changes nothing on the cluster; a stub
// written to some holders only leaves full copies on the others (every copy reads the
// same bytes) and the next attempt writes it again.
func (g *Gateway) Migrate(ctx context.Context, bucket, key string, v uint64, tierName string) (int64, error) {
	const op errors.Op = "gateway.Migrate"
	return g.migrate(ctx, op, bucket, key, v, tierName, func() (ObjectReader, error) {
		rd, err := g.openObject(ctx, bucket, key, false)
		if err == nil && rd.Info().HLC != v {
			rd.Close()
			return nil, errors.E(errors.NotExist, "not the current version") // a newer version or a delete came first
		}
		return rd, err
	})
}

// MigrateNoncurrent is Migrate for version v of bucket/key when it is a noncurrent
// version (a lifecycle NoncurrentVersionTransition): the version, read by its id from
// its holders, is copied and stubbed in the same way, whatever the key's current version
// is (the caller decided that v is noncurrent). 0 when v is gone (purged), a delete
// marker, archived already, empty, or locked and the tier external.
func (g *Gateway) MigrateNoncurrent(ctx context.Context, bucket, key string, v uint64, tierName string) (int64, error) {
	const op errors.Op = "gateway.MigrateNoncurrent"
	if v == 0 {
		return 0, errors.E(op, errors.Invalid, "a noncurrent version is named by its HLC")
	}
	return g.migrate(ctx, op, bucket, key, v, tierName, func() (ObjectReader, error) {
		return g.OpenVersion(ctx, bucket, key, v) // a stub streams from its tier: Tiered, skipped below
	})
}

// migrate is Migrate and MigrateNoncurrent: open opens version v (NotExist: nothing to
// do).
func (g *Gateway) migrate(ctx context.Context, op errors.Op, bucket, key string, v uint64, tierName string, open func() (ObjectReader, error)) (int64, error) {
	ts0, err := g.tierStore(tierName)
	if err != nil {
		return 0, errors.E(op, err)
	}
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return 0, errors.E(op, err)
	}
	for _, t := range ts {
		if t.Down {
			return 0, errors.Errorf(op, errors.Transient, "holder %s is down: every holder must take the stub", t.ID)
		}
	}
	rd, err := open()
	if errors.Is(errors.NotExist, err) {
		return 0, nil
	}
	if err != nil {
		return 0, errors.E(op, err)
	}
	defer rd.Close()
	cur := rd.Info()
	if cur.HLC != v || cur.Deleted || cur.Tiered() || cur.Mutable || cur.Size == 0 || bucket == clustermap.TierBucket {
		return 0, nil
	}
	if _, class := ts0.(*classTier); !class && cur.Locked(time.Now().UnixNano(), false) {
		return 0, nil
	}
	sum, err := contentMD5(ctx, rd, cur)
	if err != nil {
		return 0, errors.E(op, err)
	}
	// A key of its own per attempt: a recall deletes the copy its stub names, never one
	// another attempt (another node that took itself for the first holder) is about to name.
	tkey := fmt.Sprintf("%s/%s/%016x-%x", bucket, key, v, g.clock.Next())
	pr, pw := io.Pipe()
	copied := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(copied)
		_, err := rd.WriteRange(rctx, pw, 0, cur.Size)
		pw.CloseWithError(err)
	}()
	_, err = ts0.Put(ctx, tkey, pr, cur.Size, sum)
	pr.Close()
	cancel()
	<-copied
	if err != nil {
		return 0, errors.E(op, err)
	}
	rec := *cur
	rec.Body, rec.Chunks, rec.Inline, rec.Embedded = nil, nil, false, false
	rec.Striped, rec.Stripe = true, object.TierStub(tierName, tkey, cur.Size)
	ok, failed := g.fanOut(ctx, ts, len(ts), bucket, key, v, never, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Put(ctx, replica.Write{Bucket: bucket, Key: key, Meta: &rec, Body: nopReader{}, Version: v, FinalNow: &rec, Repair: true})
	})
	if len(ok) < len(ts) {
		return 0, errors.E(op, quorumFailure("stub", ok, failed, len(ts), len(ts)))
	}
	for _, r := range ok {
		if r.o != nil && (r.o.HLC != v || r.o.Purged || r.o.Deleted) {
			return 0, nil // a newer write (or a purge) came first on a holder: it is not archived there
		}
	}
	g.tiers.migrated.Add(1)
	g.tiers.migratedBytes.Add(cur.Size)
	if g.cache != nil {
		g.cache.drop(bucket, key)
	}
	return cur.Size, nil
}

// DeleteTierCopy deletes key from the external tier named tier (the copy of an archived
// version no record names any more). NotExist if the map has no such tier.
func (g *Gateway) DeleteTierCopy(ctx context.Context, tier, key string) error {
	st, err := g.tierStore(tier)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return st.Delete(ctx, key)
}

type nopReader struct{}

func (nopReader) Read([]byte) (int, error) { return 0, io.EOF }

// contentMD5 returns the MD5 of the stored bytes of cur: its ETag when that is one (a
// single-part unencrypted object), else computed by reading them once.
func contentMD5(ctx context.Context, rd ObjectReader, cur *object.Object) ([]byte, error) {
	if len(cur.PartSizes) == 0 && cur.SSE.IsZero() && len(cur.ETag) == 32 {
		if b, err := hex.DecodeString(cur.ETag); err == nil {
			return b, nil
		}
	}
	h := md5.New()
	if _, err := rd.WriteRange(ctx, h, 0, cur.Size); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// classTier is a class tier (clustermap.TierClass) as a TierStore: the copy of an
// archived version is the object "<tier>/<key>" of clustermap.TierBucket, written in the
// tier's storage class through the gateway's own write path (its shards on the class's
// nodes, its record on the key's holders), so it is healed, scrubbed and collected like
// any object.
type classTier struct {
	g     *Gateway
	name  string
	class string
}

func (c *classTier) key(key string) string { return c.name + "/" + key }

// Put stores the copy; the MD5 of the bytes as they are read must be md5sum, else nothing
// is committed (Corrupt).
func (c *classTier) Put(ctx context.Context, key string, body io.Reader, size int64, md5sum []byte) (string, error) {
	h := md5.New()
	meta := &object.Object{StorageClass: c.class, ContentType: "application/octet-stream"}
	finish := func(o *object.Object) error {
		got := h.Sum(nil)
		if string(got) != string(md5sum) {
			return errors.Errorf("gateway.classTier.Put", errors.Corrupt, "the copy's MD5 %x is not the version's %x: not archived", got, md5sum)
		}
		o.ETag = hex.EncodeToString(got)
		return nil
	}
	o, err := c.g.PutObject(ctx, clustermap.TierBucket, c.key(key), meta, io.TeeReader(body, h), size, object.PutOptions{Finish: finish})
	if err != nil {
		return "", err
	}
	return o.ETag, nil
}

// GetRange reads n bytes of the copy from off.
func (c *classTier) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rd, err := c.g.openObject(ctx, clustermap.TierBucket, c.key(key), false)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := rd.WriteRange(ctx, pw, off, n)
		rd.Close()
		pw.CloseWithError(err)
	}()
	return pr, nil
}

// Delete removes the copy (absent is not an error).
func (c *classTier) Delete(ctx context.Context, key string) error {
	err := c.g.DeleteObject(ctx, clustermap.TierBucket, c.key(key))
	if errors.Is(errors.NotExist, err) {
		return nil
	}
	return err
}

// tierReader reads an archived version from its tier, a range at a time.
type tierReader struct {
	g     *Gateway
	o     *object.Object
	store TierStore
	key   string
}

func (r *tierReader) Info() *object.Object { return r.o }
func (r *tierReader) Close() error         { return nil }

func (r *tierReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	if n <= 0 {
		return 0, nil
	}
	r.g.tiers.reads.Add(1)
	body, err := r.store.GetRange(ctx, r.key, off, n)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	got, err := io.Copy(w, io.LimitReader(body, n))
	if err == nil && got < n {
		err = errors.Errorf("", errors.Transient, "the tier sent %d of %d bytes", got, n)
	}
	return got, err
}

// openStreaming opens the archived version o for a client's GET in a transparent tier:
// the bytes stream from the tier (the first byte does not wait for the recall), and the
// recall of the version starts in the background unless one runs on this gateway. The
// recall deletes the tier's copy only once every GET streaming from it has closed.
func (g *Gateway) openStreaming(bucket, key string, o *object.Object) (ObjectReader, error) {
	rd, err := g.openTiered(o)
	if err != nil {
		return nil, err
	}
	id := recallID(bucket, key, o.HLC)
	t := &g.tiers
	t.mu.Lock()
	if t.streams == nil {
		t.streams = map[string]*streamCount{}
	}
	sc := t.streams[id]
	if sc == nil {
		sc = &streamCount{idle: make(chan struct{})}
		t.streams[id] = sc
	}
	sc.n++
	_, running := t.inflight[id]
	t.mu.Unlock()
	if !running {
		rec := *o
		started := make(chan struct{})
		g.bg.Add(1)
		go func() {
			defer g.bg.Done()
			if err := g.recall(g.closing, bucket, key, &rec, started); err != nil {
				g.log.Warn("recall failed", "bucket", bucket, "key", key, "err", err)
			}
		}()
		<-started
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			t.mu.Lock()
			if sc.n--; sc.n == 0 {
				close(sc.idle)
				delete(t.streams, id)
			}
			t.mu.Unlock()
		})
	}
	return &streamReader{tierReader: rd.(*tierReader), release: release, bucket: bucket, name: key}, nil
}

// streamsIdle returns a channel closed once no GET streams the tier copy of version id.
func (g *Gateway) streamsIdle(id string) <-chan struct{} {
	t := &g.tiers
	t.mu.Lock()
	defer t.mu.Unlock()
	if sc := t.streams[id]; sc != nil {
		return sc.idle
	}
	c := make(chan struct{})
	close(c)
	return c
}

// streamReader is a client's read of an archived version straight from its tier. Prepare
// opens the tier's answer before the response's status is sent (a tier that does not
// answer is an error status, not a cut-off 200); Close lets the recall delete the copy.
type streamReader struct {
	*tierReader
	release      func()
	prepared     io.ReadCloser
	off, n       int64
	bucket, name string       // the object (r.key is its key in the tier)
	local        ObjectReader // the version read from its holders, once recalled
}

// fromHolders is what a read does when the tier no longer has the copy: another gateway
// recalled the version meanwhile (its recall counts only its own streams before deleting
// the copy), so the same version is read from its holders. Any other outcome is the
// tier's error.
func (r *streamReader) fromHolders(ctx context.Context, tierErr error) error {
	if !errors.Is(errors.NotExist, tierErr) {
		return tierErr
	}
	rd, err := r.g.OpenVersion(ctx, r.bucket, r.name, r.o.HLC)
	if err != nil {
		return tierErr
	}
	if o := rd.Info(); o.HLC != r.o.HLC || o.Tiered() || o.ETag != r.o.ETag {
		rd.Close()
		return tierErr
	}
	r.local = rd
	return nil
}

func (r *streamReader) Prepare(ctx context.Context, off, n int64) error {
	if n <= 0 || r.local != nil {
		return nil
	}
	r.g.tiers.reads.Add(1)
	body, err := r.store.GetRange(ctx, r.key, off, n)
	if err != nil {
		return r.fromHolders(ctx, err)
	}
	r.prepared, r.off, r.n = body, off, n
	return nil
}

func (r *streamReader) WriteRange(ctx context.Context, w io.Writer, off, n int64) (int64, error) {
	if r.local != nil {
		return r.local.WriteRange(ctx, w, off, n)
	}
	body := r.prepared
	if body == nil || off != r.off || n != r.n {
		if body != nil {
			body.Close()
		}
		r.prepared = nil
		got, err := r.tierReader.WriteRange(ctx, w, off, n)
		if got == 0 && err != nil && r.fromHolders(ctx, err) == nil {
			return r.local.WriteRange(ctx, w, off, n)
		}
		return got, err
	}
	r.prepared = nil
	defer body.Close()
	got, err := io.Copy(w, io.LimitReader(body, n))
	if err == nil && got < n {
		err = errors.Errorf("", errors.Transient, "the tier sent %d of %d bytes", got, n)
	}
	return got, err
}

func (r *streamReader) Close() error {
	if r.prepared != nil {
		r.prepared.Close()
		r.prepared = nil
	}
	if r.local != nil {
		r.local.Close()
		r.local = nil
	}
	r.release()
	return nil
}

// openTiered opens an archived version o for a background pass: its bytes stream from
// the tier.
func (g *Gateway) openTiered(o *object.Object) (ObjectReader, error) {
	name, key, _ := o.TierRef()
	st, err := g.tierStore(name)
	if err != nil {
		return nil, err
	}
	return &tierReader{g: g, o: o, store: st, key: key}, nil
}

// recall brings the archived version o of bucket/key back to its holders (a rewrite of
// the same version in its storage class, read from the tier), then deletes the tier's
// copy. Concurrent recalls of one version wait for the first.
func (g *Gateway) recall(ctx context.Context, bucket, key string, o *object.Object, started chan<- struct{}) error {
	return g.recallWith(ctx, bucket, key, o, started, g.recallOnce)
}

// recallWith runs once(ctx, bucket, key, o) for version o, unless one runs already for
// it on this gateway, in which case it waits for that one.
func (g *Gateway) recallWith(ctx context.Context, bucket, key string, o *object.Object, started chan<- struct{},
	once func(ctx context.Context, bucket, key string, o *object.Object) error) error {
	id := recallID(bucket, key, o.HLC)
	t := &g.tiers
	t.mu.Lock()
	if c, ok := t.inflight[id]; ok {
		t.mu.Unlock()
		if started != nil {
			close(started)
		}
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return errors.E(errors.Transient, ctx.Err())
		}
	}
	if t.inflight == nil {
		t.inflight = map[string]*recallCall{}
	}
	c := &recallCall{done: make(chan struct{})}
	t.inflight[id] = c
	t.mu.Unlock()
	if started != nil {
		close(started)
	}
	// The recall goes on if the GET that started it goes away: others may wait for it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	c.err = once(rctx, bucket, key, o)
	cancel()
	t.mu.Lock()
	delete(t.inflight, id)
	t.mu.Unlock()
	close(c.done)
	return c.err
}

func (g *Gateway) recallOnce(ctx context.Context, bucket, key string, o *object.Object) error {
	const op errors.Op = "gateway.recall"
	name, tkey, _ := o.TierRef()
	st, err := g.tierStore(name)
	if err != nil {
		return errors.E(op, err)
	}
	cls, ok := g.cfg.Maps.Current().ResolveClass(o.StorageClass)
	if !ok {
		return errors.Errorf(op, errors.Invalid, "the archived version's class %q is not in the map", o.StorageClass)
	}
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return errors.E(op, err)
	}
	done, err := g.Rewrite(ctx, bucket, key, o.HLC, cls, ts)
	if err != nil {
		return errors.E(op, err)
	}
	if !done {
		return nil // a newer version or a delete came first: the GET looks again
	}
	g.tiers.recalled.Add(1)
	g.tiers.recallBytes.Add(o.Size)
	// Every holder has the bytes again: the tier's copy goes once no GET streams from it
	// (a failure leaves it behind, unreferenced; logged).
	select {
	case <-g.streamsIdle(recallID(bucket, key, o.HLC)):
	case <-ctx.Done():
		g.log.Warn("recall: the tier's copy is left behind: GETs still stream from it", "tier", name, "key", tkey)
		return nil
	}
	if err := st.Delete(ctx, tkey); err != nil {
		g.log.Warn("recall: the tier's copy is left behind", "tier", name, "key", tkey, "err", err)
	}
	return nil
}

// restoreMode reports whether the archived version o is in a tier whose GETs answer
// InvalidObjectState until a RestoreObject (clustermap.RecallRestore).
func (g *Gateway) restoreMode(o *object.Object) bool {
	name, _, ok := o.TierRef()
	if !ok {
		return false
	}
	t, ok := g.cfg.Maps.Current().Tiers[name]
	return ok && t.RecallMode() == clustermap.RecallRestore
}

func recallID(bucket, key string, v uint64) string {
	return bucket + "\x00" + key + "\x00" + fmt.Sprint(v)
}

// restoreView is the record a HEAD (head: ctx is used) or a listing shows of o: an
// archived version of a restore-mode tier reports storage class GLACIER (clients such as
// aws s3 cp and sync skip it, as they should: a GET would fail unless it is restored),
// and x-amz-restore: ongoing while a restore runs, and on a HEAD, once restored, its
// expiry (a lookup of the restored copy: HEADs of restore-mode stubs only).
func (g *Gateway) restoreView(ctx context.Context, bucket, key string, o *object.Object, head bool) *object.Object {
	if !g.restoreMode(o) {
		return o
	}
	v := *o
	v.StorageClass = "GLACIER"
	g.tiers.mu.Lock()
	_, running := g.tiers.inflight[recallID(bucket, key, o.HLC)]
	g.tiers.mu.Unlock()
	switch {
	case running:
		v.Restore = `ongoing-request="true"`
	case head:
		if exp, ok := g.restoredExpiry(ctx, bucket, key, o); ok {
			v.Restore = fmt.Sprintf(`ongoing-request="false", expiry-date="%s"`, exp.Format(http.TimeFormat))
		}
	}
	return &v
}

// tempRestores reports whether RestoreObject makes temporary copies (the map has the tier
// bucket): else it brings versions back for good.
func (g *Gateway) tempRestores() bool {
	m := g.cfg.Maps.Current()
	_, ok := m.Buckets[clustermap.TierBucket]
	return ok && m.Level >= clustermap.TierBucketLevel
}

// restoredExpiry returns when the restored copy of the archived version o expires; false
// if it has none (or it has expired: the tier loop drops it soon).
func (g *Gateway) restoredExpiry(ctx context.Context, bucket, key string, o *object.Object) (time.Time, bool) {
	if !g.tempRestores() {
		return time.Time{}, false
	}
	c, err := g.StatObject(ctx, clustermap.TierBucket, object.RestoredKey(bucket, key, o.HLC))
	if err != nil {
		return time.Time{}, false
	}
	exp, ok := object.RestoreExpiry(c)
	return exp, ok && time.Now().Before(exp)
}

// openRestored opens the restored copy of the archived version o, presented as o (its
// record: ETag, metadata); nil if there is none or it has expired.
func (g *Gateway) openRestored(ctx context.Context, bucket, key string, o *object.Object) ObjectReader {
	if !g.tempRestores() {
		return nil
	}
	rd, err := g.openObject(ctx, clustermap.TierBucket, object.RestoredKey(bucket, key, o.HLC), false)
	if err != nil {
		return nil
	}
	exp, ok := object.RestoreExpiry(rd.Info())
	if !ok || !time.Now().Before(exp) || rd.Info().Size != o.Size {
		rd.Close()
		return nil
	}
	v := *o
	v.StorageClass = "GLACIER"
	v.Restore = fmt.Sprintf(`ongoing-request="false", expiry-date="%s"`, exp.Format(http.TimeFormat))
	return &restoredReader{Reader: rd, o: &v}
}

// restoredReader reads a restored copy as the archived version it is a copy of.
type restoredReader struct {
	replica.Reader
	o *object.Object
}

func (r *restoredReader) Info() *object.Object { return r.o }

// restoreDays is the expiry of a copy restored now for days: S3's rounding, to the
// midnight UTC after now + days.
func restoreDays(now time.Time, days int) time.Time {
	d := now.UTC().Add(time.Duration(min(days, 100000)) * 24 * time.Hour)
	return d.Truncate(24 * time.Hour).Add(24 * time.Hour)
}

// restoreCopy copies the archived version o from its tier into the tier bucket as its
// restored copy, expiring days from now (the tier's copy and the stub stay). A copy of
// a single-part unencrypted version is checked against its ETag.
func (g *Gateway) restoreCopy(ctx context.Context, bucket, key string, o *object.Object, days int) error {
	const op errors.Op = "gateway.restoreCopy"
	rd, err := g.openTiered(o)
	if err != nil {
		return errors.E(op, err)
	}
	exp := restoreDays(time.Now(), days)
	meta := &object.Object{StorageClass: clustermap.StandardClass, ContentType: "application/octet-stream",
		UserMeta: [][2]string{{object.RestoreExpiryMeta, strconv.FormatInt(exp.Unix(), 10)}}}
	h := md5.New()
	var opts object.PutOptions
	if want, err := hex.DecodeString(o.ETag); err == nil && len(o.PartSizes) == 0 && o.SSE.IsZero() && len(want) == md5.Size {
		opts.Finish = func(*object.Object) error {
			if got := h.Sum(nil); string(got) != string(want) {
				return errors.Errorf(op, errors.Corrupt, "the tier's copy has MD5 %x, the version's ETag is %x: not restored", got, want)
			}
			return nil
		}
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := rd.WriteRange(ctx, pw, 0, o.Size)
		pw.CloseWithError(err)
	}()
	_, err = g.PutObject(ctx, clustermap.TierBucket, object.RestoredKey(bucket, key, o.HLC), meta, io.TeeReader(pr, h), o.Size, opts)
	pr.Close()
	if err != nil {
		return errors.E(op, err)
	}
	g.tiers.recalled.Add(1)
	g.tiers.recallBytes.Add(o.Size)
	return nil
}

// RestoreObject starts the restore of bucket/key's current version if it is archived in
// a tier and returns true; false if it is not archived (never archived, or brought back
// for good), or if it is restored already (its copy is made again, expiring days from
// now, as S3 extends a restore). ErrRestoreInProgress while a restore of it runs. The
// restore runs in the background (S3 answers 202 at once); HEAD shows x-amz-restore
// meanwhile. A version of a restore-mode tier gets a temporary copy that expires days
// from now (rounded to midnight UTC) while it stays archived, when the map has the tier
// bucket; otherwise (and in a transparent tier) it is brought back for good.
func (g *Gateway) RestoreObject(ctx context.Context, bucket, key string, days int) (bool, error) {
	const op errors.Op = "gateway.RestoreObject"
	o, err := g.StatObject(ctx, bucket, key)
	if err != nil {
		return false, errors.E(op, err)
	}
	if !o.Tiered() {
		return false, nil
	}
	g.tiers.mu.Lock()
	_, running := g.tiers.inflight[recallID(bucket, key, o.HLC)]
	g.tiers.mu.Unlock()
	if running {
		return false, errors.E(op, errors.Exist, object.ErrRestoreInProgress)
	}
	rec := *o
	once, restored := g.recallOnce, false
	if g.restoreMode(o) && g.tempRestores() {
		once = func(ctx context.Context, bucket, key string, o *object.Object) error {
			return g.restoreCopy(ctx, bucket, key, o, days)
		}
		_, restored = g.restoredExpiry(ctx, bucket, key, o)
	}
	started := make(chan struct{})
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		if err := g.recallWith(g.closing, bucket, key, &rec, started, once); err != nil {
			g.log.Warn("restore failed", "bucket", bucket, "key", key, "err", err)
		}
	}()
	<-started // the restore is registered: a HEAD from now on sees it
	return !restored, nil
}
