package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/topology"
	"github.com/cairnfs/cairn/internal/wire"
)

// VolumeInfo is a volume as /admin/v1/volumes shows it.
type VolumeInfo struct {
	clustermap.Volume
	// URI is the NBD address of the volume on its holder ("" while detached, or if the
	// holder serves no NBD).
	URI string `json:"uri,omitempty"`
}

// volumeInfo describes v, with its NBD address asked of its holder.
func (a *adminHandler) volumeInfo(ctx context.Context, m *clustermap.Map, v clustermap.Volume) VolumeInfo {
	vi := VolumeInfo{Volume: v}
	n, ok := m.Node(v.Holder)
	if !ok {
		return vi
	}
	addr, secure := a.nbdAddr, a.nbdTLS
	if n.ID != a.self {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var info mapInfo
		if a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathMapInfo}, &info) != nil {
			return vi
		}
		addr, secure = info.NBDAddr, info.NBDTLS
	}
	if addr != "" {
		scheme := "nbd"
		if secure {
			scheme = "nbds" // libnbd's and nbdinfo's name for NBD over TLS
		}
		vi.URI = (&url.URL{Scheme: scheme, Host: addr, Path: "/" + v.Name}).String()
	}
	return vi
}

// volumes is the answer of /admin/v1/volumes, sorted by name.
func (a *adminHandler) volumes(ctx context.Context) []VolumeInfo {
	m := a.mgr.Current()
	out := make([]VolumeInfo, 0, len(m.Volumes))
	for _, v := range m.Volumes {
		out = append(out, a.volumeInfo(ctx, m, v))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// VolumeDelete is the answer of one /admin/v1/volume/delete call: the data objects
// deleted by it, and whether the volume is gone (else call again).
type VolumeDelete struct {
	Deleted int64 `json:"deleted"`
	Done    bool  `json:"done"`
}

// volumeAction serves /admin/v1/volume/{create,resize,attach,detach,delete} and
// {snapshot,clone,rollback} (snapshots.go) (POST).
func (a *adminHandler) volumeAction(ctx context.Context, action string, q url.Values) (any, error) {
	name := q.Get("name")
	switch action {
	case "create":
		size, err := strconv.ParseInt(q.Get("size"), 10, 64)
		if err != nil {
			return nil, errors.E(errors.Invalid, "size must be a number of bytes")
		}
		var id [8]byte
		rand.Read(id[:])
		v := clustermap.Volume{Name: name, ID: hex.EncodeToString(id[:]), Size: size, BlockSize: clustermap.DefaultBlockSize,
			Class: q.Get("class"), Created: time.Now().UnixNano()}
		m, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpCreateVolume, Volume: &v})
		if err != nil {
			return nil, err
		}
		return a.volumeInfo(ctx, m, m.Volumes[name]), nil
	case "resize":
		size, err := strconv.ParseInt(q.Get("size"), 10, 64)
		if err != nil {
			return nil, errors.E(errors.Invalid, "size must be a number of bytes")
		}
		m, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpResizeVolume, Name: name, Size: size})
		if err != nil {
			return nil, err
		}
		return a.volumeInfo(ctx, m, m.Volumes[name]), nil
	case "attach":
		return a.attachVolume(ctx, name, q.Get("node"), q.Get("force") == "1")
	case "detach":
		// The next holder must find every write the old one answered durable.
		if err := a.syncJournals(ctx); err != nil {
			return nil, err
		}
		m, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpDetachVolume, Name: name, NodeID: q.Get("node")})
		if err != nil {
			return nil, err
		}
		return a.volumeInfo(ctx, m, m.Volumes[name]), nil
	case "delete":
		if strings.Contains(name, "@") {
			return a.snapshotAction(ctx, action, q)
		}
		return a.deleteVolume(ctx, name)
	case "snapshot", "clone", "rollback":
		return a.snapshotAction(ctx, action, q)
	}
	return nil, errors.Errorf("", errors.NotExist, "no volume action %q", action)
}

// attachVolume gives node the write lease of a volume. A lease held by another node moves
// only with force, and only once that node is marked down or out: the map then says the
// new epoch, and the call returns once every storage node that is not down or out has
// applied it, so none of them takes a write of the old lease any more (a down node checks
// that its map is fresh before it takes a volume write: volume.Fence).
func (a *adminHandler) attachVolume(ctx context.Context, name, node string, force bool) (VolumeInfo, error) {
	m := a.mgr.Current()
	if node == "" {
		node = a.self
	}
	v, ok := m.Volumes[name]
	if !ok {
		return VolumeInfo{}, errors.Errorf("", errors.NotExist, "no volume %s", name)
	}
	if force && v.Holder != "" && v.Holder != node {
		if h, ok := m.Node(v.Holder); ok && h.State != clustermap.StateDown && h.State != clustermap.StateOut {
			return VolumeInfo{}, errors.Errorf("", errors.Precondition, "volume %s is attached on node %s, which is %s: detach it there, or wait until it is marked down (cairn admin mark %s down) before --force", name, v.Holder, h.State, v.Holder)
		}
	}
	if v.Holder != "" && v.Holder != node {
		// A lease that moves: every write the old holder answered is made durable on
		// the holders that are up (a dead holder's unflushed writes may be lost, as NBD
		// allows: docs/design/volumes.md).
		if err := a.syncJournals(ctx); err != nil {
			return VolumeInfo{}, err
		}
	}
	nm, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpAttachVolume, Name: name, NodeID: node, Force: force})
	if err != nil {
		return VolumeInfo{}, err
	}
	if err := a.waitEpoch(ctx, nm, "the lease moved", "until they have, retry the attach (it is idempotent)"); err != nil {
		return VolumeInfo{}, err
	}
	return a.volumeInfo(ctx, nm, nm.Volumes[name]), nil
}

// syncJournals syncs the volume journal of every storage node that is not down or out
// (feature level 9): a snapshot, a detach and a lease that moves imply a FLUSH of every
// write answered before them.
func (a *adminHandler) syncJournals(ctx context.Context) error {
	m := a.mgr.Current()
	if m.Level < journalLevel {
		return nil
	}
	nodes := m.StorageNodes()
	errs := make(chan error, len(nodes))
	n := 0
	for _, nd := range nodes {
		if nd.State == clustermap.StateDown || nd.State == clustermap.StateOut {
			continue
		}
		n++
		go func() {
			r := a.gw.Replica(topology.Target{ID: nd.ID, Addr: nd.Addr, Local: a.gw.Topology().IsLocal(nd.ID)})
			js, ok := r.(replica.JournalSyncer)
			if !ok {
				errs <- nil
				return
			}
			if err := js.SyncJournal(ctx); err != nil {
				errs <- errors.E(errors.Transient, fmt.Errorf("node %s did not sync its volume journal (retry): %w", nd.ID, err))
				return
			}
			errs <- nil
		}()
	}
	// A node that does not answer (dying, cut off) is skipped: the writes it took are on
	// the other holders, whose journals are synced here (as a FLUSH skips a holder once it
	// is marked down); a snapshot must not wait for the cluster to mark it down.
	var first error
	ok := 0
	for range n {
		if err := <-errs; err != nil {
			a.log.Warn("a node did not sync its volume journal before a snapshot, detach or lease move; its copies catch up from the others", "err", err)
			if first == nil {
				first = err
			}
		} else {
			ok++
		}
	}
	if ok == 0 && first != nil {
		return first
	}
	return nil
}

// waitEpoch returns once every storage node that is not down or out (in m, or in the
// current map: one marked down meanwhile checks that its map is fresh before it takes a
// volume write) has map m's epoch (30 s at most). done says what m did, and retry what to
// do about it, for the error.
func (a *adminHandler) waitEpoch(ctx context.Context, m *clustermap.Map, done, retry string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var behind []string
		cur := a.mgr.Current()
		for _, n := range m.StorageNodes() {
			if n.State == clustermap.StateDown || n.State == clustermap.StateOut {
				continue
			}
			if c, ok := cur.Node(n.ID); ok && (c.State == clustermap.StateDown || c.State == clustermap.StateOut) {
				continue
			}
			var info mapInfo
			if n.ID == a.self {
				info.Epoch = a.mgr.Current().Epoch
			} else if err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathMapInfo}, &info); err != nil {
				behind = append(behind, n.ID+" ("+err.Error()+")")
				continue
			}
			if info.Epoch < m.Epoch {
				behind = append(behind, n.ID)
			}
		}
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Errorf("", errors.Transient, "%s (map epoch %d), but these storage nodes have not applied it yet: %v; %s", done, m.Epoch, behind, retry)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// deleteVolume deletes up to a page of a detached volume's data objects, and the volume
// once none is left.
func (a *adminHandler) deleteVolume(ctx context.Context, name string) (VolumeDelete, error) {
	m := a.mgr.Current()
	v, ok := m.Volumes[name]
	switch {
	case !ok:
		return VolumeDelete{}, errors.Errorf("", errors.NotExist, "no volume %s", name)
	case v.Holder != "":
		return VolumeDelete{}, errors.Errorf("", errors.Precondition, "volume %s is attached on node %s: detach it first", name, v.Holder)
	}
	var out VolumeDelete
	if cls, ok := m.Class(v.Class); ok && cls.EC() {
		n, more, err := a.vols.DeleteShards(ctx, v.ID)
		out.Deleted += int64(n)
		if err != nil || more {
			return out, err
		}
	}
	res, err := a.gw.List(ctx, clustermap.VolumeBucket, object.ListOptions{Prefix: v.ID + "/", Max: 1000})
	if err != nil && !errors.Is(errors.NotExist, err) {
		return out, err
	}
	if res != nil {
		for _, e := range res.Objects {
			if err := a.gw.DeleteObject(ctx, clustermap.VolumeBucket, e.Key); err != nil && !errors.Is(errors.NotExist, err) {
				return out, fmt.Errorf("deleting data object %s: %w", e.Key, err)
			}
			out.Deleted++
		}
		if res.Truncated {
			return out, nil
		}
	}
	if _, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpDeleteVolume, Name: name}); err != nil {
		return out, err
	}
	out.Done = true
	return out, nil
}
