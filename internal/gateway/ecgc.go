package gateway

import (
	"context"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/stripe"
	"github.com/cairnfs/cairn/internal/topology"
)

// Collection of the shards of multipart parts. A part of an erasure-coded upload is
// striped on its own (partStripeKey: hash/UPLOAD.N/i); its shards are read only through a
// record that references the upload (Stripe.Upload), which only the upload's completion
// writes. So once the upload is gone (completed or aborted) from every holder of the
// object and no holder's current record references it, nothing can read them again: the
// upload was aborted, or the object it made was replaced or deleted. collectShards
// (ec.go) removes them then, and keeps them whenever a holder cannot be asked.

// uploadStripesNeeded decides whether the stripes of the parts of upload (of bucket/key)
// can still be read. ok false means no proof either way: a holder is down or did not
// answer, or the upload is still in progress somewhere; keep them all. ok true with a nil
// set means none can be read again. Otherwise the set names the stripes that a holder's
// current record reads (the parts listed when the upload was completed): the others (parts
// left out of the completion, stripes beyond a part's end after it was sent again
// smaller) cannot be read either.
//
// The holders are the object's current holders and the nodes that may still hold it
// (draining, or holders under a placement replaced a short while ago): every one must
// answer. The checks run in this order, and the order is what makes the rule safe against
// a completion running meanwhile:
//
//  1. the upload, on every holder: absent everywhere (NotExist);
//  2. then the current record, on every holder: none references the upload.
//
// A holder completes an upload in one index batch that removes the upload and writes the
// object's record (store.CompleteUploadVersion; the gateway's CompleteUpload only fans
// that out), and nothing else writes a record that references an upload but a copy of
// such a record. (A holder that missed the completion drops the upload when it receives
// the upload's end record, store.EndUpload, and can never complete it afterwards; the
// end record exists only once some holder completed, and those holders keep the record.) So once step 1
// saw the upload absent on a holder, that holder's completion is already committed, or
// will never happen there; a record referencing the upload is then either already on that
// holder, where step 2 (later) sees it or a newer record that replaced it, or nowhere at
// all (an abort, or a completion superseded by a newer write). A copy by sync or hinted
// retry only spreads a record some holder already has, which step 2 sees too. In the
// other order, step 2 could see no record, a completion commit, and step 1 then see the
// upload gone: the parts of a live object would be collected.
func (g *Gateway) uploadStripesNeeded(ctx context.Context, bucket, key, upload string) (needed map[string]bool, ok bool) {
	_, ts, err := g.topo.Replicas(bucket, key)
	if err != nil {
		return nil, false
	}
	ts = append(ts, g.topo.FormerReplicas(bucket, key, ts)...)
	for _, t := range ts {
		if t.Down {
			return nil, false
		}
	}
	_, errs := topology.Gather(ts, func(t topology.Target) (struct{}, error) {
		ans, err := g.replica(t).Parts(ctx, bucket, key, upload, 0, 1)
		if err == nil && ans.End != nil {
			err = errors.E(errors.NotExist, object.ErrNoSuchUpload) // ended there: its end record is all that is left
		}
		return struct{}{}, err
	})
	for _, err := range errs {
		if !errors.Is(errors.NotExist, err) { // nil: in progress there; else: no answer
			return nil, false
		}
	}
	recs, errs := topology.Gather(ts, func(t topology.Target) (*object.Object, error) { return g.replica(t).Stat(ctx, bucket, key) })
	for i, o := range recs {
		switch err := errs[i]; {
		case errors.Is(errors.NotExist, err):
		case err != nil:
			return nil, false
		case o.Striped && !o.Deleted && o.Stripe.Upload == upload:
			if len(o.Stripe.Parts) != max(len(o.PartSizes), 1) { // one part: a rewrite (relayout-V)
				return nil, false // a record this gateway cannot read: keep what it may need
			}
			if needed == nil {
				needed = map[string]bool{}
			}
			for _, name := range stripe.Names(bucket, key, o) {
				needed[name] = true
			}
		}
	}
	return needed, true
}

// versionRewritten reports whether version v of bucket/key was rewritten into another
// layout (policy apply) on every holder, so that the stripes its first write made
// (hash/V/i) can never be read again: every holder, current or former, answers with
// version v stored whole or under a rewrite's tag. ts are the current holders.
func (g *Gateway) versionRewritten(ctx context.Context, bucket, key string, ts []topology.Target, v uint64) bool {
	ts = append(ts, g.topo.FormerReplicas(bucket, key, ts)...)
	for _, t := range ts {
		if t.Down {
			return false
		}
	}
	recs, errs := topology.Gather(ts, func(t topology.Target) (*object.Object, error) { return g.replica(t).Stat(ctx, bucket, key) })
	for i, o := range recs {
		if errs[i] != nil || o.HLC != v || o.Deleted || (o.Striped && o.Stripe.Upload == "") {
			return false
		}
	}
	return len(recs) > 0
}
