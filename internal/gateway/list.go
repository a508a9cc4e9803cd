package gateway

import (
	"context"
	"fmt"
	"sort"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/topology"
)

// List returns a page of bucket's objects, merged from every storage node's store: for
// each key the newest record wins, and keys whose newest record is a tombstone are left
// out. A page is complete up to the smallest last entry of the nodes whose answers were
// truncated; pages that come out short because of tombstones are topped up.
func (g *Gateway) List(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error) {
	res, err := g.list(ctx, bucket, opts)
	if err != nil {
		return nil, err
	}
	// Archived objects of a restore-mode tier list as GLACIER, as HEAD says (tier.go).
	for i, e := range res.Objects {
		if e.Object != nil && e.Object.Tiered() {
			res.Objects[i].Object = g.restoreView(ctx, bucket, e.Key, e.Object, false)
		}
	}
	return res, nil
}

func (g *Gateway) list(ctx context.Context, bucket string, opts object.ListOptions) (*object.ListResult, error) {
	const op errors.Op = "gateway.List"
	if err := g.ensureBucket(ctx, bucket); err != nil {
		return nil, errors.E(op, err)
	}
	if g.cfg.Apply == nil {
		return g.cfg.Store.List(bucket, opts)
	}
	out := &object.ListResult{}
	if opts.Max <= 0 {
		return out, nil
	}
	ts := g.topo.ListTargets()
	if len(ts) == 0 {
		return nil, errors.E(op, errors.Transient, "no storage node is up")
	}
	need, spare := 1, 0
	if tc, err := g.topo.Layout(g.cfg.Maps.Current()); err == nil {
		need = tc.Class.N
		// Every acknowledged write is on at least W storage nodes and every acknowledged
		// delete on at least D: a listing from all nodes but fewer than min(W, D) of them
		// still sees every object and every delete.
		spare = min(tc.Class.W, tc.Class.D) - 1
	}
	want := opts.Max
	ropts := opts
	ropts.Tombstones = true
	for round := 0; round < 8; round++ {
		ress, errs := topology.Gather(ts, func(t topology.Target) (*object.ListResult, error) { return g.replica(t).List(ctx, bucket, ropts) })
		var failed []int
		for i, err := range errs {
			if err != nil {
				failed = append(failed, i)
			}
		}
		if len(failed) > 0 {
			// A listing that silently missed a node could miss objects only it holds: it
			// goes on without nodes that do not answer (not yet marked down) only while
			// they are fewer than min(W, D).
			if len(failed) > spare {
				return nil, errors.E(op, errors.Transient, fmt.Errorf("%d of %d storage nodes did not answer the listing, at most %d may be missing (%w)",
					len(failed), len(ts), spare, errs[failed[0]]))
			}
			for _, err := range errs {
				if err != nil && !errors.Is(errors.Transient, err) && !errors.Is(errors.IO, err) {
					return nil, errors.E(op, err)
				}
			}
			var live []topology.Target
			var liveRes []*object.ListResult
			for i, t := range ts {
				if errs[i] == nil {
					live, liveRes = append(live, t), append(liveRes, ress[i])
				} else {
					g.topo.MarkSuspect(t.ID)
					g.log.Debug("listing without a node that does not answer", "node", t.ID, "err", errs[i])
				}
			}
			ts, ress, spare = live, liveRes, spare-len(failed)
		}
		page, truncated, next := mergeList(ress, want-len(out.Objects)-len(out.CommonPrefixes))
		out.Objects = append(out.Objects, page.Objects...)
		prefixes, err := g.livePrefixes(ctx, bucket, page.CommonPrefixes, prefixReports(ress), min(need, len(ts)))
		if err != nil {
			return nil, errors.E(op, err)
		}
		out.CommonPrefixes = append(out.CommonPrefixes, prefixes...)
		if next != "" {
			out.Next = next
		}
		out.Truncated = truncated
		if !truncated || len(out.Objects)+len(out.CommonPrefixes) >= want {
			break
		}
		ropts.After = next
	}
	return out, nil
}

// prefixReports counts, for each common prefix, the nodes that reported it.
func prefixReports(ress []*object.ListResult) map[string]int {
	n := map[string]int{}
	for _, r := range ress {
		for _, p := range r.CommonPrefixes {
			n[p]++
		}
	}
	return n
}

// livePrefixes drops the common prefixes under which no live key remains. A node rolls up
// only its own live keys, so a prefix reported by every replica of some key is real; one
// reported by fewer nodes than a key has replicas may come from a stale replica whose key
// was deleted elsewhere, and is checked with a flat listing (which merges tombstones).
func (g *Gateway) livePrefixes(ctx context.Context, bucket string, prefixes []string, reports map[string]int, need int) ([]string, error) {
	out := prefixes[:0:0]
	for _, p := range prefixes {
		if reports[p] >= need {
			out = append(out, p)
			continue
		}
		res, err := g.List(ctx, bucket, object.ListOptions{Prefix: p, Max: 1})
		if err != nil {
			return nil, err
		}
		if len(res.Objects) > 0 || res.Truncated {
			out = append(out, p) // a live key, or too many tombstones to tell: keep it
		}
	}
	return out, nil
}

// mergeList merges replica listings (each sorted, each holding up to Max entries past the
// same After) into at most max live entries, and says whether more may follow and the
// last key or prefix considered.
func mergeList(ress []*object.ListResult, max int) (page *object.ListResult, truncated bool, next string) {
	// Entries past the smallest "last" of a truncated answer are not known from every node.
	limit, limited := "", false
	for _, r := range ress {
		if r.Truncated && (!limited || r.Next < limit) {
			limit, limited = r.Next, true
		}
	}
	type item struct {
		key    string
		o      *object.Object
		prefix bool
	}
	byKey := map[string]*item{}
	for _, r := range ress {
		for _, e := range r.Objects {
			if limited && e.Key > limit {
				continue
			}
			if it, ok := byKey[e.Key]; !ok || (!it.prefix && e.Object.Newer(it.o)) {
				byKey[e.Key] = &item{key: e.Key, o: e.Object}
			}
		}
		for _, p := range r.CommonPrefixes {
			if limited && p > limit {
				continue
			}
			byKey[p] = &item{key: p, prefix: true}
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	page = &object.ListResult{}
	n := 0
	for _, k := range keys {
		it := byKey[k]
		switch {
		case it.prefix:
			if n == max {
				return page, true, page.Next
			}
			page.CommonPrefixes = append(page.CommonPrefixes, k)
		case !it.o.Deleted:
			if n == max {
				return page, true, page.Next
			}
			page.Objects = append(page.Objects, object.ListEntry{Key: k, Object: it.o})
		default:
			continue // a tombstone hides the key
		}
		page.Next = k
		n++
	}
	if limited {
		return page, true, limit // everything up to limit was considered
	}
	return page, false, page.Next
}
