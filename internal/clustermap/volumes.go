package clustermap

import (
	"regexp"
	"sort"

	"github.com/cairnfs/cairn/internal/errors"
)

// Volume is a block volume (docs/design/volumes.md): its data objects, of BlockSize bytes
// each, are the keys "<ID>/<index, 16 hex digits>" of VolumeBucket, written in place by
// the one node holding the volume's write lease.
type Volume struct {
	Name      string `json:"name"`
	ID        string `json:"id"` // 16 hex digits, unique: names the data objects
	Size      int64  `json:"size"`
	BlockSize int64  `json:"block_size"`
	Class     string `json:"class,omitempty"` // the storage class of the data objects ("": STANDARD)
	Created   int64  `json:"created"`         // unix nanoseconds
	// Holder is the node that holds the write lease ("" while the volume is detached);
	// Epoch counts the leases given: each attach raises it, every write carries it in its
	// order, and holders refuse writes of an older epoch.
	Holder string `json:"holder,omitempty"`
	Epoch  uint64 `json:"epoch,omitempty"`
	// Parent is the frozen layer under the volume's head ("": none, the volume was
	// created empty and never snapshotted). ID names the head, the one writable layer;
	// a data object the head lacks reads as the newest layer of the chain Parent,
	// Parent's parent... that has it (docs/design/volume-snapshots.md).
	Parent string `json:"parent,omitempty"`
	// Nodes, for a volume in an erasure-coded class, are the storage nodes its shards are
	// placed on, fixed when it is created (the class's placement nodes then): a node
	// added later does not move them (internal/volume ec.go).
	Nodes []string `json:"nodes,omitempty"`
}

// Layer is a frozen layer of data objects ("<ID>/<index>" of VolumeBucket): a volume's
// head as it was when it was snapshotted. It never changes again; a layer is kept while
// a snapshot names it or another layer or a volume has it as parent.
type Layer struct {
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	Volume string `json:"volume"` // the volume it was the head of
}

// Snapshot is a named, read-only state of a volume: its layer and the chain under it.
type Snapshot struct {
	Volume    string `json:"volume"`
	Name      string `json:"name"`
	Layer     string `json:"layer"`
	Size      int64  `json:"size"`
	BlockSize int64  `json:"block_size"`
	Class     string `json:"class,omitempty"`
	Created   int64  `json:"created"` // unix nanoseconds
}

// Garbage is a layer whose data objects wait to be reclaimed: All, a layer no one
// references any more (every data object goes); otherwise a layer that lost its
// snapshot and has one child left, whose data objects that the child's run hides go
// (volume.Reclaim). Seq tells entries set again apart (OpReclaimDone).
type Garbage struct {
	All bool   `json:"all,omitempty"`
	Seq uint64 `json:"seq"`
}

// MaxLayers bounds the chain of layers under a volume or a snapshot: a read of a data
// object no layer has looks at each.
const MaxLayers = 128

// SnapshotKey is the key of a snapshot in Map.Snapshots.
func SnapshotKey(volume, name string) string { return volume + "@" + name }

// Named reports whether a snapshot names layer id.
func (m *Map) Named(id string) bool {
	for _, s := range m.Snapshots {
		if s.Layer == id {
			return true
		}
	}
	return false
}

// Children returns the layers and the volumes (their heads) whose parent is layer id:
// layer ids first, then volume names, each sorted.
func (m *Map) Children(id string) (layers, volumes []string) {
	for _, l := range m.Layers {
		if l.Parent == id {
			layers = append(layers, l.ID)
		}
	}
	for _, v := range m.Volumes {
		if v.Parent == id {
			volumes = append(volumes, v.Name)
		}
	}
	sort.Strings(layers)
	sort.Strings(volumes)
	return layers, volumes
}

// Chain returns the layers under top, top excluded, newest first.
func (m *Map) Chain(parent string) []string {
	var out []string
	for id := parent; id != ""; id = m.Layers[id].Parent {
		out = append(out, id)
		if len(out) > MaxLayers+1 {
			break
		}
	}
	return out
}

// layerUsed reports whether id names a head, a layer or garbage.
func (m *Map) layerUsed(id string) bool {
	if _, ok := m.Layers[id]; ok {
		return true
	}
	if _, ok := m.Garbage[id]; ok {
		return true
	}
	_, ok := m.VolumeByID(id)
	return ok
}

// VolumeBucket holds the data objects of every volume. Its name is not a valid S3 bucket
// name, so no S3 request can reach it.
const VolumeBucket = "_volumes"

// DefaultBlockSize is the size of a volume's data objects (Sheepdog's 4 MiB).
const DefaultBlockSize = 4 << 20

// MaxVolumeSize bounds a volume (its data objects are numbered with 16 hex digits; the
// NBD protocol's sizes are 64-bit).
const MaxVolumeSize = 1 << 50

var volumeName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)

// VolumeByID returns the volume whose data objects are named id.
func (m *Map) VolumeByID(id string) (Volume, bool) {
	for _, v := range m.Volumes {
		if v.ID == id {
			return v, true
		}
	}
	return Volume{}, false
}

// The volume commands:
//
//   - OpCreateVolume (Volume: name, id, size, block size, class, created): adds a
//     volume, detached, and VolumeBucket if the map lacks it. Exist if the name or the id
//     is taken; Invalid for a name outside [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}, an id that is
//     not 16 hex digits, a size not a positive multiple of 512 up to MaxVolumeSize, a
//     block size not a power of two from 64 KiB to 64 MiB, or an unknown or
//     erasure-coded class.
//   - OpResizeVolume (Name, Size): grows a volume. NotExist if absent; Invalid if Size
//     is not larger (volumes do not shrink) or not a multiple of 512.
//   - OpAttachVolume (Name, NodeID, Force): gives the write lease to node NodeID and
//     raises the epoch. NotExist for an unknown volume or node; Precondition if another
//     node holds it and Force is not set (the message names the holder).
//   - OpDetachVolume (Name, NodeID): gives the lease back if NodeID holds it (an empty
//     NodeID: whoever holds it). NotExist for an unknown volume; Precondition if another
//     node holds it.
//   - OpDeleteVolume (Name): removes a detached volume (the data objects of its head are
//     deleted by the caller first); its parent layer is released (below). NotExist if
//     absent; Precondition while it is attached or has snapshots.
//   - OpSnapshotVolume (Name, Snapshot, Layer, Size: creation time): freezes the head of
//     volume Name as snapshot Snapshot and gives the volume a new, empty head Layer
//     whose parent is the frozen one. The lease (holder, epoch) is kept: its device
//     moves to the new head. NotExist for an unknown volume; Exist for a snapshot name
//     taken or a layer id in use; Invalid for a bad name or id, or a chain of
//     MaxLayers.
//   - OpCloneVolume (Volume: name, id, created; Snapshot: "volume@name"): a new,
//     detached volume whose head Volume.ID has the snapshot's layer as parent, with the
//     snapshot's size, block size and class. NotExist for an unknown snapshot; Exist
//     and Invalid as OpCreateVolume.
//   - OpRollbackVolume (Name, Snapshot, Layer): gives a detached volume a new, empty
//     head Layer over snapshot Snapshot's layer, and the snapshot's size; the old head
//     becomes garbage and its parent is released. NotExist for an unknown volume or
//     snapshot; Precondition while attached.
//   - OpDeleteSnapshot (Name, Snapshot): removes a snapshot; its layer is released.
//     NotExist if absent; Precondition if the layer has more than one child (clones, or
//     the branch a rollback left: delete those first).
//   - OpReclaimDone (Layer, Seq): the data objects of Garbage entry Layer were reclaimed;
//     the entry goes if its Seq is still Seq (else it was set again meanwhile).
//
// Releasing a layer: a layer that no snapshot names and that has no child is removed
// and becomes Garbage (All), and its parent is released in turn; one that no snapshot
// names with one child left becomes Garbage (not All: the objects its child's run
// hides are reclaimed). No unnamed layer ever has two children (OpDeleteSnapshot).
const (
	OpCreateVolume   = "create_volume"
	OpResizeVolume   = "resize_volume"
	OpAttachVolume   = "attach_volume"
	OpDetachVolume   = "detach_volume"
	OpDeleteVolume   = "delete_volume"
	OpSnapshotVolume = "snapshot_volume"
	OpCloneVolume    = "clone_volume"
	OpRollbackVolume = "rollback_volume"
	OpDeleteSnapshot = "delete_snapshot"
	OpReclaimDone    = "reclaim_done"
)

// release removes layer id, and its parents in turn, once nothing references it, and
// marks as Garbage what it leaves to reclaim (the rule above).
func release(nm *Map, id string) {
	for id != "" {
		l, ok := nm.Layers[id]
		if !ok || nm.Named(id) {
			return
		}
		ls, vs := nm.Children(id)
		switch len(ls) + len(vs) {
		case 0:
			delete(nm.Layers, id)
			addGarbage(nm, id, true)
			id = l.Parent
		case 1:
			addGarbage(nm, id, false)
			return
		default:
			return
		}
	}
}

func addGarbage(nm *Map, id string, all bool) {
	if nm.Garbage == nil {
		nm.Garbage = map[string]Garbage{}
	}
	g := nm.Garbage[id]
	nm.Garbage[id] = Garbage{All: all || g.All, Seq: nm.Epoch}
}

var snapName = volumeName

var hex16 = regexp.MustCompile(`^[0-9a-f]{16}$`)

func applyVolumeCommand(nm *Map, c Command) error {
	switch c.Op {
	case OpCreateVolume, OpCloneVolume:
		v := c.Volume
		if v == nil {
			return errors.Errorf(opFSM, errors.Invalid, "%s: missing volume", c.Op)
		}
		var parent string
		if c.Op == OpCloneVolume {
			s, ok := nm.Snapshots[c.Snapshot]
			if !ok {
				return errors.Errorf(opFSM, errors.NotExist, "no snapshot %s", c.Snapshot)
			}
			if len(nm.Chain(s.Layer)) >= MaxLayers {
				return errors.Errorf(opFSM, errors.Invalid, "snapshot %s has %d layers under it: a clone would have too many", c.Snapshot, MaxLayers)
			}
			cv := *v
			cv.Size, cv.BlockSize, cv.Class = s.Size, s.BlockSize, s.Class
			v, parent = &cv, s.Layer
			if nm.layerUsed(v.ID) {
				return errors.Errorf(opFSM, errors.Exist, "volume id %s is taken", v.ID)
			}
		}
		switch {
		case !volumeName.MatchString(v.Name):
			return errors.Errorf(opFSM, errors.Invalid, "volume name %q: 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit", v.Name)
		case !hex16.MatchString(v.ID):
			return errors.Errorf(opFSM, errors.Invalid, "volume id %q is not 16 hex digits", v.ID)
		case v.Size <= 0 || v.Size%512 != 0 || v.Size > MaxVolumeSize:
			return errors.Errorf(opFSM, errors.Invalid, "volume size %d: a positive multiple of 512 bytes up to %d", v.Size, int64(MaxVolumeSize))
		case v.BlockSize < 64<<10 || v.BlockSize > 64<<20 || v.BlockSize&(v.BlockSize-1) != 0:
			return errors.Errorf(opFSM, errors.Invalid, "volume block size %d: a power of two from 64 KiB to 64 MiB", v.BlockSize)
		}
		if _, ok := nm.Volumes[v.Name]; ok {
			return errors.Errorf(opFSM, errors.Exist, "volume %s exists", v.Name)
		}
		if nm.layerUsed(v.ID) {
			return errors.Errorf(opFSM, errors.Exist, "volume id %s is taken", v.ID)
		}
		if cls, ok := nm.Class(v.Class); !ok {
			return errors.Errorf(opFSM, errors.Invalid, "unknown storage class %q", v.Class)
		} else if cls.EC() && (cls.K&(cls.K-1) != 0 || v.BlockSize%int64(cls.K) != 0) {
			return errors.Errorf(opFSM, errors.Invalid, "class %s has %d data shards: an erasure-coded volume needs a power of two (1 to 32)", cls.Name, cls.K)
		}
		nv := *v
		nv.Holder, nv.Epoch, nv.Parent, nv.Nodes = "", 0, parent, nil
		if cls, _ := nm.Class(v.Class); cls.EC() {
			for _, n := range nm.PlacementNodes() {
				if cls.DeviceClass == "" || n.DeviceClass == cls.DeviceClass {
					nv.Nodes = append(nv.Nodes, n.ID)
				}
			}
			sort.Strings(nv.Nodes)
			if len(nv.Nodes) < cls.K+cls.M {
				return errors.Errorf(opFSM, errors.Invalid, "class %s needs %d storage nodes for its shards, %d are in placement", cls.Name, cls.K+cls.M, len(nv.Nodes))
			}
		}
		nm.Volumes[v.Name] = nv
		if _, ok := nm.Buckets[VolumeBucket]; !ok {
			nm.Buckets[VolumeBucket] = Bucket{Name: VolumeBucket, Created: v.Created}
		}
	case OpResizeVolume:
		v, ok := nm.Volumes[c.Name]
		switch {
		case !ok:
			return errors.Errorf(opFSM, errors.NotExist, "no volume %s", c.Name)
		case c.Size <= v.Size || c.Size%512 != 0 || c.Size > MaxVolumeSize:
			return errors.Errorf(opFSM, errors.Invalid, "volume %s is %d bytes: it can grow to a larger multiple of 512 bytes (up to %d), not to %d", c.Name, v.Size, int64(MaxVolumeSize), c.Size)
		}
		v.Size = c.Size
		nm.Volumes[c.Name] = v
	case OpAttachVolume:
		v, ok := nm.Volumes[c.Name]
		if !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no volume %s", c.Name)
		}
		if _, ok := nm.Node(c.NodeID); !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no node %s", c.NodeID)
		}
		if v.Holder != "" && v.Holder != c.NodeID && !c.Force {
			return errors.Errorf(opFSM, errors.Precondition, "volume %s is attached for writing on node %s (detach it there, or attach with --force once that node is down)", c.Name, v.Holder)
		}
		v.Holder = c.NodeID
		v.Epoch++
		nm.Volumes[c.Name] = v
		if v.Parent != "" && !nm.Named(v.Parent) {
			// The objects a device copied on write from its unnamed parent and did not
			// get to delete (a crash between the two) are reclaimed.
			addGarbage(nm, v.Parent, false)
		}
	case OpDetachVolume:
		v, ok := nm.Volumes[c.Name]
		switch {
		case !ok:
			return errors.Errorf(opFSM, errors.NotExist, "no volume %s", c.Name)
		case c.NodeID != "" && v.Holder != "" && v.Holder != c.NodeID:
			return errors.Errorf(opFSM, errors.Precondition, "volume %s is attached on node %s, not %s", c.Name, v.Holder, c.NodeID)
		}
		v.Holder = ""
		nm.Volumes[c.Name] = v
	case OpDeleteVolume:
		v, ok := nm.Volumes[c.Name]
		switch {
		case !ok:
			return errors.Errorf(opFSM, errors.NotExist, "no volume %s", c.Name)
		case v.Holder != "":
			return errors.Errorf(opFSM, errors.Precondition, "volume %s is attached on node %s: detach it first", c.Name, v.Holder)
		}
		for _, s := range nm.Snapshots {
			if s.Volume == c.Name {
				return errors.Errorf(opFSM, errors.Precondition, "volume %s has snapshots (%s first): delete them first", c.Name, SnapshotKey(s.Volume, s.Name))
			}
		}
		delete(nm.Volumes, c.Name)
		release(nm, v.Parent)
	case OpSnapshotVolume:
		v, ok := nm.Volumes[c.Name]
		key := SnapshotKey(c.Name, c.Snapshot)
		switch {
		case !ok:
			return errors.Errorf(opFSM, errors.NotExist, "no volume %s", c.Name)
		case !snapName.MatchString(c.Snapshot):
			return errors.Errorf(opFSM, errors.Invalid, "snapshot name %q: 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit", c.Snapshot)
		case !hex16.MatchString(c.Layer):
			return errors.Errorf(opFSM, errors.Invalid, "layer id %q is not 16 hex digits", c.Layer)
		case nm.layerUsed(c.Layer):
			return errors.Errorf(opFSM, errors.Exist, "layer id %s is taken", c.Layer)
		case nm.ecVolume(v):
			return errors.Errorf(opFSM, errors.Invalid, "volume %s is erasure-coded (class %s): snapshots, clones and rollback are not built for erasure-coded volumes", c.Name, v.Class)
		case len(nm.Chain(v.Parent)) >= MaxLayers-1:
			return errors.Errorf(opFSM, errors.Invalid, "volume %s has %d layers: delete snapshots before taking another", c.Name, MaxLayers)
		}
		if _, ok := nm.Snapshots[key]; ok {
			return errors.Errorf(opFSM, errors.Exist, "snapshot %s exists", key)
		}
		if nm.Layers == nil {
			nm.Layers = map[string]Layer{}
		}
		if nm.Snapshots == nil {
			nm.Snapshots = map[string]Snapshot{}
		}
		nm.Layers[v.ID] = Layer{ID: v.ID, Parent: v.Parent, Volume: v.Name}
		nm.Snapshots[key] = Snapshot{Volume: v.Name, Name: c.Snapshot, Layer: v.ID, Size: v.Size, BlockSize: v.BlockSize, Class: v.Class, Created: c.Size}
		v.Parent, v.ID = v.ID, c.Layer
		nm.Volumes[c.Name] = v
	case OpRollbackVolume:
		v, ok := nm.Volumes[c.Name]
		s, sok := nm.Snapshots[SnapshotKey(c.Name, c.Snapshot)]
		switch {
		case !ok:
			return errors.Errorf(opFSM, errors.NotExist, "no volume %s", c.Name)
		case !sok:
			return errors.Errorf(opFSM, errors.NotExist, "volume %s has no snapshot %s (cairn volume snapshots %s)", c.Name, c.Snapshot, c.Name)
		case v.Holder != "":
			return errors.Errorf(opFSM, errors.Precondition, "volume %s is attached on node %s: detach it before a rollback (its client would keep what it cached)", c.Name, v.Holder)
		case !hex16.MatchString(c.Layer):
			return errors.Errorf(opFSM, errors.Invalid, "layer id %q is not 16 hex digits", c.Layer)
		case nm.layerUsed(c.Layer):
			return errors.Errorf(opFSM, errors.Exist, "layer id %s is taken", c.Layer)
		}
		old, oldParent := v.ID, v.Parent
		v.ID, v.Parent, v.Size = c.Layer, s.Layer, s.Size
		nm.Volumes[c.Name] = v
		addGarbage(nm, old, true)
		release(nm, oldParent)
	case OpDeleteSnapshot:
		key := SnapshotKey(c.Name, c.Snapshot)
		s, ok := nm.Snapshots[key]
		if !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no snapshot %s", key)
		}
		if ls, vs := nm.Children(s.Layer); len(ls)+len(vs) > 1 {
			var deps []string
			for _, v := range vs {
				if v != s.Volume {
					deps = append(deps, "volume "+v)
				}
			}
			for _, l := range ls {
				for _, o := range nm.Snapshots {
					if o.Layer == l {
						deps = append(deps, "snapshot "+SnapshotKey(o.Volume, o.Name))
					}
				}
			}
			return errors.Errorf(opFSM, errors.Precondition, "snapshot %s has clones or a branch left by a rollback (%v): delete them first", key, deps)
		}
		delete(nm.Snapshots, key)
		release(nm, s.Layer)
	case OpReclaimDone:
		if g, ok := nm.Garbage[c.Layer]; ok && g.Seq == c.Seq {
			delete(nm.Garbage, c.Layer)
		}
	}
	return nil
}

// ecVolume reports whether v's class is an erasure code (its data objects are shards:
// internal/volume's ec.go).
func (m *Map) ecVolume(v Volume) bool {
	cls, ok := m.Class(v.Class)
	return ok && cls.EC()
}
