package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/tier"
)

// TierInfo is a tier as /admin/v1/tiers shows it: without its credentials (Secret and
// AccessKey are cleared; Credentials says whether the tier has them).
type TierInfo struct {
	clustermap.Tier
	RecallMode  string `json:"recall_mode"`
	Credentials bool   `json:"credentials"`
}

// TierStatus is one device class with water marks in /admin/v1/tier/status: the
// capacity and use of its storage nodes that answered, and what is over its marks.
type TierStatus struct {
	clustermap.WaterMarks
	Nodes     int   `json:"nodes"`    // storage nodes of the device class
	Answered  int   `json:"answered"` // of them, those that reported their use
	Capacity  int64 `json:"capacity"` // bytes, the sum of the nodes' --capacity
	UsedBytes int64 `json:"used_bytes"`
	// Percent is UsedBytes of Capacity; OverHigh says it is past the high mark.
	Percent  float64 `json:"percent"`
	OverHigh bool    `json:"over_high"`
	// BytesToMove is what would bring the class under its low mark once it is past its
	// high mark (0 otherwise).
	BytesToMove int64 `json:"bytes_to_move"`
	// Migrating says some node of the class is migrating now; BytesDone and Objects sum
	// what the nodes' current or last runs moved, Errors what failed; RateBytes sums the
	// rates of the runs in progress; ETASeconds is BytesToMove over that rate (-1:
	// unknown). Nodes holds each node's own figures.
	Migrating  bool                  `json:"migrating"`
	BytesDone  int64                 `json:"bytes_done"`
	Objects    int64                 `json:"objects"`
	Errors     int64                 `json:"errors"`
	RateBytes  float64               `json:"rate_bytes_per_sec"`
	ETASeconds float64               `json:"eta_seconds"`
	PerNode    []repair.TierProgress `json:"per_node,omitempty"`
}

// probeTimeout bounds the check that a tier being added answers.
const probeTimeout = 5 * time.Second

// tierAction serves /admin/v1/tiers (GET: the list) and /admin/v1/tier/{add,remove,marks}
// (POST) and tier/status (GET).
func (a *adminHandler) tierAction(r *http.Request, action string) (any, error) {
	ctx, q := r.Context(), r.URL.Query()
	post := r.Method == http.MethodPost
	switch {
	case action == "" && !post:
		return tierList(a.mgr.Current()), nil
	case action == "status" && !post:
		return a.tierStatus(ctx), nil
	case action == "add" && post:
		var t clustermap.Tier
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&t); err != nil {
			return nil, errors.E(errors.Invalid, "malformed tier")
		}
		if err := a.addTier(ctx, t); err != nil {
			return nil, err
		}
		return tierList(a.mgr.Current()), nil
	case action == "remove" && post:
		if q.Get("force") != "true" {
			if err := a.tierEmpty(ctx, q.Get("name")); err != nil {
				return nil, err
			}
		}
		if _, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpRemoveTier, Name: q.Get("name")}); err != nil {
			return nil, err
		}
		return tierList(a.mgr.Current()), nil
	case action == "marks" && post:
		w := clustermap.WaterMarks{DeviceClass: q.Get("device_class"), Tier: q.Get("tier"), Paused: q.Get("paused") == "true"}
		var err1, err2 error
		w.High, err1 = strconv.Atoi(q.Get("high"))
		w.Low, err2 = strconv.Atoi(q.Get("low"))
		if err1 != nil || (w.High != 0 && err2 != nil) {
			return nil, errors.E(errors.Invalid, "water marks: high and low must be whole percentages (high 0 clears the marks)")
		}
		if _, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpSetWaterMarks, Marks: &w}); err != nil {
			return nil, err
		}
		return a.tierStatus(ctx), nil
	}
	return nil, errors.Errorf("", errors.NotExist, "no tier action %s %q", r.Method, action)
}

// addTier adds t once its endpoint answered: a tier that cannot be reached, whose bucket
// does not exist or that refuses the credentials is refused and the map is not changed.
// t.Secret arrives sealed (the CLI seals it with the cluster secret's box): the secret is
// in the clear only in this node's memory, for the probe.
func (a *adminHandler) addTier(ctx context.Context, t clustermap.Tier) error {
	m := a.mgr.Current()
	if _, ok := m.Tiers[t.Name]; ok {
		return errors.Errorf("", errors.Exist, "tier %s exists (remove it first to change it)", t.Name)
	}
	if t.Kind == clustermap.TierClass && m.Level < clustermap.TierBucketLevel {
		return errors.Errorf("", errors.Precondition, "tier %s not added, nothing changed: the cluster's feature level is %d and class tiers need %d (every node running this build; the leader raises the level once all of them answer): try again then",
			t.Name, m.Level, clustermap.TierBucketLevel)
	}
	t.Created = time.Now().UnixNano()
	// The state machine's checks first, so that a malformed tier is refused before any I/O.
	if _, err := clustermap.ApplyCommand(m, clustermap.Command{Op: clustermap.OpPutTier, Tier: &t}); err != nil {
		return err
	}
	if t.Kind == clustermap.TierS3 {
		if a.box == nil {
			return errors.E(errors.Precondition, "this node has no secret store")
		}
		sk, err := a.box.Open(secrets.TierKey, t.Name, t.Secret)
		if err != nil {
			return errors.Errorf("", errors.Invalid, "tier %s: the secret key is not sealed for this tier with this cluster's secret: %v", t.Name, err)
		}
		c, err := tier.New(tier.Config{Endpoint: t.Endpoint, Bucket: t.Bucket, Region: t.Region, AccessKey: t.AccessKey, SecretKey: string(sk), HeaderTimeout: probeTimeout})
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		if err := c.Probe(pctx); err != nil {
			return errors.Errorf("", errors.Precondition, "tier %s not added, nothing changed: %v", t.Name, err)
		}
	}
	_, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpPutTier, Tier: &t})
	return err
}

func tierList(m *clustermap.Map) []TierInfo {
	out := make([]TierInfo, 0, len(m.Tiers))
	for _, t := range m.Tiers {
		ti := TierInfo{Tier: t, RecallMode: t.RecallMode(), Credentials: t.Secret != ""}
		ti.Secret, ti.AccessKey = "", ""
		out = append(out, ti)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// tierStatus reports each device class with water marks, from its storage nodes' own
// accounting of their used bytes (NodeStats.UsedBytes) and their capacity in the map.
func (a *adminHandler) tierStatus(ctx context.Context) []TierStatus {
	st := a.status(ctx)
	m := st.Map
	stats := map[string]*NodeStats{}
	for _, n := range st.Nodes {
		if n.Stats != nil {
			stats[n.ID] = n.Stats
		}
	}
	out := make([]TierStatus, 0, len(m.WaterMarks))
	for _, w := range m.WaterMarks {
		ts := TierStatus{WaterMarks: w, ETASeconds: -1}
		for _, n := range m.StorageNodes() {
			if n.DeviceClass != w.DeviceClass || n.State == clustermap.StateOut {
				continue
			}
			ts.Nodes++
			ts.Capacity += n.Capacity
			if ns, ok := stats[n.ID]; ok {
				ts.Answered++
				ts.UsedBytes += ns.UsedBytes
				if p := ns.Tier; p != nil {
					ts.Migrating = ts.Migrating || p.Running
					ts.BytesDone += p.Done
					ts.Objects += p.Objects
					ts.Errors += p.Errors
					if p.Running {
						ts.RateBytes += p.RateBytes
					}
					ts.PerNode = append(ts.PerNode, *p)
				}
			}
		}
		if ts.Capacity > 0 {
			ts.Percent = 100 * float64(ts.UsedBytes) / float64(ts.Capacity)
			ts.OverHigh = ts.UsedBytes*100 > ts.Capacity*int64(w.High)
			if ts.OverHigh {
				ts.BytesToMove = ts.UsedBytes - ts.Capacity*int64(w.Low)/100
			}
		}
		if ts.Migrating && ts.RateBytes > 0 {
			ts.ETASeconds = float64(ts.BytesToMove) / ts.RateBytes
		}
		out = append(out, ts)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DeviceClass < out[j].DeviceClass })
	return out
}

// tierEmpty refuses the removal of an external tier whose bucket still holds objects
// (archived versions whose stubs would point at a tier the map no longer has) or that
// cannot be asked.
func (a *adminHandler) tierEmpty(ctx context.Context, name string) error {
	m := a.mgr.Current()
	t, ok := m.Tiers[name]
	if !ok {
		return nil // the state machine answers for an unknown tier
	}
	if t.Kind == clustermap.TierClass {
		if _, ok := m.Buckets[clustermap.TierBucket]; !ok {
			return nil
		}
		res, err := a.gw.List(ctx, clustermap.TierBucket, object.ListOptions{Prefix: name + "/", Max: 1})
		switch {
		case err != nil:
			return errors.Errorf("", errors.Precondition, "tier %s not removed: cannot tell whether it still holds archived objects (%v); --force removes it anyway", name, err)
		case len(res.Objects) > 0:
			return errors.Errorf("", errors.Precondition, "tier %s not removed: it still holds archived objects (they would be unreadable: read them to recall them first); --force removes it anyway", name)
		}
		return nil
	}
	if a.box == nil {
		return errors.E(errors.Precondition, "this node has no secret store")
	}
	sk, err := a.box.Open(secrets.TierKey, t.Name, t.Secret)
	if err != nil {
		return err
	}
	c, err := tier.New(tier.Config{Endpoint: t.Endpoint, Bucket: t.Bucket, Region: t.Region, AccessKey: t.AccessKey, SecretKey: string(sk), HeaderTimeout: probeTimeout})
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	empty, err := c.Empty(pctx)
	switch {
	case err != nil:
		return errors.Errorf("", errors.Precondition, "tier %s not removed: cannot tell whether it still holds archived objects (%v); --force removes it anyway", name, err)
	case !empty:
		return errors.Errorf("", errors.Precondition, "tier %s not removed: its bucket %s still holds objects (archived versions would be unreadable: read them to recall them first); --force removes it anyway", name, t.Bucket)
	}
	return nil
}
