package gateway

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/wire"
)

// leaseCluster is cacheCluster with read leases of lease at feature level 11.
func leaseCluster(t *testing.T, cls clustermap.Class, lease time.Duration) (c *testCluster, key string, reader int, holders []int) {
	c = newCluster(t, 5, clusterConfig{class: cls, cache: 8 << 20, lease: lease})
	c.setLevel(LevelReadLeases)
	c.createBucket("b")
	key = c.keyWhere("b", "k", func(r []int) bool { return !containsInt(r, 0) })
	holders, _ = c.replicaSet("b", key)
	return c, key, 0, holders
}

// TestObjectCacheLease: a non-holder gateway takes a read lease with its check and serves
// hits with no check while it lasts; overwrites, tag changes and deletes through other
// gateways are revoked first and every read after their acknowledgement sees them; a
// holder that cannot reach the leaseholder waits the lease out before it commits; below
// level 11 no lease is asked for.
func TestObjectCacheLease(t *testing.T) {
	// W = N: a write is acknowledged only once every holder, the one that granted the
	// lease included, has committed it (with W < N the first holder may still be
	// revoking when the write is acknowledged, and still serves the old version then,
	// to a cached read as to an uncached one).
	cls := clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 3, R: 1, D: 3}
	c, key, rd, holders := leaseCluster(t, cls, 2*time.Second)
	ctx := context.Background()
	g := c.nodes[rd].gw
	writer := c.nodes[holders[1]].gw
	other := c.nodes[4].gw
	if containsInt(holders, 4) {
		other = c.nodes[holders[2]].gw
	}
	read := func(want []byte) {
		t.Helper()
		b, _, err := get(ctx, g, "b", key, 0, -1)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("read %d bytes %.8q, want %d bytes %.8q", len(b), b, len(want), want)
		}
	}
	v1 := randBody(1, 4<<10)
	mustPut(t, writer, "b", key, v1)
	read(v1) // miss, fills
	read(v1) // a check, which takes the lease
	s := g.CacheStats()
	if s.Leased != 1 || s.Checks != 1 || s.LeaseHits != 0 {
		t.Fatalf("after the check: %+v, want 1 lease taken", s)
	}
	for range 5 {
		read(v1)
	}
	if s := g.CacheStats(); s.LeaseHits == 0 || s.Checks >= 6 {
		t.Fatalf("no hit under the lease: %+v", s)
	}

	v2 := randBody(2, 4<<10)
	mustPut(t, other, "b", key, v2)
	if s := g.CacheStats(); s.Revoked == 0 {
		t.Fatalf("an overwrite elsewhere did not revoke the lease: %+v", s)
	}
	read(v2)
	read(v2)
	read(v2)

	if _, err := writer.SetObjectTags(ctx, "b", key, [][2]string{{"k", "v"}}); err != nil {
		t.Fatal(err)
	}
	_, info, err := get(ctx, g, "b", key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Tags) != 1 || info.Tags[0] != [2]string{"k", "v"} {
		t.Fatalf("tags %v after a tag change elsewhere", info.Tags)
	}
	read(v2)
	read(v2)

	if err := other.DeleteObject(ctx, "b", key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(ctx, g, "b", key, 0, -1); !errors.Is(errors.NotExist, err) {
		t.Fatalf("read after a delete elsewhere: %v, want NoSuchKey", err)
	}

	// The holder that granted the lease cannot reach the gateway: it commits V4 only
	// once the lease has expired, which the gateway counted from before it asked.
	v3 := randBody(3, 4<<10)
	mustPut(t, writer, "b", key, v3)
	read(v3)
	read(v3)
	read(v3)
	first := c.nodes[holders[0]]
	c.faults(first.id, c.nodes[rd].id).Partition()
	failed := first.rleases.Stats().RevokeFailed
	v4 := randBody(4, 4<<10)
	mustPut(t, other, "b", key, v4)
	if got := first.rleases.Stats().RevokeFailed; got != failed+1 {
		t.Fatalf("revokes not confirmed: %d, want %d", got, failed+1)
	}
	read(v4)
	c.healAll()

	// Below level 11 no lease is asked for: every hit is checked.
	c.setLevel(LevelReadLeases - 1)
	read(v4)
	before := g.CacheStats()
	for range 3 {
		read(v4)
	}
	if s := g.CacheStats(); s.LeaseHits != before.LeaseHits || s.Checks != before.Checks+3 {
		t.Fatalf("below level 11: %+v, before %+v", s, before)
	}
}

// TestObjectCacheLeaseRevokeAuth: a revoke must carry a valid internode signature: one
// whose query was changed after signing, an unsigned one and a replayed one are refused
// and leave the lease in place; the genuine one drops it.
func TestObjectCacheLeaseRevokeAuth(t *testing.T) {
	cls := clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 3, R: 1, D: 3}
	c, key, rd, holders := leaseCluster(t, cls, 5*time.Second)
	ctx := context.Background()
	g := c.nodes[rd].gw
	v1 := randBody(1, 4<<10)
	mustPut(t, c.nodes[holders[1]].gw, "b", key, v1)
	for range 3 {
		if _, _, err := get(ctx, g, "b", key, 0, -1); err != nil {
			t.Fatal(err)
		}
	}
	if s := g.CacheStats(); s.LeaseHits != 1 {
		t.Fatalf("no lease: %+v", s)
	}
	addr := c.nodes[rd].srv.Listener.Addr().String()
	signed := func(k string) *http.Request {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+wire.PathRevoke+"?"+url.Values{wire.QBucket: {"b"}, wire.QKey: {k}}.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.secret.Sign(req, c.nodes[holders[0]].id, c.maps.Current().Epoch, time.Now())
		return req
	}
	send := func(req *http.Request) int {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tampered := signed("other")
	tampered.URL.RawQuery = url.Values{wire.QBucket: {"b"}, wire.QKey: {key}}.Encode()
	unsigned, _ := http.NewRequest(http.MethodPost, tampered.URL.String(), nil)
	for name, req := range map[string]*http.Request{"tampered": tampered, "unsigned": unsigned} {
		if code := send(req); code < 400 {
			t.Fatalf("%s revoke answered %d", name, code)
		}
	}
	hits := g.CacheStats().LeaseHits
	if _, _, err := get(ctx, g, "b", key, 0, -1); err != nil {
		t.Fatal(err)
	}
	if s := g.CacheStats(); s.Revoked != 0 || s.LeaseHits != hits+1 {
		t.Fatalf("a refused revoke dropped the lease: %+v", s)
	}
	genuine := signed(key)
	if code := send(genuine); code != http.StatusNoContent {
		t.Fatalf("genuine revoke answered %d", code)
	}
	replay := genuine.Clone(ctx)
	if code := send(replay); code < 400 {
		t.Fatalf("replayed revoke answered %d", code)
	}
	if s := g.CacheStats(); s.Revoked != 1 {
		t.Fatalf("revokes taken: %+v, want 1", s)
	}
	checks := g.CacheStats().Checks
	if _, _, err := get(ctx, g, "b", key, 0, -1); err != nil {
		t.Fatal(err)
	}
	if s := g.CacheStats(); s.Checks != checks+1 || s.LeaseHits != hits+1 {
		t.Fatalf("a read after the revoke was not checked: %+v", s)
	}
}

// TestObjectCacheLeaseHistory: TestObjectCacheHistory with read leases (N=3, W=2, R=2:
// every write's holders meet every pair that granted a lease): overwrites and deletes
// through other gateways while leases are live, and no read returns a value an
// acknowledged write had replaced before it began.
func TestObjectCacheLeaseHistory(t *testing.T) {
	c := cacheHistory(t, clusterConfig{class: clustermap.Class{Name: clustermap.StandardClass, N: 3, W: 2, R: 2, D: 2},
		cache: 8 << 20, lease: 2 * time.Second}, LevelReadLeases)
	var leaseHits, revoked int64
	for _, nd := range c.nodes {
		s := nd.gw.CacheStats()
		leaseHits += s.LeaseHits
		revoked += s.Revoked
	}
	t.Logf("%d hits under a lease, %d revokes", leaseHits, revoked)
	if leaseHits == 0 || revoked == 0 {
		t.Fatalf("leases not exercised: %d hits under a lease, %d revokes", leaseHits, revoked)
	}
}
