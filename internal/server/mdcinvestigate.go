package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/mdc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/wire"
)

// The investigation of a link (LeoFS's "investigating", docs/design/mdc.md): both
// clusters sum a hash of every record of the linked buckets per partition of
// investigatePartitions (package mdc's digests, over the records every storage node up
// holds), the partitions whose sums differ exchange their records, and each side gets
// what it lacks or holds older: this side pushes its newer records in a batch, and asks
// the remote to push its own (wire.PathMDCPush). It covers what the queues cannot: a
// change stacked only on a node that was marked out and lost, an entry lost otherwise,
// a link made after the data was written.
const investigatePartitions = 256

// investigateGroup is how many partitions' records are in memory at a time: the digests
// are summed, and the differing partitions' records exchanged, that many partitions at
// a time (each group one scan of every storage node's records). The records of a
// group, this side's and the remote's, are what an investigation holds: about
// investigateGroup/investigatePartitions (1/16) of the linked buckets' records each.
const investigateGroup = 16

// clusterDigests returns the digests of link l's buckets per partition of
// `partitions`, summed investigateGroup partitions at a time.
func (r *replicator) clusterDigests(ctx context.Context, l clustermap.Link, partitions int) ([]uint64, error) {
	if partitions <= 0 || partitions > 1<<16 {
		return nil, errors.E(errors.Invalid, "partitions: 1 to 65536")
	}
	ds := make([]uint64, partitions)
	for lo := 0; lo < partitions; lo += investigateGroup {
		var parts []int
		for p := lo; p < min(lo+investigateGroup, partitions); p++ {
			parts = append(parts, p)
		}
		es, err := r.clusterEntries(ctx, l, partitions, parts)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			ds[mdc.Partition(e.Bucket, e.Key, partitions)] += mdc.Hash(e)
		}
	}
	return ds, nil
}

// Investigation is the progress of the last investigation of a link on this node.
type Investigation struct {
	Link       string    `json:"link"`
	Running    bool      `json:"running"`
	Partitions int       `json:"partitions"`
	Compared   int       `json:"compared"`  // partitions whose records were exchanged
	Differing  int       `json:"differing"` // partitions whose digests differed
	Pushed     int       `json:"pushed"`    // records sent to the remote
	Pulled     int       `json:"pulled"`    // records the remote sent here
	Refused    int       `json:"refused"`   // records either side refused (Object Lock...)
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished,omitzero"`
	Err        string    `json:"error,omitempty"`
}

type investigations struct {
	mu sync.Mutex
	by map[string]*Investigation
}

func (iv *investigations) list() []Investigation {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	var out []Investigation
	for _, v := range iv.by {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b Investigation) int { return strings.Compare(a.Link, b.Link) })
	return out
}

func (iv *investigations) update(link string, f func(*Investigation)) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	f(iv.by[link])
}

// begin marks an investigation of link as running; false if one already is.
func (iv *investigations) begin(link string) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.by == nil {
		iv.by = map[string]*Investigation{}
	}
	if v := iv.by[link]; v != nil && v.Running {
		return false
	}
	iv.by[link] = &Investigation{Link: link, Running: true, Partitions: investigatePartitions, Started: time.Now()}
	return true
}

// Investigate starts an investigation of link in the background (NotExist: no such
// link; Exist: one is running).
func (r *replicator) Investigate(ctx context.Context, link string) error {
	l, ok := r.mgr.Current().Links[link]
	if !ok {
		return errors.Errorf("", errors.NotExist, "no replication link %q", link)
	}
	if !r.inv.begin(link) {
		return errors.Errorf("", errors.Exist, "an investigation of link %s is running", link)
	}
	go r.investigate(context.WithoutCancel(ctx), l)
	return nil
}

// investigate compares this cluster with link l's remote and repairs both sides.
func (r *replicator) investigate(ctx context.Context, l clustermap.Link) {
	err := r.investigateOnce(ctx, l)
	r.inv.update(l.Name, func(v *Investigation) {
		v.Running, v.Finished = false, time.Now()
		if err != nil {
			v.Err = err.Error()
		}
	})
	if err != nil {
		r.log.Warn("investigation failed", "link", l.Name, "err", err)
	} else {
		v := r.inv.list()
		for _, x := range v {
			if x.Link == l.Name {
				r.log.Info("investigation done", "link", l.Name, "differing", x.Differing, "pushed", x.Pushed, "pulled", x.Pulled, "refused", x.Refused)
			}
		}
	}
}

func (r *replicator) investigateOnce(ctx context.Context, l clustermap.Link) error {
	const P = investigatePartitions
	ld, err := r.clusterDigests(ctx, l, P)
	if err != nil {
		return err
	}
	var rd []uint64
	q, _ := json.Marshal(digestQuery{Partitions: P})
	if _, err := r.post(ctx, l, wire.PathMDCDigests, q, nil, &rd); err != nil {
		return fmt.Errorf("the remote's digests: %w", err)
	}
	if len(rd) != P {
		return errors.E(errors.Invalid, "the remote answered digests of another partition count")
	}
	var differ []int
	for p := range P {
		if ld[p] != rd[p] {
			differ = append(differ, p)
		}
	}
	r.inv.update(l.Name, func(v *Investigation) { v.Differing = len(differ) })
	for len(differ) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		parts := differ[:min(investigateGroup, len(differ))]
		differ = differ[len(parts):]
		var remote []object.VersionEntry
		q, _ := json.Marshal(digestQuery{Partitions: P, Parts: parts, Entries: true})
		if _, err := r.post(ctx, l, wire.PathMDCDigests, q, nil, &remote); err != nil {
			return fmt.Errorf("the remote's records: %w", err)
		}
		mine, err := r.clusterEntries(ctx, l, P, parts)
		if err != nil {
			return err
		}
		push, pull := mdc.Diff(mine, remote)
		var pushed, pulled, refused int
		if len(push) > 0 && l.Send {
			ans, err := r.post(ctx, l, wire.PathMDCApply, nil, func(w io.Writer) error { return r.writeBatch(ctx, entriesOf(push), w) })
			if err != nil {
				return fmt.Errorf("pushing %d records: %w", len(push), err)
			}
			pushed, refused = ans.Applied, ans.Refused
		}
		if len(pull) > 0 {
			body, _ := json.Marshal(pull)
			ans, err := r.post(ctx, l, wire.PathMDCPush, body, nil)
			if err != nil && !errors.Is(errors.Precondition, err) {
				return fmt.Errorf("pulling %d records: %w", len(pull), err)
			}
			if ans != nil {
				pulled, refused = ans.Applied, refused+ans.Refused
			}
		}
		r.inv.update(l.Name, func(v *Investigation) {
			v.Compared += len(parts)
			v.Pushed += pushed
			v.Pulled += pulled
			v.Refused += refused
		})
	}
	return nil
}

// runInvestigations investigates every link every interval, on the first storage node
// up of the map (by id), so that one node of the cluster does it.
func (r *replicator) runInvestigations(ctx context.Context, self string, interval time.Duration) {
	if interval <= 0 {
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
		m := r.mgr.Current()
		first := ""
		for _, n := range m.Nodes {
			if n.HasRole(clustermap.RoleStorage) && n.State == clustermap.StateUp {
				first = n.ID
				break
			}
		}
		if first != self {
			continue
		}
		for name, l := range m.Links {
			if l.Paused || !r.inv.begin(name) {
				continue
			}
			r.investigate(ctx, l)
		}
	}
}
