// Package clustermap holds the cluster map (nodes, partitions, storage classes,
// buckets, users) and replicates it with Raft among the nodes.
//
// It is the only package that imports the raft library. The map is changed only
// through Commands applied by the Raft leader (Manager.Apply) and is applied by a
// deterministic state machine on every member, so every node holds a local copy.
// The data path only reads Manager.Current, which is a cheap atomic load of an
// immutable *Map; it never waits on Raft.
package clustermap

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"sort"
)

// NodeState is the administrative/health state of a node in the map.
type NodeState string

// The node states.
const (
	// StateJoining is reserved for a node whose join is in progress. Nodes added
	// with OpAddNode become StateUp as soon as the add is committed.
	StateJoining NodeState = "joining"
	// StateUp: the node is a healthy member.
	StateUp NodeState = "up"
	// StateDown: the node is (believed to be) temporarily unavailable. It keeps
	// its data and its place in placement.
	StateDown NodeState = "down"
	// StateOut: the node has left the cluster for good; it holds no data and is
	// removed from the Raft group.
	StateOut NodeState = "out"
	// StateDraining: the node is being emptied before going out.
	StateDraining NodeState = "draining"
)

// Valid reports whether s is one of the defined states.
func (s NodeState) Valid() bool {
	switch s {
	case StateJoining, StateUp, StateDown, StateOut, StateDraining:
		return true
	}
	return false
}

// Node roles.
const (
	RoleGateway = "gateway"
	RoleStorage = "storage"
	RoleManager = "manager"
)

// StandardClass is the name of the default storage class.
const StandardClass = "STANDARD"

// Node is one member of the cluster.
type Node struct {
	ID          string    `json:"id"`
	Addr        string    `json:"addr"` // internode address (RPC and Raft), host:port
	S3Addr      string    `json:"s3_addr"`
	AdminAddr   string    `json:"admin_addr"`
	Zone        string    `json:"zone"`
	DeviceClass string    `json:"device_class"`
	Capacity    int64     `json:"capacity"` // bytes
	Weight      float64   `json:"weight"`
	State       NodeState `json:"state"`
	Roles       []string  `json:"roles"` // subset of "gateway","storage","manager"
}

// HasRole reports whether the node has role r.
func (n *Node) HasRole(r string) bool {
	return slices.Contains(n.Roles, r)
}

// Class is a storage class: N replicas, write quorum W, read quorum R and
// delete quorum D; or, when K > 0, an erasure code of K data and M parity shards
// (N = K+M shards on distinct nodes, W of them durable before a write is
// acknowledged). DeviceClass, when set, restricts placement to the nodes tagged
// with it; S3Names are the x-amz-storage-class names that select the class.
//
// STANDARD is placed on every storage node and holds every object's record. Objects of
// any other class keep their record in STANDARD and their bytes in chunks on the class's
// own nodes (Sharded): K data and M parity shards for an erasure code, N identical
// checksummed copies (Shards gives 1+(N-1)) for a replicated class.

type Class struct {
	Name        string   `json:"name"`
	N           int      `json:"n"`
	W           int      `json:"w"`
	R           int      `json:"r"`
	D           int      `json:"d"`
	K           int      `json:"k,omitempty"`
	M           int      `json:"m,omitempty"`
	DeviceClass string   `json:"device_class,omitempty"`
	S3Names     []string `json:"s3_names,omitempty"`
	// Chunk is the bytes of an object per shard (0: DefaultChunk); a stripe holds K
	// chunks, a copy of a replicated class one.
	Chunk int64 `json:"chunk,omitempty"`
}

// EC reports whether c is erasure-coded.
func (c Class) EC() bool { return c.K > 0 }

// Sharded reports whether objects of c are stored as shards on the class's own nodes
// (every class but STANDARD) rather than as whole copies on the key's STANDARD holders.
func (c Class) Sharded() bool { return c.EC() || c.Name != StandardClass }

// Shards returns the code c's objects are stored with: K+M for an erasure code, 1+(N-1)
// (N copies) for a replicated class.
func (c Class) Shards() (k, m int) {
	if c.EC() {
		return c.K, c.M
	}
	return 1, max(c.N-1, 0)
}

// ChunkSize returns the bytes of an object per shard: the class's own, else DefaultChunk
// or more, so that a stripe holds at least DefaultStripe (4 MiB chunks for copies).
func (c Class) ChunkSize() int64 {
	if c.Chunk > 0 {
		return c.Chunk
	}
	k, _ := c.Shards()
	return max(DefaultChunk, DefaultStripe/int64(k))
}

// Chunk sizes: by default shards of at least DefaultChunk and stripes of at least
// DefaultStripe, unless a class sets its own chunk size, between MinChunk and MaxChunk,
// with a stripe (K chunks) of at most MaxStripe. A gateway holds two stripes per PUT
// and one or two per GET in memory.
const (
	DefaultChunk  = 1 << 20
	DefaultStripe = 4 << 20
	MinChunk      = 64 << 10
	MaxChunk      = 16 << 20
	MaxStripe     = 64 << 20
)

// S3StorageClasses are the storage class names of the S3 API. A cairn class can be
// chosen by its own name or by one of these, mapped to it with Class.S3Names; an S3
// name mapped to no class means STANDARD.
var S3StorageClasses = []string{"STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA",
	"INTELLIGENT_TIERING", "GLACIER", "GLACIER_IR", "DEEP_ARCHIVE", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE"}

// ResolveClass returns the class an x-amz-storage-class value selects: a class by
// its cairn name, else the class an S3 name is mapped to, else STANDARD for an
// unmapped S3 name. ok is false for a name that is neither.
func (m *Map) ResolveClass(name string) (Class, bool) {
	if name == "" {
		name = StandardClass
	}
	if c, ok := m.Classes[name]; ok {
		c.Name = name
		return c, true
	}
	for n, c := range m.Classes {
		if slices.Contains(c.S3Names, name) {
			c.Name = n
			return c, true
		}
	}
	if slices.Contains(S3StorageClasses, name) {
		if c, ok := m.Classes[StandardClass]; ok {
			c.Name = StandardClass
			return c, true
		}
		return Class{Name: StandardClass, N: m.Replicas}, true
	}
	return Class{}, false
}

// Bucket is a bucket's map entry.
type Bucket struct {
	Name    string `json:"name"`
	Created int64  `json:"created"` // unix nanoseconds
	// Policy is the text of the bucket's placement rules (package policy), empty for
	// none: it chooses the class of objects written without x-amz-storage-class.
	Policy string `json:"policy,omitempty"`
	// Apply counts the requests to re-place the bucket's existing objects by its policy
	// (cairn admin policy apply): each storage node works until it has reached it.
	Apply uint64 `json:"apply,omitempty"`
	// Config holds the bucket's S3 configurations by kind (the sub-resource: "cors",
	// "tagging"), each the document the S3 layer stored. A map's Config is never modified
	// in place: a command replaces it (Clone copies the Bucket, sharing the map).
	Config map[string]string `json:"config,omitempty"`
	// Owner is the name of the user who created the bucket; empty for the root user
	// (and for every bucket created before users existed).
	Owner string `json:"owner,omitempty"`
}

// User is an S3 key as builds before feature level 3 kept it, its secret in the clear.
// The Raft leader moves every User to Keys, sealed, once every node runs a build that
// knows keys (OpSealUsers); until then nodes accept both.
type User struct {
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// Map is the cluster map. A *Map obtained from a Manager is shared and must not
// be modified; use Clone to get a private copy.
type Map struct {
	Epoch      uint64            `json:"epoch"`
	Partitions int               `json:"partitions"`
	Replicas   int               `json:"replicas"` // N of STANDARD requested at bootstrap
	Nodes      []Node            `json:"nodes"`    // sorted by ID
	Classes    map[string]Class  `json:"classes"`
	Buckets    map[string]Bucket `json:"buckets"`
	Users      map[string]User   `json:"users"` // legacy keys in the clear, by access key: see User
	// Accounts are the S3 users by name, Keys their access keys by access key id.
	Accounts map[string]Account `json:"accounts,omitempty"`
	Keys     map[string]Key     `json:"keys,omitempty"`
	// Level is the feature level every node of the cluster has reached (0 or 1: not
	// known). The Raft leader raises it (OpRaiseLevel) once every node that is not out
	// answers with a build at that level; it is never lowered. Features that write data
	// an older build would misread (records with an owner, ACL or encryption: level 5)
	// are used only once Level says every node can read it.
	Level int `json:"level,omitempty"`
	// PlacementVersion is the placement algorithm every node computes the tables with
	// (package placement's Version): 0 or 1 is weighted rendezvous hashing (every map
	// from before versions), 2 rendezvous with bounded load. Version 2 needs every node
	// at PlacementV2Level: a map has it only with Level at least that (set at bootstrap,
	// or by OpSetPlacement), so a node of an older build, which would ignore the field
	// and compute other tables, cannot join (its join is refused below the map's Level).
	PlacementVersion int `json:"placement_version,omitempty"`
	// Volumes are the block volumes by name (volumes.go).
	Volumes map[string]Volume `json:"volumes,omitempty"`
	// Layers are the frozen layers of data objects under volumes and snapshots, by id;
	// Snapshots the snapshots by "volume@name"; Garbage the layers whose data objects
	// wait to be reclaimed (volumes.go, docs/design/volume-snapshots.md).
	Layers    map[string]Layer    `json:"layers,omitempty"`
	Snapshots map[string]Snapshot `json:"snapshots,omitempty"`
	Garbage   map[string]Garbage  `json:"garbage,omitempty"`
	// Internode is the cluster's internode TLS (nil: internode traffic is plain HTTP and
	// Raft, authenticated by the cluster secret: a cluster from before internode TLS, or
	// one bootstrapped without it). See docs/design/internode-tls.md.
	Internode *InternodeTLS `json:"internode,omitempty"`
	// Targets are the bucket-notification targets by name (notify.go). Never modified in
	// place: a command replaces the map.
	Targets map[string]NotifyTarget `json:"targets,omitempty"`
	// Tiers are the archive tiers by name, WaterMarks the device classes' water marks by
	// device class (tiers.go); both nil when empty.
	Tiers      map[string]Tier       `json:"tiers,omitempty"`
	WaterMarks map[string]WaterMarks `json:"water_marks,omitempty"`
	// ClusterID names this cluster to the clusters it is linked with (the origin of its
	// changes); set by the first link command. Links are the multi-data-center
	// replication links by name (mdc.go). Never modified in place.
	ClusterID string          `json:"cluster_id,omitempty"`
	Links     map[string]Link `json:"links,omitempty"`
	// NBDClients are the records of the NBD client certificates issued, by serial
	// (nbdclients.go); nil when empty. Never modified in place.
	NBDClients map[string]NBDClient `json:"nbd_clients,omitempty"`
}

// InternodeTLS is the cluster's internode mutual TLS: the CA every node certificate
// chains to, and whether plain connections are refused. The CA never changes once set,
// and Required never goes back to false (OpSetInternodeTLS).
type InternodeTLS struct {
	CA       string `json:"ca"`       // the CA certificate, PEM
	Required bool   `json:"required"` // plain internode connections are refused
}

// MaxInternodeCA bounds the CA certificate's PEM in the map.
const MaxInternodeCA = 16 << 10

// Node returns the node with the given ID.
func (m *Map) Node(id string) (Node, bool) {
	if i, ok := m.nodeIndex(id); ok {
		return m.Nodes[i], true
	}
	return Node{}, false
}

// nodeIndex finds id in the sorted Nodes slice.
func (m *Map) nodeIndex(id string) (int, bool) {
	i := sort.Search(len(m.Nodes), func(i int) bool { return m.Nodes[i].ID >= id })
	if i < len(m.Nodes) && m.Nodes[i].ID == id {
		return i, true
	}
	return i, false
}

// Clone returns a deep copy of m. The maps of the copy are never nil.
func (m *Map) Clone() *Map {
	c := &Map{
		Epoch:            m.Epoch,
		Partitions:       m.Partitions,
		Replicas:         m.Replicas,
		Level:            m.Level,
		PlacementVersion: m.PlacementVersion,
		Classes:          make(map[string]Class, len(m.Classes)),
		Buckets:          make(map[string]Bucket, len(m.Buckets)),
		Users:            make(map[string]User, len(m.Users)),
		Accounts:         make(map[string]Account, len(m.Accounts)),
		Keys:             make(map[string]Key, len(m.Keys)),
		Volumes:          make(map[string]Volume, len(m.Volumes)),
	}
	for k, v := range m.Volumes {
		c.Volumes[k] = v
	}
	if len(m.Layers) > 0 {
		c.Layers = maps.Clone(m.Layers)
	}
	if len(m.Snapshots) > 0 {
		c.Snapshots = maps.Clone(m.Snapshots)
	}
	if len(m.Garbage) > 0 {
		c.Garbage = maps.Clone(m.Garbage)
	}
	c.Targets = m.Targets // replaced, never modified, by commands
	c.ClusterID, c.Links = m.ClusterID, m.Links
	c.NBDClients = m.NBDClients // replaced, never modified, by commands
	if m.Nodes != nil {
		c.Nodes = make([]Node, len(m.Nodes))
		for i, n := range m.Nodes {
			n.Roles = slices.Clone(n.Roles)
			c.Nodes[i] = n
		}
	}
	for k, v := range m.Classes {
		c.Classes[k] = v
	}
	for k, v := range m.Buckets {
		c.Buckets[k] = v
	}
	for k, v := range m.Users {
		c.Users[k] = v
	}
	for k, v := range m.Accounts {
		c.Accounts[k] = v
	}
	for k, v := range m.Keys {
		c.Keys[k] = v
	}
	if m.Internode != nil {
		it := *m.Internode
		c.Internode = &it
	}
	if m.Tiers != nil {
		c.Tiers = make(map[string]Tier, len(m.Tiers))
		for k, v := range m.Tiers {
			c.Tiers[k] = v
		}
	}
	if m.WaterMarks != nil {
		c.WaterMarks = make(map[string]WaterMarks, len(m.WaterMarks))
		for k, v := range m.WaterMarks {
			c.WaterMarks[k] = v
		}
	}
	return c
}

// canonical returns a copy of m in canonical form: nodes sorted by ID, no nil
// slices or maps.
func (m *Map) canonical() *Map {
	c := m.Clone()
	if c.Nodes == nil {
		c.Nodes = []Node{}
	}
	for i := range c.Nodes {
		if c.Nodes[i].Roles == nil {
			c.Nodes[i].Roles = []string{}
		}
	}
	sortNodes(c.Nodes)
	return c
}

// Digest returns the hex SHA-256 of m's canonical JSON encoding. Two maps with
// the same content (including the epoch) have the same digest; nil and empty
// collections are treated alike.
func (m *Map) Digest() string {
	b, err := json.Marshal(m.canonical()) // encoding/json sorts map keys
	if err != nil {
		panic("clustermap: marshal map: " + err.Error()) // cannot happen: plain data
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// StorageNodes returns the nodes that take part in data placement: those with
// the storage role whose state is not StateOut. Down and draining nodes are
// included so that placement does not move on transient failures; it is up to
// the caller to skip them when reading or writing. The result is sorted by ID
// and is a fresh slice (the Roles slices are shared with m).
func (m *Map) StorageNodes() []Node {
	var out []Node
	for _, n := range m.Nodes {
		if n.HasRole(RoleStorage) && n.State != StateOut {
			out = append(out, n)
		}
	}
	return out
}

// PlacementNodes returns the storage nodes that new placements use: StorageNodes
// without the draining ones (their partitions move to the others). Sorted by ID.
func (m *Map) PlacementNodes() []Node {
	var out []Node
	for _, n := range m.Nodes {
		if n.HasRole(RoleStorage) && n.State != StateOut && n.State != StateDraining {
			out = append(out, n)
		}
	}
	return out
}

// Class returns the storage class with the given name; "" means STANDARD.
func (m *Map) Class(name string) (Class, bool) {
	if name == "" {
		name = StandardClass
	}
	c, ok := m.Classes[name]
	return c, ok
}

// EffectiveClass returns c adjusted to the cluster: N is capped at the number
// of storage nodes that placement uses (PlacementNodes: neither out nor draining), and W, R and D
// are capped at that N. All four are at least 1, even in a cluster without
// storage nodes.
func (m *Map) EffectiveClass(c Class) Class {
	n := len(m.PlacementNodes())
	c.N = clamp(c.N, 1, max(n, 1))
	c.W = clamp(c.W, 1, c.N)
	c.R = clamp(c.R, 1, c.N)
	c.D = clamp(c.D, 1, c.N)
	return c
}

func clamp(v, lo, hi int) int {
	return max(lo, min(v, hi))
}

func sortNodes(ns []Node) {
	slices.SortFunc(ns, func(a, b Node) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
}
