package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/volume"
)

// SnapshotInfo is a snapshot as /admin/v1/snapshots and /admin/v1/volume/snapshot show
// it. CommandBytes is what taking it wrote: one Raft command of the cluster map (its
// size does not depend on the volume's); Millis how long the call took, the wait for
// every storage node to apply it included.
type SnapshotInfo struct {
	clustermap.Snapshot
	Key          string  `json:"key"` // "volume@name": its NBD export name
	CommandBytes int     `json:"command_bytes,omitempty"`
	Millis       float64 `json:"millis,omitempty"`
}

// snapshots is the answer of /admin/v1/snapshots (?volume=NAME: that volume's), by key.
func (a *adminHandler) snapshots(vol string) []SnapshotInfo {
	m := a.mgr.Current()
	out := []SnapshotInfo{}
	for k, s := range m.Snapshots {
		if vol == "" || s.Volume == vol {
			out = append(out, SnapshotInfo{Snapshot: s, Key: k})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func newLayerID() string {
	var id [8]byte
	rand.Read(id[:])
	return hex.EncodeToString(id[:])
}

// snapshotAction serves /admin/v1/volume/{snapshot,clone,rollback} and the delete of a
// snapshot (name "volume@snapshot").
func (a *adminHandler) snapshotAction(ctx context.Context, action string, q map[string][]string) (any, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	name := get("name")
	switch action {
	case "snapshot":
		start := time.Now()
		c := clustermap.Command{Op: clustermap.OpSnapshotVolume, Name: name, Snapshot: get("snapshot"), Layer: newLayerID(), Size: time.Now().UnixNano()}
		b, _ := json.Marshal(c)
		nm, err := a.apply.Apply(ctx, c)
		if err != nil {
			return nil, err
		}
		// Once every storage node has the map, none takes a write to the frozen layer.
		if err := a.waitEpoch(ctx, nm); err != nil {
			return nil, err
		}
		k := clustermap.SnapshotKey(name, c.Snapshot)
		return SnapshotInfo{Snapshot: nm.Snapshots[k], Key: k, CommandBytes: len(b), Millis: float64(time.Since(start).Microseconds()) / 1000}, nil
	case "clone":
		v := clustermap.Volume{Name: name, ID: newLayerID(), Created: time.Now().UnixNano()}
		nm, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpCloneVolume, Volume: &v, Snapshot: get("source")})
		if err != nil {
			return nil, err
		}
		return a.volumeInfo(ctx, nm, nm.Volumes[name]), nil
	case "rollback":
		nm, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpRollbackVolume, Name: name, Snapshot: get("snapshot"), Layer: newLayerID()})
		if err != nil {
			return nil, err
		}
		return a.volumeInfo(ctx, nm, nm.Volumes[name]), nil
	case "delete":
		vol, snap, _ := strings.Cut(name, "@")
		if _, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpDeleteSnapshot, Name: vol, Snapshot: snap}); err != nil {
			return nil, err
		}
		return VolumeDelete{Done: true}, nil
	}
	return nil, errors.Errorf("", errors.NotExist, "no volume action %q", action)
}

// layerObjects is volume.Objects over the gateway: a layer's data objects are the keys
// "<layer>/<index>" of the volume bucket.
type layerObjects struct{ gw *gateway.Gateway }

func (o layerObjects) List(ctx context.Context, layer string, fn func(int64) error) error {
	after := ""
	for {
		res, err := o.gw.List(ctx, clustermap.VolumeBucket, object.ListOptions{Prefix: layer + "/", After: after, Max: 1000})
		if errors.Is(errors.NotExist, err) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, e := range res.Objects {
			i, err := strconv.ParseInt(strings.TrimPrefix(e.Key, layer+"/"), 16, 64)
			if err != nil {
				continue // not a data object
			}
			if err := fn(i); err != nil {
				return err
			}
		}
		if !res.Truncated {
			return nil
		}
		after = res.Next
	}
}

func (o layerObjects) Delete(ctx context.Context, layer string, i int64) error {
	err := o.gw.DeleteObject(ctx, clustermap.VolumeBucket, volume.ObjectKey(layer, i))
	if errors.Is(errors.NotExist, err) {
		return nil
	}
	return err
}

// reclaimLoop frees, on the Raft leader, the data objects of the map's Garbage layers
// (volume.Reclaim) and clears each entry once done (OpReclaimDone). An entry that fails
// is tried again at the next round.
func reclaimLoop(ctx context.Context, mgr *clustermap.Manager, objs volume.Objects, apply *applyer, log *slog.Logger) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m := mgr.Current()
		if !mgr.IsLeader() || len(m.Garbage) == 0 {
			continue
		}
		ids := make([]string, 0, len(m.Garbage))
		for id := range m.Garbage {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			g := m.Garbage[id]
			n, err := volume.Reclaim(ctx, m, objs, id, g)
			if err == nil {
				_, err = apply.Apply(ctx, clustermap.Command{Op: clustermap.OpReclaimDone, Layer: id, Seq: g.Seq})
			}
			if err != nil {
				log.Warn("reclaiming a volume layer's data objects failed; retrying", "layer", id, "err", err)
				continue
			}
			log.Info("reclaimed a volume layer's data objects", "layer", id, "all", g.All, "deleted", n)
		}
	}
}

// VolumeSpace is the answer of /admin/v1/volume-space: the data objects stored per
// layer (a volume's head or a frozen layer), and the Garbage entries waiting.
type VolumeSpace struct {
	Objects int64            `json:"objects"`
	Layers  map[string]int64 `json:"layers"`
	Garbage int              `json:"garbage"`
}

// volumeSpace counts the data objects of the volume bucket by layer (a listing of the
// whole bucket: for operators and tests, not a hot path).
func (a *adminHandler) volumeSpace(ctx context.Context) (VolumeSpace, error) {
	out := VolumeSpace{Layers: map[string]int64{}, Garbage: len(a.mgr.Current().Garbage)}
	after := ""
	for {
		res, err := a.gw.List(ctx, clustermap.VolumeBucket, object.ListOptions{After: after, Max: 1000})
		if errors.Is(errors.NotExist, err) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		for _, e := range res.Objects {
			l, _, _ := strings.Cut(e.Key, "/")
			out.Layers[l]++
			out.Objects++
		}
		if !res.Truncated {
			return out, nil
		}
		after = res.Next
	}
}
