package gateway

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// memTier is a TierStore in memory, with fault knobs: PutErr fails puts, GetErr reads;
// gate, if set, holds every read until it is closed.
type memTier struct {
	mu      sync.Mutex
	objs    map[string][]byte
	PutErr  error
	GetErr  error
	gets    atomic.Int64
	deletes atomic.Int64
	gate    chan struct{}
}

func newMemTier() *memTier { return &memTier{objs: map[string][]byte{}} }

func (m *memTier) Put(ctx context.Context, key string, body io.Reader, size int64, sum []byte) (string, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.PutErr != nil {
		return "", m.PutErr
	}
	if got := md5.Sum(b); int64(len(b)) != size || !bytes.Equal(got[:], sum) {
		return "", errors.E(errors.Invalid, "BadDigest")
	}
	m.objs[key] = b
	return hex.EncodeToString(sum), nil
}

func (m *memTier) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	m.gets.Add(1)
	if m.gate != nil {
		<-m.gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.GetErr != nil {
		return nil, m.GetErr
	}
	b, ok := m.objs[key]
	if !ok {
		return nil, errors.E(errors.NotExist, "no such key in the tier")
	}
	return io.NopCloser(bytes.NewReader(b[off : off+n])), nil
}

func (m *memTier) Delete(ctx context.Context, key string) error {
	m.deletes.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *memTier) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.objs)
}

func tierCluster(t *testing.T) (*testCluster, *memTier) {
	t.Helper()
	mt := newMemTier()
	c := newCluster(t, 3, clusterConfig{tiers: func(name string) (TierStore, error) {
		if name != "remote" {
			return nil, errors.Errorf("", errors.NotExist, "no tier %q", name)
		}
		return mt, nil
	}})
	c.createBucket("b")
	return c, mt
}

// Migrating a version copies it to the tier and leaves a stub on every holder: the
// record keeps its version, size, ETag, metadata and class; the holders' stores free the
// body; a background read streams from the tier; a client's read recalls the version once
// (16 concurrent GETs, one recall), deletes the tier's copy and serves identical bytes.
func TestMigrateAndRecall(t *testing.T) {
	ctx := context.Background()
	c, mt := tierCluster(t)
	bodies := map[string][]byte{"small": randBody(1, 100), "big": randBody(2, 700<<10)}
	before := map[string]*object.Object{}
	for k, b := range bodies {
		before[k] = mustPut(t, c.nodes[0].gw, "b", k, b)
	}
	used := func() (n int64) {
		for _, nd := range c.nodes {
			n += nd.store.Stats().LiveBytes
		}
		return n
	}
	live := used()
	for k := range bodies {
		n, err := c.nodes[1].gw.Migrate(ctx, "b", k, before[k].HLC, "remote")
		if err != nil || n != int64(len(bodies[k])) {
			t.Fatalf("migrate %s: %d, %v", k, n, err)
		}
		// Again: archived already, nothing to do.
		if n, err := c.nodes[2].gw.Migrate(ctx, "b", k, before[k].HLC, "remote"); err != nil || n != 0 {
			t.Fatalf("migrate %s again: %d, %v", k, n, err)
		}
	}
	if mt.len() != 2 {
		t.Fatalf("%d objects in the tier, want 2", mt.len())
	}
	if after := used(); after >= live-int64(3*(700<<10)) {
		t.Fatalf("live bytes %d after migration, %d before: the holders kept the bodies", after, live)
	}
	for k, b := range bodies {
		for _, nd := range c.nodes {
			o, err := nd.gw.StatObject(ctx, "b", k)
			if err != nil || !o.Tiered() || o.HLC != before[k].HLC || o.ETag != before[k].ETag || o.Size != int64(len(b)) || o.ContentType != before[k].ContentType || o.StorageClass != before[k].StorageClass {
				t.Fatalf("stat %s through %s: %+v, %v; was %+v", k, nd.id, o, err, before[k])
			}
		}
		// A background pass streams the bytes from the tier, without recalling.
		rd, err := c.nodes[0].gw.openObject(ctx, "b", k, false)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := rd.WriteRange(ctx, &buf, 0, int64(len(b))); err != nil || !bytes.Equal(buf.Bytes(), b) {
			t.Fatalf("background read of %s: %v", k, err)
		}
		rd.Close()
	}
	if st := c.nodes[0].gw.TierStats(); st.Recalled != 0 {
		t.Fatalf("recalled by a background read: %+v", st)
	}
	// 16 concurrent GETs of the big one, held at the tier until all have asked.
	mt.gate = make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range 16 {
		wg.Go(func() {
			got, info, err := get(ctx, c.nodes[i%3].gw, "b", "big", 0, -1)
			if err == nil && (!bytes.Equal(got, bodies["big"]) || info.ETag != before["big"].ETag) {
				err = errors.E(errors.Corrupt, "different bytes")
			}
			errs[i] = err
		})
	}
	close(mt.gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
	}
	// The GETs streamed from the tier; the recalls run in the background. Each gateway
	// joins its own GETs; three gateways recall at most once each, and the first to
	// finish makes the others find the version local (a rewrite, same version).
	var recalls int64
	proctest.WaitFor(t, 20*time.Second, func() error {
		recalls = 0
		for _, nd := range c.nodes {
			recalls += nd.gw.TierStats().Recalled
		}
		if recalls < 1 || mt.len() != 1 {
			return fmt.Errorf("%d recalls, %d objects in the tier", recalls, mt.len())
		}
		return nil
	})
	if recalls > 3 {
		t.Fatalf("%d recalls for 16 GETs through 3 gateways", recalls)
	}
	for _, nd := range c.nodes {
		o, err := nd.store.StatObject("b", "big")
		if err != nil || o.Tiered() || o.HLC != before["big"].HLC {
			t.Fatalf("%s's record after the recall: %+v, %v", nd.id, o, err)
		}
	}
	if mt.len() != 1 {
		t.Fatalf("%d objects in the tier after the recall, want 1 (the small one)", mt.len())
	}
}

// waitRecalled waits until gw has finished n recalls (they run in the background of the
// GETs that stream from the tier).
func waitRecalled(t *testing.T, gw *Gateway, n int64) {
	t.Helper()
	proctest.WaitFor(t, 20*time.Second, func() error {
		if got := gw.TierStats().Recalled; got < n {
			return fmt.Errorf("%d recalls, want %d", got, n)
		}
		return nil
	})
}

// Through one gateway, 16 concurrent GETs of an archived object recall it once.
func TestRecallOnce(t *testing.T) {
	ctx := context.Background()
	c, mt := tierCluster(t)
	body := randBody(3, 300<<10)
	o := mustPut(t, c.nodes[0].gw, "b", "k", body)
	if _, err := c.nodes[0].gw.Migrate(ctx, "b", "k", o.HLC, "remote"); err != nil {
		t.Fatal(err)
	}
	mt.gate = make(chan struct{})
	var wg sync.WaitGroup
	var started sync.WaitGroup
	errs := make([]error, 16)
	for i := range 16 {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			got, _, err := get(ctx, c.nodes[0].gw, "b", "k", 0, -1)
			if err == nil && !bytes.Equal(got, body) {
				err = errors.E(errors.Corrupt, "different bytes")
			}
			errs[i] = err
		})
	}
	started.Wait()
	close(mt.gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
	}
	waitRecalled(t, c.nodes[0].gw, 1)
	// The recall is counted once every holder has the bytes; the tier's copy is deleted
	// after that, once no GET streams from it.
	proctest.WaitFor(t, 20*time.Second, func() error {
		if n := mt.len(); n != 0 {
			return fmt.Errorf("%d copies in the tier after the recall", n)
		}
		return nil
	})
	if st := c.nodes[0].gw.TierStats(); st.Recalled != 1 {
		t.Fatalf("%+v: want one recall", st)
	}
}

// A tier that fails mid-migration changes nothing: the object keeps its local copies and
// reads as before; the migration succeeds once the tier is back. A stub written to one
// holder only (the others unreachable) leaves readable full copies on the others.
func TestMigrateTierFails(t *testing.T) {
	ctx := context.Background()
	c, mt := tierCluster(t)
	body := randBody(4, 200<<10)
	o := mustPut(t, c.nodes[0].gw, "b", "k", body)
	mt.PutErr = errors.E(errors.Transient, "tier unreachable")
	if _, err := c.nodes[0].gw.Migrate(ctx, "b", "k", o.HLC, "remote"); !errors.Is(errors.Transient, err) {
		t.Fatalf("migrate with the tier down: %v", err)
	}
	for _, nd := range c.nodes {
		if st, err := nd.store.StatObject("b", "k"); err != nil || st.Tiered() {
			t.Fatalf("%s after a failed migration: %+v, %v", nd.id, st, err)
		}
	}
	if got, _, err := get(ctx, c.nodes[1].gw, "b", "k", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read after a failed migration: %v", err)
	}
	mt.mu.Lock()
	mt.PutErr = nil
	mt.mu.Unlock()
	// One holder unreachable from the migrating gateway: the stub does not reach every
	// holder, the migration fails, and every holder still serves the bytes.
	c.faults("n1", "n3").Partition()
	if _, err := c.nodes[0].gw.Migrate(ctx, "b", "k", o.HLC, "remote"); err == nil {
		t.Fatal("migration with a holder unreachable succeeded")
	}
	c.healAll()
	for _, nd := range c.nodes {
		got, _, err := get(ctx, nd.gw, "b", "k", 0, -1)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("read through %s after a partial stub: %v", nd.id, err)
		}
	}
	if n, err := c.nodes[0].gw.Migrate(ctx, "b", "k", o.HLC, "remote"); err != nil && n == 0 {
		// The GET above may have recalled the partial stub's version; a new version is
		// not made by a recall, so migrating again by the same version works.
		t.Fatalf("migration after the faults healed: %d, %v", n, err)
	}
	_ = strconv.Itoa
}

// Overwriting or deleting an archived object (and purging an archived version) collects
// its tier copy: every holder records the copy its store no longer names, and the tier
// loop deletes it from the tier; a recall and a migration of the same version (same HLC)
// record nothing.
func TestTierGarbage(t *testing.T) {
	ctx := context.Background()
	c, mt := tierCluster(t)
	keys := []string{"over", "del", "kept"}
	for i, k := range keys {
		o := mustPut(t, c.nodes[0].gw, "b", k, randBody(uint64(10+i), 50<<10))
		if _, err := c.nodes[0].gw.Migrate(ctx, "b", k, o.HLC, "remote"); err != nil {
			t.Fatal(err)
		}
	}
	if mt.len() != 3 {
		t.Fatalf("%d copies in the tier, want 3", mt.len())
	}
	body := randBody(20, 1000)
	mustPut(t, c.nodes[1].gw, "b", "over", body)
	if err := c.nodes[2].gw.DeleteObject(ctx, "b", "del"); err != nil {
		t.Fatal(err)
	}
	for _, nd := range c.nodes {
		gc, err := nd.store.TierGarbage(100)
		if err != nil || len(gc) != 2 {
			t.Fatalf("%s's tier garbage: %+v, %v; want the copies of over and del", nd.id, gc, err)
		}
	}
	collected := 0
	for _, nd := range c.nodes {
		collected += nd.rep.CollectTierGarbage(ctx)
	}
	if collected != 6 || mt.len() != 1 {
		t.Fatalf("collected %d entries (want 6: 2 per holder); %d copies left in the tier, want 1 (kept)", collected, mt.len())
	}
	for _, nd := range c.nodes {
		if gc, _ := nd.store.TierGarbage(100); len(gc) != 0 {
			t.Fatalf("%s's tier garbage after collection: %+v", nd.id, gc)
		}
	}
	if got, _, err := get(ctx, c.nodes[0].gw, "b", "over", 0, -1); err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the overwritten object: %v", err)
	}
	// The kept one is recalled: the recall deletes its copy itself, and records nothing.
	recalled := c.nodes[0].gw.TierStats().Recalled
	if _, _, err := get(ctx, c.nodes[0].gw, "b", "kept", 0, -1); err != nil {
		t.Fatal(err)
	}
	waitRecalled(t, c.nodes[0].gw, recalled+1)
	proctest.WaitFor(t, 20*time.Second, func() error { // the copy goes once the GET closed
		if mt.len() != 0 {
			return fmt.Errorf("%d copies in the tier", mt.len())
		}
		return nil
	})
	for _, nd := range c.nodes {
		if gc, _ := nd.store.TierGarbage(100); len(gc) != 0 {
			t.Fatalf("%s's tier garbage after a recall: %+v", nd.id, gc)
		}
	}
	if mt.len() != 0 {
		t.Fatalf("%d copies left in the tier after the recall", mt.len())
	}
}

// MigrateNoncurrent archives a noncurrent version by its id in an external tier: the
// stub on every holder, the current version untouched, the archived version read back by
// its id; again, nothing to do; a version under a retention stays local (an external
// tier cannot keep the lock's guarantee); a purged version is nothing to do.
func TestMigrateNoncurrent(t *testing.T) {
	ctx := context.Background()
	c, mt := tierCluster(t)
	g := c.nodes[0].gw
	put := func(body []byte, meta object.Object) *object.Object {
		meta.Versioned = true
		o, err := g.PutObject(ctx, "b", "k", &meta, bytes.NewReader(body), int64(len(body)), object.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	b1, b2, b3 := randBody(31, 200<<10), randBody(32, 1000), randBody(33, 5000)
	v1 := put(b1, object.Object{})
	v2 := put(b2, object.Object{Retention: object.Retention{Mode: object.LockCompliance, Until: time.Now().Add(time.Hour).UnixNano()}})
	v3 := put(b3, object.Object{})
	if n, err := c.nodes[1].gw.MigrateNoncurrent(ctx, "b", "k", v1.HLC, "remote"); err != nil || n != int64(len(b1)) {
		t.Fatalf("migrate v1: %d, %v", n, err)
	}
	if n, err := c.nodes[2].gw.MigrateNoncurrent(ctx, "b", "k", v1.HLC, "remote"); err != nil || n != 0 {
		t.Fatalf("migrate v1 again: %d, %v", n, err)
	}
	if n, err := c.nodes[1].gw.MigrateNoncurrent(ctx, "b", "k", v2.HLC, "remote"); err != nil || n != 0 {
		t.Fatalf("migrate the locked v2 to an external tier: %d, %v", n, err)
	}
	if mt.len() != 1 {
		t.Fatalf("%d copies in the tier, want 1", mt.len())
	}
	for _, nd := range c.nodes {
		o1, err1 := nd.store.StatAt("b", "k", v1.HLC)
		o2, err2 := nd.store.StatAt("b", "k", v2.HLC)
		cur, err3 := nd.store.StatObject("b", "k")
		if err1 != nil || err2 != nil || err3 != nil || !o1.Tiered() || o2.Tiered() || cur.HLC != v3.HLC || cur.Tiered() || o1.ETag != v1.ETag {
			t.Fatalf("%s: v1 %+v %v, v2 %v, current %v: want v1 archived only", nd.id, o1, err1, err2, err3)
		}
	}
	rd, err := c.nodes[2].gw.OpenVersion(ctx, "b", "k", v1.HLC)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = rd.WriteRange(ctx, &buf, 0, rd.Info().Size)
	rd.Close()
	if err != nil || !bytes.Equal(buf.Bytes(), b1) {
		t.Fatalf("read v1 by its id: %d bytes, %v", buf.Len(), err)
	}
	if got, _, err := get(ctx, g, "b", "k", 0, -1); err != nil || !bytes.Equal(got, b3) {
		t.Fatalf("the current version: %v", err)
	}
	// A purged version: nothing to do (and the purge collects v1's copy as garbage).
	if _, err := g.DeleteRecord(ctx, "b", "k", object.Object{HLC: v1.HLC, Versioned: true, Purged: true}); err != nil {
		t.Fatal(err)
	}
	if n, err := g.MigrateNoncurrent(ctx, "b", "k", v1.HLC, "remote"); err != nil || n != 0 {
		t.Fatalf("migrate the purged v1: %d, %v", n, err)
	}
	if gc, err := c.nodes[0].store.TierGarbage(100); err != nil || len(gc) != 1 {
		t.Fatalf("tier garbage after the purge of v1: %+v, %v", gc, err)
	}
}
