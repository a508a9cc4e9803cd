package gateway

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/topology"
)

// DeleteRecord writes a record without a body to bucket/key's replicas, acknowledged by
// the delete quorum, and returns it: a delete marker (d.DeleteMarker, a version of its
// own if d.Versioned, else the key's null version), the purge of version d.HLC of a
// versioned key (d.Purged), or a tombstone of the key's null version. A zero d.HLC takes
// a new version from this node's clock. docs/design/versioning.md.
func (g *Gateway) DeleteRecord(ctx context.Context, bucket, key string, d object.Object) (*object.Object, error) {
	const op errors.Op = "gateway.DeleteRecord"
	defer g.cache.drop(bucket, key)
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	rec := replica.Deletion(&d)
	rec.Deleted = true
	if rec.Purged && (rec.HLC == 0 || !rec.Versioned) {
		return nil, errors.E(op, errors.Invalid, "a purge names a version of a versioned key")
	}
	if rec.HLC == 0 {
		rec.HLC = g.clock.Next()
	} else {
		g.clock.Observe(rec.HLC)
	}
	if rec.ModTime == 0 {
		rec.ModTime = time.Now().UnixNano()
	}
	ok, failed := g.fanOut(ctx, ts, cls.D, bucket, key, rec.HLC, always, func(ctx context.Context, t topology.Target) (*object.Object, error) {
		return g.replica(t).Delete(ctx, bucket, key, rec)
	})
	if len(ok) < cls.D {
		return nil, errors.E(op, quorumFailure("delete", ok, failed, cls.D, len(ts)))
	}
	return &rec, nil
}

// OpenVersion opens version hlc of bucket/key, current or not; hlc zero names the key's
// null version. The first holder that has the version serves it (versions never change
// but for their tags). A version that is a delete marker is a *object.DeleteMarkerError;
// one no holder has is NotExist with object.ErrNoSuchVersion.
func (g *Gateway) OpenVersion(ctx context.Context, bucket, key string, hlc uint64) (ObjectReader, error) {
	const op errors.Op = "gateway.OpenVersion"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	if hlc == 0 {
		n, err := g.nullVersion(ctx, bucket, key)
		if err != nil {
			return nil, errors.E(op, err)
		}
		hlc = n
	}
	cls, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, errors.E(op, err)
	}
	var lastErr error
	lacking := 0
	for _, t := range ts {
		if t.Down {
			continue
		}
		rd, err := g.replica(t).Open(ctx, bucket, key, replica.OpenOptions{Version: hlc})
		if err != nil {
			if !errors.Is(errors.NotExist, err) && !errors.Is(errors.Precondition, err) {
				lastErr = err
			} else {
				lacking++
			}
			continue
		}
		o := rd.Info()
		switch {
		case o.Deleted:
			rd.Close()
			return nil, errors.E(op, errors.NotExist, &object.DeleteMarkerError{Marker: o})
		case o.Tiered():
			rd.Close()
			return g.openTiered(o) // an archived version read by its id streams from the tier
		case o.Striped:
			rd.Close()
			return g.openStriped(o, bucket, key, func(rd ObjectReader, _, _ string) ObjectReader { return rd })
		}
		return g.failover(rd, t, ts, bucket, key), nil
	}
	// A read quorum lacking the version says it does not exist, as a read quorum says
	// of a key (any R holders meet every acknowledged write).
	if lastErr != nil && lacking < g.readQuorum(cls, ts) {
		return nil, errors.E(op, lastErr)
	}
	return nil, errors.E(op, errors.NotExist, object.ErrNoSuchVersion)
}

// nullVersion finds the HLC of bucket/key's null version in the listing of its versions
// (NotExist with object.ErrNoSuchVersion if it has none).
func (g *Gateway) nullVersion(ctx context.Context, bucket, key string) (uint64, error) {
	opts := object.VersionListOptions{Prefix: key, Max: 1000}
	for {
		res, err := g.ListVersions(ctx, bucket, opts)
		if err != nil {
			return 0, err
		}
		for _, v := range res.Versions {
			if v.Key == key && !v.Object.Versioned {
				return v.Object.HLC, nil
			}
			if v.Key > key {
				return 0, errors.E(errors.NotExist, object.ErrNoSuchVersion)
			}
		}
		if !res.Truncated || res.NextKey != key {
			return 0, errors.E(errors.NotExist, object.ErrNoSuchVersion)
		}
		opts.KeyMarker, opts.VersionMarker, opts.AfterNull = res.NextKey, res.NextVersion, res.NextNull
	}
}

// ListVersions returns a page of bucket's versions (keys in order, each key's versions
// newest first; Current marks each key's latest version), merged from every storage
// node's store as List merges listings: the same version from several holders once, a
// purge record removing its version, and of a key's null records only the newest.
func (g *Gateway) ListVersions(ctx context.Context, bucket string, opts object.VersionListOptions) (*object.VersionList, error) {
	const op errors.Op = "gateway.ListVersions"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	if g.cfg.Apply == nil {
		return g.cfg.Store.ListVersions(bucket, opts)
	}
	out := &object.VersionList{}
	if opts.Max <= 0 {
		return out, nil
	}
	ts := g.topo.ListTargets()
	if len(ts) == 0 {
		return nil, errors.E(op, errors.Transient, "no storage node is up")
	}
	spare := 0
	if tc, err := g.topo.Layout(g.cfg.Maps.Current()); err == nil {
		spare = min(tc.Class.W, tc.Class.D) - 1
	}
	resumeKey := ""
	if opts.VersionMarker != 0 || opts.AfterNull {
		resumeKey = opts.KeyMarker
	}
	ropts := opts
	ropts.Hidden = true
	latestSeen := map[string]bool{}
	for round := 0; round < 8; round++ {
		ress, errs := topology.Gather(ts, func(t topology.Target) (*object.VersionList, error) {
			return g.replica(t).ListVersions(ctx, bucket, ropts)
		})
		var live []*object.VersionList
		failed := 0
		for i, err := range errs {
			if err == nil {
				live = append(live, ress[i])
				continue
			}
			if !errors.Is(errors.Transient, err) && !errors.Is(errors.IO, err) {
				return nil, errors.E(op, err)
			}
			failed++
			g.topo.MarkSuspect(ts[i].ID)
		}
		if failed > spare {
			return nil, errors.E(op, errors.Transient, fmt.Errorf("%d of %d storage nodes did not answer the listing of versions, at most %d may be missing", failed, len(ts), spare))
		}
		page := mergeVersions(live, opts.Max-len(out.Versions)-len(out.CommonPrefixes), resumeKey, latestSeen)
		out.Versions = append(out.Versions, page.Versions...)
		out.CommonPrefixes = append(out.CommonPrefixes, page.CommonPrefixes...)
		if page.NextKey != "" {
			out.NextKey, out.NextVersion, out.NextNull = page.NextKey, page.NextVersion, page.NextNull
		}
		out.Truncated = page.Truncated
		if !page.Truncated || len(out.Versions)+len(out.CommonPrefixes) >= opts.Max {
			break
		}
		ropts.KeyMarker, ropts.VersionMarker, ropts.AfterNull = page.NextKey, page.NextVersion, page.NextNull
		resumeKey = ""
		if page.NextVersion != 0 {
			resumeKey = page.NextKey
		}
	}
	return out, nil
}

// vpos is a place in a listing of versions: keys in order, each key's versions newest
// first; a common prefix sorts as a key.
type vpos struct {
	key string
	hlc uint64
}

func (a vpos) before(b vpos) bool { return a.key < b.key || (a.key == b.key && a.hlc > b.hlc) }

// mergeVersions merges holders' pages of versions (each sorted, each up to the same
// number of entries past the same marker) into at most max entries and common prefixes.
// resumeKey is the key whose newest versions were on an earlier page; latestSeen notes
// the keys whose latest version was given, across the rounds of one listing.
func mergeVersions(ress []*object.VersionList, max int, resumeKey string, latestSeen map[string]bool) *object.VersionList {
	limit, limited := vpos{}, false
	for _, r := range ress {
		if !r.Truncated {
			continue
		}
		p := vpos{r.NextKey, r.NextVersion}
		if r.NextVersion == 0 {
			p.hlc = 0 // a common prefix: after every version of a key of that name
		}
		if !limited || p.before(limit) {
			limit, limited = p, true
		}
	}
	type item struct {
		key    string
		o      *object.Object
		prefix bool
	}
	byPos := map[vpos]*item{}
	nullOf := map[string]*object.Object{} // each key's newest null record
	for _, r := range ress {
		for _, e := range r.Versions {
			p := vpos{e.Key, e.Object.HLC}
			if limited && limit.before(p) {
				continue
			}
			it, ok := byPos[p]
			switch {
			case !ok:
				byPos[p] = &item{key: e.Key, o: e.Object}
			case e.Object.Purged && !it.o.Purged, !it.o.Purged && e.Object.MetaHLC > it.o.MetaHLC:
				it.o = e.Object
			}
			if !e.Object.Versioned && !e.Object.Purged {
				if n := nullOf[e.Key]; n == nil || e.Object.HLC > n.HLC {
					nullOf[e.Key] = e.Object
				}
			}
		}
		for _, cp := range r.CommonPrefixes {
			p := vpos{cp, ^uint64(0)}
			if limited && limit.before(p) {
				continue
			}
			byPos[p] = &item{key: cp, prefix: true}
		}
	}
	pos := make([]vpos, 0, len(byPos))
	for p := range byPos {
		pos = append(pos, p)
	}
	sort.Slice(pos, func(i, j int) bool { return pos[i].before(pos[j]) })
	page := &object.VersionList{}
	n := 0
	for _, p := range pos {
		it := byPos[p]
		if !it.prefix {
			o := it.o
			if o.Purged || (!o.Versioned && nullOf[it.key] != o) || !o.Visible() {
				continue // removed for good, an older null record, or a tombstone
			}
		}
		if n == max {
			page.Truncated = true
			return page
		}
		if it.prefix {
			page.CommonPrefixes = append(page.CommonPrefixes, it.key)
			page.NextKey, page.NextVersion, page.NextNull = it.key, 0, false
		} else {
			latest := it.key != resumeKey && !latestSeen[it.key]
			latestSeen[it.key] = true
			page.Versions = append(page.Versions, object.VersionListEntry{Key: it.key, Object: it.o, Current: latest})
			page.NextKey, page.NextVersion, page.NextNull = it.key, it.o.HLC, !it.o.Versioned
		}
		n++
	}
	if limited {
		page.Truncated = true
		page.NextKey, page.NextVersion, page.NextNull = limit.key, limit.hlc, false
		if limit.hlc == 0 {
			page.NextVersion = 0
		}
	}
	return page
}
