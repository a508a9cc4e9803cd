package clustermap

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/policy"
)

// Command is one change to the map, replicated through the Raft log. Which
// fields are used depends on Op.
type Command struct {
	Op     string    `json:"op"` // one of the Op constants
	Node   *Node     `json:"node,omitempty"`
	NodeID string    `json:"node_id,omitempty"`
	State  NodeState `json:"state,omitempty"`
	Bucket *Bucket   `json:"bucket,omitempty"`
	Name   string    `json:"name,omitempty"`
	User   *User     `json:"user,omitempty"`
	Class  *Class    `json:"class,omitempty"`
	Init   *Map      `json:"init,omitempty"`
	Policy *string   `json:"policy,omitempty"` // OpSetPolicy: the rule file's text
	Key    string    `json:"key,omitempty"`    // OpSetBucketConfig: the configuration's kind
	Doc    *string   `json:"doc,omitempty"`    // OpSetBucketConfig: the document; empty deletes
	// Account and Keys are the user and the keys of the user and key commands.
	Account *Account `json:"account,omitempty"`
	Keys    []Key    `json:"keys,omitempty"`
	Grant   *Grant   `json:"grant,omitempty"`
	// Level is OpRaiseLevel's feature level.
	Level int `json:"level,omitempty"`
	// Placement is OpSetPlacement's placement version.
	Placement int `json:"placement,omitempty"`
	// Volume, Size and Force are the volume commands' (volumes.go).
	Volume *Volume `json:"volume,omitempty"`
	Size   int64   `json:"size,omitempty"`
	Force  bool    `json:"force,omitempty"`
	// Snapshot and Layer are the snapshot commands' (volumes.go): a snapshot's name
	// ("volume@name" for OpCloneVolume), and the id of the new head layer.
	Snapshot string `json:"snapshot,omitempty"`
	Layer    string `json:"layer,omitempty"`
	Seq      uint64 `json:"seq,omitempty"` // OpReclaimDone: the Garbage entry's Seq
	// Internode is OpSetInternodeTLS's state.
	Internode *InternodeTLS `json:"internode,omitempty"`
	// Target is OpPutNotifyTarget's target (notify.go).
	Target *NotifyTarget `json:"target,omitempty"`
	// Tier and Marks are the tier commands' (tiers.go).
	Tier  *Tier       `json:"tier,omitempty"`
	Marks *WaterMarks `json:"marks,omitempty"`
	// Link and ClusterID are OpPutLink's (mdc.go).
	Link      *Link  `json:"link,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
	// NBDClient is the NBD client commands' record (nbdclients.go).
	NBDClient *NBDClient `json:"nbd_client,omitempty"`
}

// The command operations.
//
//   - OpInit (Init): only on an empty map (epoch 0); sets the whole map, epoch 1.
//   - OpAddNode (Node): adds a node in state up. If a node with the same ID and
//     Addr exists, its fields are updated and its state set to up (rejoin).
//     Exist if the ID exists with another Addr or another node uses the Addr.
//   - OpUpdateNode (Node): replaces the mutable fields of an existing node:
//     Addr, S3Addr, AdminAddr, Zone, DeviceClass, Capacity, Weight, and Roles if
//     non-nil. State is kept. NotExist if absent; Exist if Addr is taken.
//   - OpSetState (NodeID, State): NotExist if unknown node, Invalid if unknown state.
//   - OpRemoveNode (NodeID): NotExist if unknown.
//   - OpCreateBucket (Bucket): Exist if present; NotExist if Bucket.Owner names no user.
//   - OpDeleteBucket (Name): NotExist if absent. Every user's grants on it go with it.
//   - OpPutUser (User): creates or replaces a user.
//   - OpPutClass (Class): creates or replaces a class; requires N >= 1 and
//     1 <= W, R, D <= N.
//   - OpSetPolicy (Name, Policy): sets bucket Name's placement policy (package
//     policy; empty text clears it). Invalid if the text does not parse or names
//     a class the map does not have; NotExist for an unknown bucket.
//   - OpApplyPolicy (Name): asks the storage nodes to re-place bucket Name's
//     existing objects by its policy (raises Bucket.Apply). Precondition if the
//     bucket has no policy; NotExist for an unknown bucket.
//   - The user and key commands (OpAddAccount, OpSetAccount, OpRemoveAccount, OpPutKey,
//     OpRevokeKey, OpSealUsers) are described in users.go.
//   - OpSetBucketConfig (Name, Key, Doc): sets bucket Name's configuration of kind
//     Key (an S3 sub-resource such as "cors" or "tagging") to Doc; an empty Doc
//     deletes it. NotExist for an unknown bucket, Invalid without a kind, a
//     document or with a document over MaxBucketConfig bytes.
//   - The volume commands (OpCreateVolume, OpResizeVolume, OpAttachVolume,
//     OpDetachVolume, OpDeleteVolume, OpSnapshotVolume, OpCloneVolume, OpRollbackVolume,
//     OpDeleteSnapshot, OpReclaimDone) are described in volumes.go.
//   - The notification target commands (OpPutNotifyTarget, OpRemoveNotifyTarget) are
//     described in notify.go.
//   - OpRaiseLevel (Level): raises Map.Level to Level; Invalid if Level is not above
//     it (the level never goes down).
//   - OpSetPlacement (Placement): sets Map.PlacementVersion (moving data: every table
//     changes). Invalid for a version other than 1 or MaxPlacementVersion;
//     Precondition below Level PlacementV2Level (an older node would ignore the field).
//   - The link commands (OpPutLink, OpRemoveLink, OpPauseLink, OpResumeLink) are
//     described in mdc.go.
//   - The tier commands (OpPutTier, OpRemoveTier, OpSetWaterMarks) are described in
//     tiers.go.
//   - The NBD client commands (OpIssueNBDClient, OpRevokeNBDClient) are described in
//     nbdclients.go.
//   - OpSetInternodeTLS (Internode): sets the cluster's internode TLS. Invalid without a
//     CA, with one over MaxInternodeCA bytes, with another CA than the one set, or
//     turning Required off once it is on.
//
// Every command other than OpInit requires an initialized map (Precondition
// otherwise). Every accepted command increments the epoch by one; a rejected
// command changes nothing.
const (
	OpInit         = "init"
	OpAddNode      = "add_node"
	OpUpdateNode   = "update_node"
	OpSetState     = "set_state"
	OpRemoveNode   = "remove_node"
	OpCreateBucket = "create_bucket"
	OpDeleteBucket = "delete_bucket"
	OpPutUser      = "put_user"
	OpPutClass     = "put_class"
	OpSetPolicy    = "set_policy"
	OpApplyPolicy  = "apply_policy"

	OpSetBucketConfig = "set_bucket_config"
	OpRaiseLevel      = "raise_level"
	OpSetPlacement    = "set_placement"
	OpSetInternodeTLS = "set_internode_tls"
)

// MaxBucketConfig bounds one bucket configuration document: the map is held in memory by
// every node and sent whole in snapshots, so a configuration is small (S3's own limits are
// far below: a CORS configuration is at most 64 KiB).
const MaxBucketConfig = 64 << 10

const opFSM errors.Op = "clustermap.apply"

// ApplyCommand returns the map that results from applying c to m, or an error if c
// is rejected, as every manager does when c is committed. m is not modified. Tests
// that keep a map without Raft use it to change the map the same way.
func ApplyCommand(m *Map, c Command) (*Map, error) { return applyCommand(m, c) }

// applyCommand returns the map that results from applying c to m, or an error
// if c is rejected. m is not modified. It is deterministic: it depends only on
// m and c.
func applyCommand(m *Map, c Command) (*Map, error) {
	if c.Op == OpInit {
		if m.Epoch != 0 {
			return nil, errors.E(opFSM, errors.Exist, "map already initialized")
		}
		if c.Init == nil {
			return nil, errors.E(opFSM, errors.Invalid, "init: missing map")
		}
		nm := c.Init.Clone()
		if err := validateInit(nm); err != nil {
			return nil, err
		}
		nm.Epoch = 1
		return nm, nil
	}
	if m.Epoch == 0 {
		return nil, errors.Errorf(opFSM, errors.Precondition, "%s: map not initialized", c.Op)
	}
	nm := m.Clone()
	switch c.Op {
	case OpAddNode:
		if err := validateNode(c.Node); err != nil {
			return nil, err
		}
		n := *c.Node
		n.Roles = append([]string(nil), n.Roles...)
		for _, o := range nm.Nodes {
			if o.ID != n.ID && o.Addr == n.Addr {
				return nil, errors.Errorf(opFSM, errors.Exist, "node %s: address %s already used by node %s", n.ID, n.Addr, o.ID)
			}
		}
		n.State = StateUp
		i, ok := nm.nodeIndex(n.ID)
		if ok {
			if nm.Nodes[i].Addr != n.Addr {
				return nil, errors.Errorf(opFSM, errors.Exist, "duplicate node id %s (registered with address %s)", n.ID, nm.Nodes[i].Addr)
			}
			nm.Nodes[i] = n
		} else {
			nm.Nodes = slices.Insert(nm.Nodes, i, n)
		}
	case OpUpdateNode:
		if err := validateNode(c.Node); err != nil {
			return nil, err
		}
		u := c.Node
		i, ok := nm.nodeIndex(u.ID)
		if !ok {
			return nil, errors.Errorf(opFSM, errors.NotExist, "update_node: unknown node %s", u.ID)
		}
		for _, o := range nm.Nodes {
			if o.ID != u.ID && o.Addr == u.Addr {
				return nil, errors.Errorf(opFSM, errors.Exist, "node %s: address %s already used by node %s", u.ID, u.Addr, o.ID)
			}
		}
		n := &nm.Nodes[i]
		n.Addr = u.Addr
		n.S3Addr = u.S3Addr
		n.AdminAddr = u.AdminAddr
		n.Zone = u.Zone
		n.DeviceClass = u.DeviceClass
		n.Capacity = u.Capacity
		n.Weight = u.Weight
		if u.Roles != nil {
			n.Roles = append([]string(nil), u.Roles...)
		}
	case OpSetState:
		i, ok := nm.nodeIndex(c.NodeID)
		if !ok {
			return nil, errors.Errorf(opFSM, errors.NotExist, "set_state: unknown node %q", c.NodeID)
		}
		if !c.State.Valid() {
			return nil, errors.Errorf(opFSM, errors.Invalid, "set_state: unknown state %q", c.State)
		}
		nm.Nodes[i].State = c.State
	case OpRemoveNode:
		i, ok := nm.nodeIndex(c.NodeID)
		if !ok {
			return nil, errors.Errorf(opFSM, errors.NotExist, "remove_node: unknown node %q", c.NodeID)
		}
		nm.Nodes = append(nm.Nodes[:i], nm.Nodes[i+1:]...)
	case OpCreateBucket:
		if c.Bucket == nil || c.Bucket.Name == "" {
			return nil, errors.E(opFSM, errors.Invalid, "create_bucket: missing bucket name")
		}
		if _, ok := nm.Buckets[c.Bucket.Name]; ok {
			return nil, errors.Errorf(opFSM, errors.Exist, "bucket %s already exists", c.Bucket.Name)
		}
		if o := c.Bucket.Owner; o != "" {
			if _, ok := nm.Accounts[o]; !ok {
				return nil, errors.Errorf(opFSM, errors.NotExist, "create_bucket: no user %q", o)
			}
		}
		nm.Buckets[c.Bucket.Name] = *c.Bucket
	case OpDeleteBucket:
		name := c.Name
		if name == "" && c.Bucket != nil {
			name = c.Bucket.Name
		}
		if _, ok := nm.Buckets[name]; !ok {
			return nil, errors.Errorf(opFSM, errors.NotExist, "bucket %q does not exist", name)
		}
		delete(nm.Buckets, name)
		// A bucket made later under the name is another bucket: no grant carries over.
		for _, a := range nm.Accounts {
			if gs := slices.DeleteFunc(slices.Clone(a.Grants), func(g Grant) bool { return g.Bucket == name }); len(gs) != len(a.Grants) {
				if len(gs) == 0 {
					gs = nil
				}
				a.Grants = gs
				nm.Accounts[a.Name] = a
			}
		}
	case OpPutUser:
		if c.User == nil || c.User.AccessKey == "" {
			return nil, errors.E(opFSM, errors.Invalid, "put_user: missing access key")
		}
		nm.Users[c.User.AccessKey] = *c.User
	case OpPutClass:
		if c.Class == nil {
			return nil, errors.E(opFSM, errors.Invalid, "put_class: missing class")
		}
		if err := validateClass(*c.Class); err != nil {
			return nil, err
		}
		if err := fitClass(m, *c.Class); err != nil {
			return nil, err
		}
		for name, other := range nm.Classes {
			// An S3 name selects one class: mapping it here takes it from any other.
			if name != c.Class.Name && slices.ContainsFunc(other.S3Names, func(s string) bool { return slices.Contains(c.Class.S3Names, s) }) {
				other.S3Names = slices.DeleteFunc(slices.Clone(other.S3Names), func(s string) bool { return slices.Contains(c.Class.S3Names, s) })
				nm.Classes[name] = other
			}
		}
		nm.Classes[c.Class.Name] = *c.Class
	case OpSetPolicy:
		b, ok := nm.Buckets[c.Name]
		if !ok {
			return nil, errors.Errorf(opFSM, errors.NotExist, "set_policy: no bucket %q", c.Name)
		}
		if c.Policy == nil {
			return nil, errors.E(opFSM, errors.Invalid, "set_policy: missing policy")
		}
		p, err := policy.Parse([]byte(*c.Policy))
		if err != nil {
			return nil, errors.E(opFSM, err)
		}
		for _, name := range p.Classes() {
			if _, ok := m.ResolveClass(name); !ok {
				return nil, errors.Errorf(opFSM, errors.Invalid, "policy of bucket %s: no storage class %q (see cairn admin class list)", c.Name, name)
			}
		}
		b.Policy = *c.Policy
		nm.Buckets[c.Name] = b
	case OpApplyPolicy:
		b, ok := nm.Buckets[c.Name]
		switch {
		case !ok:
			return nil, errors.Errorf(opFSM, errors.NotExist, "apply_policy: no bucket %q", c.Name)
		case b.Policy == "":
			return nil, errors.Errorf(opFSM, errors.Precondition, "bucket %s has no placement policy to apply (set one with cairn admin policy set)", c.Name)
		}
		b.Apply++
		nm.Buckets[c.Name] = b
	case OpSetBucketConfig:
		b, ok := nm.Buckets[c.Name]
		switch {
		case !ok:
			return nil, errors.Errorf(opFSM, errors.NotExist, "set_bucket_config: no bucket %q", c.Name)
		case c.Key == "" || c.Doc == nil:
			return nil, errors.E(opFSM, errors.Invalid, "set_bucket_config: missing kind or document")
		case len(*c.Doc) > MaxBucketConfig:
			return nil, errors.Errorf(opFSM, errors.Invalid, "set_bucket_config: %s document of %d bytes (at most %d)", c.Key, len(*c.Doc), MaxBucketConfig)
		}
		cfg := make(map[string]string, len(b.Config)+1)
		for k, v := range b.Config {
			cfg[k] = v
		}
		if *c.Doc == "" {
			delete(cfg, c.Key)
		} else {
			cfg[c.Key] = *c.Doc
		}
		if len(cfg) == 0 {
			cfg = nil
		}
		b.Config = cfg
		nm.Buckets[c.Name] = b
	case OpRaiseLevel:
		if c.Level <= m.Level {
			return nil, errors.Errorf(opFSM, errors.Invalid, "raise_level: level %d is not above the cluster's %d", c.Level, m.Level)
		}
		nm.Level = c.Level
	case OpSetPlacement:
		if err := checkPlacementVersion(c.Placement, m.Level); err != nil {
			return nil, err
		}
		if c.Placement < 1 {
			return nil, errors.Errorf(opFSM, errors.Invalid, "set_placement: version %d (want 1 to %d)", c.Placement, MaxPlacementVersion)
		}
		nm.PlacementVersion = c.Placement
	case OpPutNotifyTarget, OpRemoveNotifyTarget:
		if err := applyNotifyCommand(nm, c); err != nil {
			return nil, err
		}
	case OpPutLink, OpRemoveLink, OpPauseLink, OpResumeLink:
		if err := applyLinkCommand(nm, c); err != nil {
			return nil, err
		}
	case OpCreateVolume, OpResizeVolume, OpAttachVolume, OpDetachVolume, OpDeleteVolume,
		OpSnapshotVolume, OpCloneVolume, OpRollbackVolume, OpDeleteSnapshot, OpReclaimDone:
		if err := applyVolumeCommand(nm, c); err != nil {
			return nil, err
		}
	case OpPutTier, OpRemoveTier, OpSetWaterMarks:
		if err := applyTierCommand(nm, c); err != nil {
			return nil, err
		}
	case OpIssueNBDClient, OpRevokeNBDClient:
		if err := applyNBDClientCommand(nm, c); err != nil {
			return nil, err
		}
	case OpSetInternodeTLS:
		it := c.Internode
		switch {
		case it == nil || it.CA == "":
			return nil, errors.E(opFSM, errors.Invalid, "set_internode_tls: missing CA")
		case len(it.CA) > MaxInternodeCA:
			return nil, errors.Errorf(opFSM, errors.Invalid, "set_internode_tls: a CA of %d bytes (at most %d)", len(it.CA), MaxInternodeCA)
		case nm.Internode != nil && nm.Internode.CA != it.CA:
			return nil, errors.E(opFSM, errors.Invalid, "set_internode_tls: the cluster has another CA (it is not replaced)")
		case nm.Internode != nil && nm.Internode.Required && !it.Required:
			return nil, errors.E(opFSM, errors.Invalid, "set_internode_tls: internode TLS is required and stays so")
		}
		v := *it
		nm.Internode = &v
	case OpAddAccount, OpSetAccount, OpRemoveAccount, OpPutKey, OpRevokeKey, OpSealUsers, OpSetGrant:
		if err := applyUserCommand(nm, c); err != nil {
			return nil, err
		}
	default:
		return nil, errors.Errorf(opFSM, errors.Invalid, "unknown command %q", c.Op)
	}
	nm.Epoch = m.Epoch + 1
	return nm, nil
}

func validateNode(n *Node) error {
	if n == nil {
		return errors.E(opFSM, errors.Invalid, "missing node")
	}
	if n.ID == "" {
		return errors.E(opFSM, errors.Invalid, "node without id")
	}
	if n.Addr == "" {
		return errors.Errorf(opFSM, errors.Invalid, "node %s without address", n.ID)
	}
	for _, r := range n.Roles {
		switch r {
		case RoleGateway, RoleStorage, RoleManager:
		default:
			return errors.Errorf(opFSM, errors.Invalid, "node %s: unknown role %q", n.ID, r)
		}
	}
	if n.Capacity < 0 || n.Weight < 0 {
		return errors.Errorf(opFSM, errors.Invalid, "node %s: negative capacity or weight", n.ID)
	}
	return nil
}

// Erasure-code limits: at most MaxK data and MaxM parity shards per stripe.
const (
	MaxK = 32
	MaxM = 16
)

func validateClass(c Class) error {
	if c.Name == "" {
		return errors.E(opFSM, errors.Invalid, "class without name")
	}
	for _, r := range c.Name {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return errors.Errorf(opFSM, errors.Invalid, "class name %q: use letters, digits, _ and -", c.Name)
		}
	}
	if c.K != 0 || c.M != 0 {
		switch {
		case c.K < 1:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: an erasure code needs at least one data shard (k=%d)", c.Name, c.K)
		case c.M < 1:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: an erasure code needs at least one parity shard (m=%d)", c.Name, c.M)
		case c.K > MaxK || c.M > MaxM:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: k=%d m=%d: at most k=%d and m=%d", c.Name, c.K, c.M, MaxK, MaxM)
		case c.N != c.K+c.M:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: an erasure code %d+%d has N=%d shards, not %d", c.Name, c.K, c.M, c.K+c.M, c.N)
		case c.W < c.K || c.W > c.N:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: the write quorum must be between k=%d and k+m=%d shards (W=%d)", c.Name, c.K, c.N, c.W)
		}
	}
	if c.Name == StandardClass && (c.EC() || c.DeviceClass != "" || c.Chunk != 0) {
		return errors.Errorf(opFSM, errors.Invalid, "class %s holds every object's record on every storage node: it is replicated, on all devices and not chunked; create another class for an erasure code, a device class or a chunk size", c.Name)
	}
	if !c.EC() && c.Name != StandardClass && c.N-1 > MaxM {
		return errors.Errorf(opFSM, errors.Invalid, "class %s: at most %d copies (N=%d)", c.Name, MaxM+1, c.N)
	}
	if c.Chunk != 0 {
		k, _ := c.Shards()
		switch {
		case c.Chunk < MinChunk || c.Chunk > MaxChunk:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: chunk size %d: between %d KiB and %d MiB", c.Name, c.Chunk, MinChunk>>10, MaxChunk>>20)
		case c.Chunk%4096 != 0:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: chunk size %d: a multiple of 4 KiB", c.Name, c.Chunk)
		case int64(k)*c.Chunk > MaxStripe:
			return errors.Errorf(opFSM, errors.Invalid, "class %s: a stripe of %d chunks of %d KiB is over %d MiB: take smaller chunks", c.Name, k, c.Chunk>>10, MaxStripe>>20)
		}
	}
	if c.N < 1 || c.W < 1 || c.R < 1 || c.D < 1 || c.W > c.N || c.R > c.N || c.D > c.N {
		return errors.Errorf(opFSM, errors.Invalid, "class %s: need 1 <= W,R,D <= N (N=%d W=%d R=%d D=%d)", c.Name, c.N, c.W, c.R, c.D)
	}
	for _, s := range c.S3Names {
		if !slices.Contains(S3StorageClasses, s) {
			return errors.Errorf(opFSM, errors.Invalid, "class %s: %q is not an S3 storage class (want one of %s)", c.Name, s, strings.Join(S3StorageClasses, ", "))
		}
	}
	return nil
}

// fitClass checks that the cluster can place c: its device class is one some storage
// node has, and an erasure code (or a replicated class other than STANDARD) has its K+M
// shards (N copies) on distinct nodes of that class. STANDARD is not refused for lacking
// nodes: it keeps one copy per node until more join (EffectiveClass).
func fitClass(m *Map, c Class) error {
	nodes, classes := 0, map[string]bool{}
	for _, n := range m.PlacementNodes() {
		classes[n.DeviceClass] = true
		if c.DeviceClass == "" || n.DeviceClass == c.DeviceClass {
			nodes++
		}
	}
	if c.DeviceClass != "" && !classes[c.DeviceClass] {
		var have []string
		for k := range classes {
			if k != "" {
				have = append(have, k)
			}
		}
		slices.Sort(have)
		list := strings.Join(have, ", ")
		if list == "" {
			list = "no tagged nodes"
		}
		return errors.Errorf(opFSM, errors.Invalid, "class %s: no storage node has device class %q (the cluster has: %s; tag nodes with cairn server --device-class)",
			c.Name, c.DeviceClass, list)
	}
	what := "storage nodes"
	if c.DeviceClass != "" {
		what = "storage nodes with device class " + c.DeviceClass
	}
	switch {
	case c.EC() && nodes < c.N:
		return errors.Errorf(opFSM, errors.Invalid, "class %s: an erasure code %d+%d puts each stripe's %d shards on distinct nodes (failure domains), and the cluster has %d %s",
			c.Name, c.K, c.M, c.N, nodes, what)
	case c.Sharded() && nodes < c.N:
		return errors.Errorf(opFSM, errors.Invalid, "class %s: its %d copies go on distinct nodes (failure domains), and the cluster has %d %s",
			c.Name, c.N, nodes, what)
	}
	return nil
}

// validateInit checks and normalizes (sorts nodes, fills empty states with up)
// an initial map.
func validateInit(m *Map) error {
	if m.Partitions < 1 {
		return errors.E(opFSM, errors.Invalid, "init: partitions must be >= 1")
	}
	if m.Replicas < 0 {
		return errors.E(opFSM, errors.Invalid, "init: negative replicas")
	}
	if err := checkPlacementVersion(m.PlacementVersion, m.Level); err != nil {
		return err
	}
	sortNodes(m.Nodes)
	addrs := make(map[string]string)
	for i := range m.Nodes {
		n := &m.Nodes[i]
		if err := validateNode(n); err != nil {
			return err
		}
		if i > 0 && m.Nodes[i-1].ID == n.ID {
			return errors.Errorf(opFSM, errors.Exist, "init: duplicate node id %s", n.ID)
		}
		if o, ok := addrs[n.Addr]; ok {
			return errors.Errorf(opFSM, errors.Exist, "init: address %s used by nodes %s and %s", n.Addr, o, n.ID)
		}
		addrs[n.Addr] = n.ID
		if n.State == "" {
			n.State = StateUp
		}
		if !n.State.Valid() {
			return errors.Errorf(opFSM, errors.Invalid, "init: node %s: unknown state %q", n.ID, n.State)
		}
	}
	for k, c := range m.Classes {
		if c.Name != k {
			return errors.Errorf(opFSM, errors.Invalid, "init: class %q stored under key %q", c.Name, k)
		}
		if err := validateClass(c); err != nil {
			return err
		}
	}
	for k, b := range m.Buckets {
		if b.Name != k {
			return errors.Errorf(opFSM, errors.Invalid, "init: bucket %q stored under key %q", b.Name, k)
		}
	}
	for k, u := range m.Users {
		if u.AccessKey != k {
			return errors.Errorf(opFSM, errors.Invalid, "init: user %q stored under key %q", u.AccessKey, k)
		}
	}
	return validateInitAccounts(m)
}

// fsm is the raft.FSM that holds the map. Raft calls Apply, Snapshot and
// Restore from a single goroutine; Current may be called from anywhere.
type fsm struct {
	cur atomic.Pointer[Map]
	// onChange, if set, is called with every new map from the raft FSM
	// goroutine and is responsible for storing it in cur (the Manager does so
	// under the lock that orders notifications); if nil, set stores it.
	onChange func(*Map)
}

func newFSM(onChange func(*Map)) *fsm {
	f := &fsm{onChange: onChange}
	f.cur.Store(emptyMap())
	return f
}

func emptyMap() *Map {
	return &Map{
		Nodes:    []Node{},
		Classes:  map[string]Class{},
		Buckets:  map[string]Bucket{},
		Users:    map[string]User{},
		Accounts: map[string]Account{},
		Keys:     map[string]Key{},
	}
}

func (f *fsm) set(m *Map) {
	if f.onChange != nil {
		f.onChange(m) // stores and publishes under the watchers' lock
	} else {
		f.cur.Store(m)
	}
}

// Apply implements raft.FSM. It returns the new *Map or an error.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var c Command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return errors.E(opFSM, errors.Invalid, fmt.Errorf("decode command: %w", err))
	}
	nm, err := applyCommand(f.cur.Load(), c)
	if err != nil {
		return err
	}
	f.set(nm)
	return nm
}

// Snapshot implements raft.FSM. Maps are immutable, so the snapshot just keeps
// the pointer.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{m: f.cur.Load()}, nil
}

// Restore implements raft.FSM: it replaces the map with the snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var m Map
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		return errors.E(errors.Op("clustermap.restore"), errors.Corrupt, err)
	}
	f.set(m.canonical())
	return nil
}

type fsmSnapshot struct{ m *Map }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := json.Marshal(s.m)
	if err == nil {
		_, err = sink.Write(b)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// The placement versions the map knows (package placement's Version): 0 and 1 are
// weighted rendezvous hashing, 2 rendezvous with bounded load.
const (
	// MaxPlacementVersion is the newest placement version this build computes.
	MaxPlacementVersion = 2
	// PlacementV2Level is the feature level from which a map may have placement
	// version 2: every node at that level computes its tables, and no node below it
	// can join a map at that level.
	PlacementV2Level = 13
)

// checkPlacementVersion refuses a placement version this build does not know (Invalid),
// and version 2 in a map below PlacementV2Level (Precondition).
func checkPlacementVersion(v, level int) error {
	switch {
	case v < 0 || v > MaxPlacementVersion:
		return errors.Errorf(opFSM, errors.Invalid, "placement version %d: this build knows 1 to %d", v, MaxPlacementVersion)
	case v >= 2 && level < PlacementV2Level:
		return errors.Errorf(opFSM, errors.Precondition, "placement version %d needs every node at feature level %d (the map is at %d)", v, PlacementV2Level, level)
	}
	return nil
}
