package clustermap

import (
	"regexp"

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
//   - OpDeleteVolume (Name): removes a detached volume (its data objects are deleted by
//     the caller first). NotExist if absent; Precondition while it is attached.
const (
	OpCreateVolume = "create_volume"
	OpResizeVolume = "resize_volume"
	OpAttachVolume = "attach_volume"
	OpDetachVolume = "detach_volume"
	OpDeleteVolume = "delete_volume"
)

var hex16 = regexp.MustCompile(`^[0-9a-f]{16}$`)

func applyVolumeCommand(nm *Map, c Command) error {
	switch c.Op {
	case OpCreateVolume:
		v := c.Volume
		switch {
		case v == nil:
			return errors.E(opFSM, errors.Invalid, "create_volume: missing volume")
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
		if _, ok := nm.VolumeByID(v.ID); ok {
			return errors.Errorf(opFSM, errors.Exist, "volume id %s is taken", v.ID)
		}
		if cls, ok := nm.Class(v.Class); !ok {
			return errors.Errorf(opFSM, errors.Invalid, "unknown storage class %q", v.Class)
		} else if cls.EC() {
			return errors.Errorf(opFSM, errors.Invalid, "class %s is erasure-coded: volumes need a replicated class", cls.Name)
		}
		nv := *v
		nv.Holder, nv.Epoch = "", 0
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
		delete(nm.Volumes, c.Name)
	}
	return nil
}
