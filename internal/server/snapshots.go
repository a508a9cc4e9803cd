package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/nbd"
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
		// A snapshot implies a FLUSH: every write answered before it is durable in it.
		if err := a.syncJournals(ctx); err != nil {
			return nil, err
		}
		c := clustermap.Command{Op: clustermap.OpSnapshotVolume, Name: name, Snapshot: get("snapshot"), Layer: newLayerID(), Size: time.Now().UnixNano()}
		b, _ := json.Marshal(c)
		nm, err := a.apply.Apply(ctx, c)
		if err != nil {
			return nil, err
		}
		// Once every storage node has the map, none takes a write to the frozen layer.
		k := clustermap.SnapshotKey(name, c.Snapshot)
		if err := a.waitEpoch(ctx, nm, "snapshot "+k+" was taken", "until they have, a write sent to them may still land in the snapshot; it need not be taken again (cairn volume snapshots)"); err != nil {
			return nil, err
		}
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

// VolumeLayout is the answer of /admin/v1/volume-layout: the data objects a volume or
// snapshot may have data in (every index some layer of its chain has), or, with since
// (a snapshot of the same volume under it), those that may differ from since's.
type VolumeLayout struct {
	Name      string  `json:"name"`
	Size      int64   `json:"size"`
	BlockSize int64   `json:"block_size"`
	Indices   []int64 `json:"indices"`
}

// volumeLayout lists the layers of name's chain above since's layer (all of them
// without since): only they can hold what differs.
func (a *adminHandler) volumeLayout(ctx context.Context, name, since string) (VolumeLayout, error) {
	m := a.mgr.Current()
	var top, parent, vol string
	var out VolumeLayout
	if v, _, ok := strings.Cut(name, "@"); ok {
		sn, ok := m.Snapshots[name]
		if !ok {
			return out, errors.Errorf("", errors.NotExist, "no snapshot %s", name)
		}
		top, parent, vol = sn.Layer, m.Layers[sn.Layer].Parent, v
		out = VolumeLayout{Name: name, Size: sn.Size, BlockSize: sn.BlockSize}
	} else {
		v, ok := m.Volumes[name]
		if !ok {
			return out, errors.Errorf("", errors.NotExist, "no volume %s", name)
		}
		top, parent, vol = v.ID, v.Parent, name
		out = VolumeLayout{Name: name, Size: v.Size, BlockSize: v.BlockSize}
	}
	stop := ""
	if since != "" {
		key := since
		if !strings.Contains(key, "@") {
			key = clustermap.SnapshotKey(vol, since)
		}
		sn, ok := m.Snapshots[key]
		if !ok {
			return out, errors.Errorf("", errors.NotExist, "no snapshot %s", key)
		}
		stop = sn.Layer
		if top == stop || !slices.Contains(m.Chain(parent), stop) {
			return out, errors.Errorf("", errors.Invalid, "snapshot %s is not older than %s in its chain: --since needs a snapshot %s was taken after (cairn volume snapshots %s)", key, name, name, vol)
		}
	}
	seen := map[int64]bool{}
	objs := layerObjects{a.gw}
	for _, l := range append([]string{top}, m.Chain(parent)...) {
		if l == stop {
			break
		}
		if err := objs.List(ctx, l, func(i int64) error { seen[i] = true; return nil }); err != nil {
			return out, err
		}
	}
	out.Indices = make([]int64, 0, len(seen))
	for i := range seen {
		out.Indices = append(out.Indices, i)
	}
	slices.Sort(out.Indices)
	return out, nil
}

// HdrDataSHA256 is the SHA-256 of a /admin/v1/volume-object answer's body: the answer's
// headers are signed, so the client checks the bytes against it.
const HdrDataSHA256 = "X-Cairn-Data-Sha256"

// volumeObject serves /admin/v1/volume-object?name=&index=: data object index of a
// snapshot or a detached volume, whole (zeroes where it has none), cut at the volume's
// end.
func (a *adminHandler) volumeObject(w http.ResponseWriter, r *http.Request, name, index string) error {
	i, err := strconv.ParseInt(index, 10, 64)
	if err != nil || i < 0 {
		return errors.E(errors.Invalid, "index must be a data object's number")
	}
	rd, closeFn, err := a.vols.OpenRead(r.Context(), name)
	if err != nil {
		return err
	}
	defer closeFn()
	m := a.mgr.Current()
	size, bs := int64(0), int64(0)
	if sn, ok := m.Snapshots[name]; ok {
		size, bs = sn.Size, sn.BlockSize
	} else if v, ok := m.Volumes[name]; ok {
		size, bs = v.Size, v.BlockSize
	}
	if bs == 0 || i >= (size+bs-1)/bs {
		return errors.Errorf("", errors.Invalid, "data object %d is past the end of %s", i, name)
	}
	buf := make([]byte, min(bs, size-i*bs))
	if _, err := rd.ReadAt(buf, i*bs); err != nil {
		return err
	}
	sum := sha256.Sum256(buf)
	w.Header().Set(HdrDataSHA256, hex.EncodeToString(sum[:]))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(buf)))
	w.Write(buf)
	return nil
}

// volumeWrite serves POST /admin/v1/volume/write?name=&off=: writes the body (at most a
// data object's size) into a volume this node holds the lease of (cairn volume import).
// A body of zeroes becomes WRITE_ZEROES: holes stay thin.
func (a *adminHandler) volumeWrite(r *http.Request, name, offStr string) (any, error) {
	off, err := strconv.ParseInt(offStr, 10, 64)
	if err != nil || off < 0 {
		return nil, errors.E(errors.Invalid, "off must be a byte offset")
	}
	v, ok := a.mgr.Current().Volumes[name]
	if !ok {
		return nil, errors.Errorf("", errors.NotExist, "no volume %s", name)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, v.BlockSize+1))
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	if int64(len(body)) > v.BlockSize || off > v.Size || int64(len(body)) > v.Size-off {
		return nil, errors.Errorf("", errors.Invalid, "a write of %d bytes at %d: at most one data object (%d bytes), within the volume (%d bytes)", len(body), off, v.BlockSize, v.Size)
	}
	d, _, err := a.vols.Open(r.Context(), name)
	if err != nil {
		return nil, err
	}
	defer d.(io.Closer).Close()
	if volume.IsZero(body) {
		err = d.(nbd.Zeroer).WriteZeroes(off, int64(len(body)))
	} else {
		_, err = d.WriteAt(body, off)
	}
	if err == nil {
		err = d.Flush() // an import's answered write is durable (the volume journal)
	}
	if err != nil {
		return nil, err
	}
	return map[string]int{"written": len(body)}, nil
}
