package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/hints"
	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/repair"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/volume"
	"github.com/cairnfs/cairn/internal/wire"
)

// NodeStats is what a node reports about itself to `cairn admin status`.
type NodeStats struct {
	Node         string `json:"node"`
	Epoch        uint64 `json:"epoch"`
	UsedBytes    int64  `json:"used_bytes"`
	FreeBytes    int64  `json:"free_bytes"`
	GarbageBytes int64  `json:"garbage_bytes"`
	IndexBytes   int64  `json:"index_bytes"`
	HintsPending int64  `json:"hints_pending"`
	// Internode body bytes this node sent and received as a client of other nodes.
	SentBytes     int64 `json:"internode_sent_bytes"`
	ReceivedBytes int64 `json:"internode_received_bytes"`
	// LastSync is the last anti-entropy round of this node's partitions.
	LastSync *repair.SyncStats `json:"last_sync,omitempty"`
	// Recovery is the copying in progress (or last done) to this node.
	Recovery *repair.SyncProgress `json:"recovery,omitempty"`
	// Damaged lists the index files in which reads found corruption (see store.Damaged);
	// DamagedReads counts the reads that failed on them.
	Damaged      []string `json:"damaged,omitempty"`
	DamagedReads int64    `json:"damaged_reads,omitempty"`
	// Buckets is this node's store's usage per bucket: its current records, each replica
	// counted by the node that holds it (store.Usage; null without the storage role,
	// absent from a build from before it).
	Buckets map[string]store.Usage `json:"buckets"`
	// UsageIncomplete says Buckets leaves out records the count at start could not read
	// (a damaged index).
	UsageIncomplete bool `json:"usage_incomplete,omitempty"`
	// Scrub is this node's deep scrub (absent without the storage role).
	Scrub *repair.ScrubStatus `json:"scrub,omitempty"`
	// Notify is this node's bucket-notification outbox and deliveries (absent without the
	// storage role).
	Notify *notify.Status `json:"notify,omitempty"`
	// Tier is this node's migration to its device class's tier (absent without water
	// marks for its device class).
	Tier *repair.TierProgress `json:"tier,omitempty"`
}

// NodeRecovery is one node's line of `cairn admin recovery`.
type NodeRecovery struct {
	Node string `json:"node"`
	repair.SyncProgress
	Error string `json:"error,omitempty"`
}

// Recovery is the answer of /admin/v1/recovery: per node and in total.
type Recovery struct {
	Nodes       []NodeRecovery `json:"nodes"`
	ObjectsToDo int64          `json:"objects_to_move"`
	BytesToDo   int64          `json:"bytes_to_move"`
	ObjectsDone int64          `json:"objects_done"`
	BytesDone   int64          `json:"bytes_done"`
	RateBytes   float64        `json:"rate_bytes_per_sec"` // observed, over the rounds in progress
	ETASeconds  float64        `json:"eta_seconds"`        // -1 when unknown
}

func nodeStats(id string, st *store.Store, h *hints.Queue, mgr *clustermap.Manager, c *rpc.Client) NodeStats {
	ns := NodeStats{Node: id, Epoch: mgr.Current().Epoch, HintsPending: h.Len(), SentBytes: c.Sent(), ReceivedBytes: c.Received()}
	if st != nil {
		s := st.Stats()
		ns.UsedBytes, ns.FreeBytes, ns.GarbageBytes, ns.IndexBytes = s.LiveBytes+s.IndexBytes, s.FreeBytes, s.GarbageBytes, s.IndexBytes
		ns.Damaged, ns.DamagedReads = st.Damaged()
		ns.Buckets, ns.UsageIncomplete = st.Usage(), !st.UsageComplete()
	}
	return ns
}

// adminHandler serves `cairn admin`: requests are signed with the cluster secret like
// internode requests (the operator's CLI holds the secret).
type adminHandler struct {
	secret *rpc.Secret
	mgr    *clustermap.Manager
	gw     *gateway.Gateway
	apply  *applyer
	vols   *volume.Service // block volumes: export reads and import writes
	rpc    *rpc.Client
	self   string
	log    *slog.Logger
	// nbdAddr is this node's NBD listener ("": none), nbdTLS whether it requires TLS.
	nbdAddr string
	nbdTLS  bool
	itls    *internodeTLS
	box     *secrets.Box // opens the tiers' credentials to probe them
	mdc     *replicator  // nil without the storage role
}

// mdcStatus is the admin API's view of replication: every link with the backlog each
// storage node holds for it, what the nodes received, and this node's investigations.
func (a *adminHandler) mdcStatus(ctx context.Context) *MDCView {
	m := a.mgr.Current()
	nv := a.notifyStatus(ctx)
	v := &MDCView{ClusterID: m.ClusterID, Links: linkStatus(m, nv.Nodes)}
	for _, n := range nv.Nodes {
		if n.MDC != nil {
			v.Applied += n.MDC.Applied
			v.Refused += n.MDC.Refused
			v.Echoes += n.MDC.Echoes
			v.Held += n.MDC.Held
			if n.MDC.LastRefusal != "" {
				v.LastRefusal = n.MDC.LastRefusal
			}
		}
	}
	if a.mdc != nil {
		v.Investigations = a.mdc.inv.list()
	}
	return v
}

// Status is the answer of /admin/v1/status.
type Status struct {
	Epoch uint64 `json:"epoch"`
	// Level is the map's feature level: what every node of the cluster can read.
	Level      int    `json:"level"`
	Digest     string `json:"digest"`
	Partitions int    `json:"partitions"`
	// Placement is the map's placement version (1: weighted rendezvous, 2: bounded load).
	Placement int                 `json:"placement"`
	Replicas  int                 `json:"replicas"`
	Class     clustermap.Class    `json:"standard"`
	Effective clustermap.Class    `json:"effective"`
	Classes   []clustermap.Class  `json:"classes"` // every class, by name
	Leader    string              `json:"leader"`
	Managers  []clustermap.Member `json:"managers"`
	Nodes     []NodeStatus        `json:"nodes"`
	Warnings  []string            `json:"warnings,omitempty"`
	// Notes say how the cluster runs when that is expected but may surprise: fewer
	// storage nodes than a class's copies, say.
	Notes   []string `json:"notes,omitempty"`
	Buckets int      `json:"buckets"`
	// BucketUsage is every bucket with its objects and bytes (see BucketStatus), by name.
	BucketUsage []BucketStatus `json:"bucket_usage"`
	// UsagePartial says some storage node did not report its usage (not answering, an
	// older build, or a damaged index it could not count all of): the buckets' figures
	// lack its copies.
	UsagePartial bool `json:"usage_partial,omitempty"`
	// Recovery sums the nodes' recovery (and rebalance) in progress, as
	// /admin/v1/recovery does, from the figures in their stats.
	Recovery RecoveryTotals       `json:"recovery"`
	Map      *clustermap.Map      `json:"-"`
	Answered map[string]NodeStats `json:"-"`
}

// BucketStatus is one bucket in Status, with its usage: Objects and Bytes count each
// object once. Every storage node counts the current records it holds (store.Usage, kept
// up to date by each write and delete, not by scans); an object's record is on the
// STANDARD class's holders whatever its class, so the sum over the storage nodes divided
// by the N of STANDARD in force (Effective.N) is the object count. It is exact when every
// copy is in place; while copies are missing (writes queued for a node, a recovery in
// progress) it is lower, while a drain or a rebalance hands copies off it is higher, and a
// storage node that does not answer leaves its copies out (UsagePartial).
type BucketStatus struct {
	Name    string `json:"name"`
	Created int64  `json:"created_unix_nano,omitempty"`
	Policy  string `json:"policy,omitempty"` // the bucket's placement rules (cairn admin policy show)
	Objects int64  `json:"objects"`
	Bytes   int64  `json:"bytes"`
	// Records and RecordBytes are the sums over the storage nodes that answered: every
	// copy of a record counted.
	Records     int64 `json:"records"`
	RecordBytes int64 `json:"record_bytes"`
	// Noncurrent and NoncurrentBytes are the versions of versioned keys that are not
	// current (one copy each, as Objects), delete markers left out.
	Noncurrent      int64 `json:"noncurrent,omitempty"`
	NoncurrentBytes int64 `json:"noncurrent_bytes,omitempty"`
	// noncurrent copies summed over the storage nodes.
	ncRecords, ncBytes int64
}

// RecoveryTotals is the sum of the storage nodes' recovery rounds in progress, with the
// rate observed and the time left (-1: unknown).
type RecoveryTotals struct {
	ObjectsToDo int64   `json:"objects_to_move"`
	BytesToDo   int64   `json:"bytes_to_move"`
	ObjectsDone int64   `json:"objects_done"`
	BytesDone   int64   `json:"bytes_done"`
	RateBytes   float64 `json:"rate_bytes_per_sec"`
	ETASeconds  float64 `json:"eta_seconds"`
}

// sumRecovery adds up the rounds in progress among ps.
func sumRecovery(ps []repair.SyncProgress, now time.Time) RecoveryTotals {
	out := RecoveryTotals{ETASeconds: -1}
	var elapsed float64
	for _, p := range ps {
		if !p.Running {
			continue
		}
		out.ObjectsToDo += p.ObjectsToDo
		out.BytesToDo += p.BytesToDo
		out.ObjectsDone += p.ObjectsDone
		out.BytesDone += p.BytesDone
		elapsed = max(elapsed, now.Sub(p.Started).Seconds())
	}
	if elapsed > 0 && out.BytesDone > 0 {
		out.RateBytes = float64(out.BytesDone) / elapsed
		out.ETASeconds = float64(out.BytesToDo-out.BytesDone) / out.RateBytes
	} else if out.ObjectsToDo == 0 {
		out.ETASeconds = 0
	}
	return out
}

// NodeStatus is one node in Status.
type NodeStatus struct {
	ID          string               `json:"id"`
	Addr        string               `json:"addr"`
	S3Addr      string               `json:"s3_addr"`
	AdminAddr   string               `json:"admin_addr"`
	Zone        string               `json:"zone"`
	DeviceClass string               `json:"device_class,omitempty"`
	State       clustermap.NodeState `json:"state"`
	Roles       []string             `json:"roles"`
	Capacity    int64                `json:"capacity"`
	Partitions  int                  `json:"partitions"`
	Stats       *NodeStats           `json:"stats,omitempty"`
	Error       string               `json:"error,omitempty"`
}

func (a *adminHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = a.secret.SignedResponses(w, r)
	defer rpc.EndResponse(w)
	if _, _, err := a.secret.Verify(r, time.Now()); err != nil {
		a.log.Warn("refused an admin request", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
		wire.WriteError(w, err)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/admin/v1/")
	q := r.URL.Query()
	switch {
	case path == "status" || path == "nodes":
		writeJSON(w, a.status(r.Context()))
	case path == "placement":
		ids, part, err := a.gw.Topology().Placement(q.Get("bucket"), q.Get("key"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		reps, err := a.gw.Replicas(r.Context(), q.Get("bucket"), q.Get("key"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, map[string]any{"bucket": q.Get("bucket"), "key": q.Get("key"), "partition": part, "nodes": ids, "replicas": reps})
	case strings.HasPrefix(path, "node/") && r.Method == http.MethodPost:
		// node/{id}/{action}
		parts := strings.Split(strings.TrimPrefix(path, "node/"), "/")
		if len(parts) != 2 {
			http.NotFound(w, r)
			return
		}
		if err := a.nodeAction(r.Context(), parts[0], parts[1]); err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, a.status(r.Context()))
	case path == "recovery":
		rec, err := a.recovery(r.Context(), r.Method, q.Get("rate"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, rec)
	case path == "scrub":
		sts, err := a.scrub(r.Context(), r.Method, q.Get("action"), q.Get("node"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, sts)
	case path == "policy":
		b, ok := a.mgr.Current().Buckets[q.Get("bucket")]
		if !ok {
			wire.WriteError(w, errors.Errorf("", errors.NotExist, "no bucket %q", q.Get("bucket")))
			return
		}
		writeJSON(w, map[string]string{"bucket": b.Name, "policy": b.Policy})
	case path == "users":
		writeJSON(w, Users(a.mgr.Current()))
	case path == "volumes":
		writeJSON(w, a.volumes(r.Context()))
	case path == "snapshots":
		writeJSON(w, a.snapshots(q.Get("volume")))
	case path == "volume-layout":
		lay, err := a.volumeLayout(r.Context(), q.Get("name"), q.Get("since"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, lay)
	case path == "volume-object":
		if err := a.volumeObject(w, r, q.Get("name"), q.Get("index")); err != nil {
			wire.WriteError(w, err)
		}
	case path == "volume/write" && r.Method == http.MethodPost:
		out, err := a.volumeWrite(r, q.Get("name"), q.Get("off"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, out)
	case path == "volume-space":
		sp, err := a.volumeSpace(r.Context())
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, sp)
	case path == "volume-client-cert" && r.Method == http.MethodPost:
		if err := a.nbdClientCert(w, r); err != nil {
			wire.WriteError(w, err)
		}
	case path == "volume-client-cert/revoke" && r.Method == http.MethodPost:
		out, err := a.revokeNBDClient(r.Context(), q.Get("serial"), q.Get("name"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, out)
	case path == "volume-client-certs":
		writeJSON(w, a.nbdClientCerts())
	case strings.HasPrefix(path, "volume/") && r.Method == http.MethodPost:
		out, err := a.volumeAction(r.Context(), strings.TrimPrefix(path, "volume/"), q)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, out)
	case path == "replace":
		writeJSON(w, a.replace(r.Context(), q.Get("bucket")))
	case path == "lifecycle":
		writeJSON(w, a.lifecycle(r.Context(), r.Method == http.MethodPost))
	case path == "internode-tls":
		st, err := a.internodeTLS(r.Context(), r.Method == http.MethodPost)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, st)
	case path == "notify":
		writeJSON(w, a.notifyStatus(r.Context()))
	case path == "mdc":
		writeJSON(w, a.mdcStatus(r.Context()))
	case path == "mdc/investigate" && r.Method == http.MethodPost:
		if a.mdc == nil {
			wire.WriteError(w, errors.E(errors.Invalid, "this node has no storage role: ask a storage node's admin address"))
			return
		}
		if err := a.mdc.Investigate(r.Context(), q.Get("link")); err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, a.mdcStatus(r.Context()))
	case path == "tiers" || strings.HasPrefix(path, "tier/"):
		out, err := a.tierAction(r, strings.TrimPrefix(strings.TrimPrefix(path, "tiers"), "tier/"))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeJSON(w, out)
	case path == "apply" && r.Method == http.MethodPost:
		serveApply(w, r, a.apply.Apply)
	default:
		http.NotFound(w, r)
	}
}

// nodeAction drains, removes or marks a node.
func (a *adminHandler) nodeAction(ctx context.Context, id, action string) error {
	m := a.mgr.Current()
	n, ok := m.Node(id)
	if !ok {
		return errors.Errorf("", errors.NotExist, "no node %q in the cluster map (see cairn admin nodes)", id)
	}
	var c clustermap.Command
	switch action {
	case "drain":
		if err := canDrain(m, n); err != nil {
			return err
		}
		if err := holdsECShards(m, n); err != nil {
			return err
		}
		c = clustermap.Command{Op: clustermap.OpSetState, NodeID: id, State: clustermap.StateDraining}
	case "out":
		c = clustermap.Command{Op: clustermap.OpSetState, NodeID: id, State: clustermap.StateOut}
	case "down", "up":
		c = clustermap.Command{Op: clustermap.OpSetState, NodeID: id, State: clustermap.NodeState(action)}
	case "remove":
		if n.State != clustermap.StateOut && n.State != clustermap.StateDraining {
			return errors.Errorf("", errors.Precondition, "node %q is %s: drain it (cairn admin drain %s) or mark it out before removing it", id, n.State, id)
		}
		if n.State != clustermap.StateOut {
			if err := holdsECShards(m, n); err != nil {
				return err
			}
		}
		if n.HasRole(clustermap.RoleStorage) {
			if err := a.drained(ctx, n); err != nil {
				return err
			}
		}
		c = clustermap.Command{Op: clustermap.OpRemoveNode, NodeID: id}
	default:
		return errors.Errorf("", errors.Invalid, "unknown node action %q", action)
	}
	if c.Op == clustermap.OpSetState && n.HasRole(clustermap.RoleStorage) && c.State != clustermap.StateUp {
		// Refuse to take away the last copies: at least one storage node must stay up.
		up := 0
		for _, x := range m.StorageNodes() {
			if x.ID != id && x.State == clustermap.StateUp {
				up++
			}
		}
		if up == 0 {
			return errors.Errorf("", errors.Precondition, "node %q is the last storage node that is up: refusing", id)
		}
	}
	_, err := a.apply.Apply(ctx, c)
	return err
}

// canDrain refuses to drain n when the storage nodes left to hold data (up, not draining,
// not n) would be fewer than a class's copies: the drain could never finish, and
// draining the holders of the only copies would strand them.
func canDrain(m *clustermap.Map, n clustermap.Node) error {
	if !n.HasRole(clustermap.RoleStorage) || n.State == clustermap.StateDraining {
		return nil
	}
	left, draining := 0, []string{}
	for _, x := range m.StorageNodes() {
		switch {
		case x.ID == n.ID:
		case x.State == clustermap.StateDraining:
			draining = append(draining, x.ID)
		case x.State == clustermap.StateUp:
			left++
		}
	}
	need := 1
	for _, c := range m.Classes {
		need = max(need, c.N)
	}
	if std, ok := m.Class(""); ok {
		need = max(need, std.N)
	} else {
		need = max(need, m.Replicas)
	}
	if left >= need {
		return nil
	}
	also := ""
	if len(draining) > 0 {
		also = " (" + strings.Join(draining, ", ") + " already draining)"
	}
	return errors.Errorf("", errors.Precondition,
		"draining %s would leave %d storage node(s) up to hold %d copies of each object%s: refusing; add nodes first, or wait for the other drain to finish and remove that node",
		n.ID, left, need, also)
}

// holdsECShards refuses to drain (or remove a drained) node that holds shards of an
// erasure-coded volume: those shards are placed on the nodes the volume was created over
// and never move (docs/design/ec-volumes.md), so a drain would finish without them and
// the node's removal would take a shard of every data object with it. Marking a dead
// node out stays allowed: the volume then runs with one shard fewer.
func holdsECShards(m *clustermap.Map, n clustermap.Node) error {
	var vols []string
	for name, v := range m.Volumes {
		if slices.Contains(v.Nodes, n.ID) {
			vols = append(vols, name)
		}
	}
	if len(vols) == 0 {
		return nil
	}
	slices.Sort(vols)
	return errors.Errorf("", errors.Precondition,
		"node %s holds shards of the erasure-coded volume(s) %s, which do not move off a draining node: export and delete them first (cairn volume export), or mark the node out only if it is lost",
		n.ID, strings.Join(vols, ", "))
}

// drained returns nil if storage node n holds nothing that its partitions' current holders
// have not confirmed: it is out and does not answer (its data is lost and re-created
// from the other copies), or it answers that it holds no record outside its placement.
func (a *adminHandler) drained(ctx context.Context, n clustermap.Node) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var p repair.SyncProgress
	err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathRecovery, Query: map[string][]string{"held": {"1"}}}, &p)
	switch {
	case err != nil && n.State == clustermap.StateOut:
		return nil
	case err != nil:
		return errors.Errorf("", errors.Precondition, "node %q is %s and cannot tell whether it still holds data (%v): if it is lost, mark it out first (cairn admin mark %s out)", n.ID, n.State, err, n.ID)
	case p.HandoffObjects > 0:
		return errors.Errorf("", errors.Precondition, "node %q still holds %d objects (%s) that their new holders have not all confirmed: the drain is not finished (see cairn admin recovery); removing it now could lose the only copies",
			n.ID, p.HandoffObjects, humanBytes(p.HandoffBytes))
	}
	return nil
}

// humanBytes formats n bytes with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTPE"[exp]) + "iB"
}

// recovery gathers every storage node's recovery progress, after setting their copy rate
// when method is POST (rate: bytes per second, "0" for unlimited).
func (a *adminHandler) recovery(ctx context.Context, method, rate string) (*Recovery, error) {
	if method == http.MethodPost {
		v, err := strconv.ParseInt(rate, 10, 64)
		if err != nil || v < 0 {
			return nil, errors.Errorf("", errors.Invalid, "bad rate %q: want bytes per second, 0 for unlimited", rate)
		}
	}
	nodes := a.mgr.Current().StorageNodes()
	out := &Recovery{Nodes: make([]NodeRecovery, len(nodes)), ETASeconds: -1}
	for i, n := range nodes {
		out.Nodes[i].Node = n.ID
	}
	a.askStorageNodes(ctx, nodes, func(ctx context.Context, i int, n clustermap.Node) error {
		req := &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathRecovery}
		if method == http.MethodPost {
			req.Method, req.Query = http.MethodPost, map[string][]string{"rate": {rate}}
		}
		return a.rpc.DoJSON(ctx, req, &out.Nodes[i].SyncProgress)
	}, func(i int, err string) { out.Nodes[i].Error = err })
	ps := make([]repair.SyncProgress, len(out.Nodes))
	for i, n := range out.Nodes {
		ps[i] = n.SyncProgress
	}
	t := sumRecovery(ps, time.Now())
	out.ObjectsToDo, out.BytesToDo, out.ObjectsDone, out.BytesDone, out.RateBytes, out.ETASeconds = t.ObjectsToDo, t.BytesToDo, t.ObjectsDone, t.BytesDone, t.RateBytes, t.ETASeconds
	return out, nil
}

// scrub forwards a scrub action (or a status request) to one node or every storage node.
func (a *adminHandler) scrub(ctx context.Context, method, action, node string) ([]repair.ScrubStatus, error) {
	m := a.mgr.Current()
	var nodes []clustermap.Node
	for _, n := range m.StorageNodes() {
		if node == "" || n.ID == node {
			nodes = append(nodes, n)
		}
	}
	if node != "" && len(nodes) == 0 {
		return nil, errors.Errorf("", errors.NotExist, "no storage node %q in the cluster map (see cairn admin nodes)", node)
	}
	if method == http.MethodPost && action != "start" && action != "pause" {
		return nil, errors.Errorf("", errors.Invalid, "unknown scrub action %q (want start or pause)", action)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := make([]repair.ScrubStatus, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathScrub}
			if method == http.MethodPost {
				req.Method, req.Query = http.MethodPost, map[string][]string{"action": {action}}
			}
			if err := a.rpc.DoJSON(ctx, req, &out[i]); err != nil {
				out[i] = repair.ScrubStatus{Node: n.ID, State: "unreachable: " + err.Error()}
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// NotifyView is the admin API's view of bucket notifications: the targets (without
// their secrets) and every storage node's outbox and deliveries.
type NotifyView struct {
	Targets []NotifyTargetInfo `json:"targets"`
	Nodes   []NotifyStatus     `json:"nodes"`
}

// notifyStatus asks every storage node for its notification figures.
func (a *adminHandler) notifyStatus(ctx context.Context) *NotifyView {
	m := a.mgr.Current()
	v := &NotifyView{Targets: NotifyTargets(m)}
	nodes := m.StorageNodes()
	v.Nodes = make([]NotifyStatus, len(nodes))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			if err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathNotify}, &v.Nodes[i]); err != nil {
				v.Nodes[i] = NotifyStatus{Node: n.ID, Error: err.Error()}
			}
			v.Nodes[i].Node = n.ID
		})
	}
	wg.Wait()
	return v
}

// status gathers the map, the managers and every node's own figures.
func (a *adminHandler) status(ctx context.Context) *Status {
	m := a.mgr.Current()
	st := &Status{Epoch: m.Epoch, Level: m.Level, Digest: m.Digest(), Partitions: m.Partitions, Placement: max(m.PlacementVersion, 1), Replicas: m.Replicas, Buckets: len(m.Buckets), Map: m}
	st.Class, _ = m.Class("")
	st.Effective = m.EffectiveClass(st.Class)
	for _, c := range m.Classes {
		st.Classes = append(st.Classes, c)
	}
	sort.Slice(st.Classes, func(i, j int) bool { return st.Classes[i].Name < st.Classes[j].Name })
	st.Leader, _ = a.mgr.Leader()
	st.Managers, _ = a.mgr.Members()
	counts := map[string]int{}
	if t, err := a.gw.Topology().Table(); err == nil {
		counts = t.Counts()
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	st.Nodes = make([]NodeStatus, len(m.Nodes))
	for i, n := range m.Nodes {
		st.Nodes[i] = NodeStatus{ID: n.ID, Addr: n.Addr, S3Addr: n.S3Addr, AdminAddr: n.AdminAddr, Zone: n.Zone, DeviceClass: n.DeviceClass, State: n.State,
			Roles: n.Roles, Capacity: n.Capacity, Partitions: counts[n.ID]}
		if n.State == clustermap.StateOut {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ns NodeStats
			err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathStats}, &ns)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				st.Nodes[i].Error = err.Error()
				return
			}
			st.Nodes[i].Stats = &ns
		}()
	}
	wg.Wait()
	st.usage(m)
	storage := len(m.StorageNodes())
	if st.Class.N > storage {
		// Not a warning: there is no node that could hold the missing copies. Each object
		// has one copy per storage node, and gets the others as nodes join.
		st.Notes = append(st.Notes, "STANDARD keeps "+itoa(st.Effective.N)+" cop"+plural(st.Effective.N, "y", "ies")+
			" of each object, one per storage node; it asks for "+itoa(st.Class.N)+", which objects get as storage nodes join")
	}
	if st.Leader == "" {
		st.Warnings = append(st.Warnings, "no Raft leader: the cluster map cannot change (buckets, joins, node states) until a majority of the voting managers answers again; objects are still read and written")
	}
	for _, n := range st.Nodes {
		if n.State == clustermap.StateDown || n.Error != "" {
			st.Warnings = append(st.Warnings, "node "+n.ID+" is not answering: reads go to the other replicas, and writes that reach their quorum without it are queued for it")
		}
		if nf := n.Stats; nf != nil && nf.Notify != nil {
			var ts []string
			for t, e := range nf.Notify.LastErrors {
				if !strings.HasPrefix(t, notify.LinkPrefix) {
					ts = append(ts, t+" ("+e+")")
				}
			}
			if nf.Notify.OldestAge > 60 && len(ts) > 0 {
				sort.Strings(ts)
				st.Warnings = append(st.Warnings, fmt.Sprintf("node %s: %d bucket notification events waiting, the oldest for %.0fs; failing: %s (cairn admin notify status)",
					n.ID, nf.Notify.Pending, nf.Notify.OldestAge, strings.Join(ts, ", ")))
			}
			for t, b := range nf.Notify.Targets {
				if link, ok := strings.CutPrefix(t, notify.LinkPrefix); ok && b.OldestAge > 60 {
					why := nf.Notify.LastErrors[t]
					if why == "" {
						why = "sending"
					}
					st.Warnings = append(st.Warnings, fmt.Sprintf("node %s: replication link %s lags %.0fs with %d changes (%d bytes) waiting: %s (cairn mdc status)",
						n.ID, link, b.OldestAge, b.Entries, b.Bytes, why))
				}
			}
			if nf.Notify.Dead > 0 {
				st.Warnings = append(st.Warnings, fmt.Sprintf("node %s keeps %d bucket notification events as dead letters (they failed --notify-max-attempts sends)", n.ID, nf.Notify.Dead))
			}
		}
		if n.Stats != nil && len(n.Stats.Damaged) > 0 {
			st.Warnings = append(st.Warnings, "node "+n.ID+"'s index is damaged ("+strings.Join(n.Stats.Damaged, ", ")+
				"): reads it cannot do go to other replicas; drain it and replace its data directory")
		}
	}
	sort.Strings(st.Warnings)
	return st
}

// usage fills in the buckets' usage and the recovery totals from the nodes' stats.
func (st *Status) usage(m *clustermap.Map) {
	byName := map[string]*BucketStatus{}
	for _, b := range m.Buckets {
		st.BucketUsage = append(st.BucketUsage, BucketStatus{Name: b.Name, Created: b.Created, Policy: b.Policy})
	}
	sort.Slice(st.BucketUsage, func(i, j int) bool { return st.BucketUsage[i].Name < st.BucketUsage[j].Name })
	for i := range st.BucketUsage {
		byName[st.BucketUsage[i].Name] = &st.BucketUsage[i]
	}
	var rec []repair.SyncProgress
	for _, n := range st.Nodes {
		if !slices.Contains(n.Roles, clustermap.RoleStorage) || n.State == clustermap.StateOut {
			continue
		}
		if n.Stats == nil || n.Stats.Buckets == nil || n.Stats.UsageIncomplete { // not answering, a build without usage figures, a damaged index
			st.UsagePartial = true
		}
		if n.Stats == nil {
			continue
		}
		if n.Stats.Recovery != nil {
			rec = append(rec, *n.Stats.Recovery)
		}
		for name, u := range n.Stats.Buckets {
			if b := byName[name]; b != nil {
				b.Records += u.Objects
				b.RecordBytes += u.Bytes
				b.ncRecords += u.Noncurrent
				b.ncBytes += u.NoncurrentBytes
			}
		}
	}
	copies := int64(max(st.Effective.N, 1))
	for i := range st.BucketUsage {
		b := &st.BucketUsage[i]
		b.Objects = (b.Records + copies/2) / copies
		b.Bytes = (b.RecordBytes + copies/2) / copies
		b.Noncurrent = (b.ncRecords + copies/2) / copies
		b.NoncurrentBytes = (b.ncBytes + copies/2) / copies
	}
	st.Recovery = sumRecovery(rec, time.Now())
}

func itoa(n int) string { return strconv.Itoa(n) }

// NodeReplace is one storage node's line of `cairn admin policy status`.
type NodeReplace struct {
	Node string `json:"node"`
	repair.ApplyProgress
	Error string `json:"error,omitempty"`
}

// Replace is the answer of /admin/v1/replace: the progress of re-placing a bucket's
// objects by its policy (cairn admin policy apply), per storage node.
type Replace struct {
	Bucket string        `json:"bucket"`
	Gen    uint64        `json:"gen"`  // the apply generation asked for in the map
	Done   bool          `json:"done"` // every storage node finished it
	Nodes  []NodeReplace `json:"nodes"`
}

// replace gathers every storage node's progress on bucket's apply requests.
func (a *adminHandler) replace(ctx context.Context, bucket string) *Replace {
	m := a.mgr.Current()
	out := &Replace{Bucket: bucket, Gen: m.Buckets[bucket].Apply, Done: true}
	nodes := m.StorageNodes()
	out.Nodes = make([]NodeReplace, len(nodes))
	for i, n := range nodes {
		out.Nodes[i].Node = n.ID
	}
	a.askStorageNodes(ctx, nodes, func(ctx context.Context, i int, n clustermap.Node) error {
		var ps []repair.ApplyProgress
		if err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: n.Addr, Path: wire.PathReplace}, &ps); err != nil {
			return err
		}
		for _, p := range ps {
			if p.Bucket == bucket {
				out.Nodes[i].ApplyProgress = p
			}
		}
		return nil
	}, func(i int, err string) { out.Nodes[i].Error = err })
	for _, n := range out.Nodes {
		if n.Done < out.Gen {
			out.Done = false
		}
	}
	return out
}

// NodeLifecycle is one storage node's lifecycle state for one bucket, in the answer of
// /admin/v1/lifecycle.
type NodeLifecycle struct {
	repair.LifecycleProgress
	Error string `json:"error,omitempty"`
}

// lifecycle gathers every storage node's lifecycle runner state (after asking each to
// start a round of every bucket now, with run).
func (a *adminHandler) lifecycle(ctx context.Context, run bool) []NodeLifecycle {
	nodes := a.mgr.Current().StorageNodes()
	per := make([][]NodeLifecycle, len(nodes))
	method := http.MethodGet
	if run {
		method = http.MethodPost
	}
	a.askStorageNodes(ctx, nodes, func(ctx context.Context, i int, n clustermap.Node) error {
		var ps []repair.LifecycleProgress
		if err := a.rpc.DoJSON(ctx, &rpc.Request{Method: method, Addr: n.Addr, Path: wire.PathLifecycle}, &ps); err != nil {
			return err
		}
		for _, p := range ps {
			per[i] = append(per[i], NodeLifecycle{LifecycleProgress: p})
		}
		return nil
	}, func(i int, err string) {
		per[i] = []NodeLifecycle{{LifecycleProgress: repair.LifecycleProgress{Node: nodes[i].ID}, Error: err}}
	})
	var out []NodeLifecycle
	for _, ps := range per {
		out = append(out, ps...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Bucket < out[j].Bucket })
	return out
}

// askStorageNodes calls ask for each of nodes at once (5 s in all), and fail with the
// error of those that are down or whose ask failed.
func (a *adminHandler) askStorageNodes(ctx context.Context, nodes []clustermap.Node, ask func(context.Context, int, clustermap.Node) error, fail func(int, string)) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.State == clustermap.StateDown {
			fail(i, "down")
			continue
		}
		wg.Go(func() {
			if err := ask(ctx, i, n); err != nil {
				fail(i, err.Error())
			}
		})
	}
	wg.Wait()
}

// plural returns one for n == 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// internodeTLS answers the cluster's internode TLS status, or turns it on (enable) through
// the Raft leader.
func (a *adminHandler) internodeTLS(ctx context.Context, enable bool) (wire.InternodeStatus, error) {
	if !enable {
		return a.itls.status(ctx), nil
	}
	if a.mgr.IsLeader() {
		return a.itls.enable(ctx, 20*time.Second)
	}
	_, addr := a.mgr.Leader()
	if addr == "" {
		return wire.InternodeStatus{}, errors.E(errors.Transient, "no raft leader")
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var st wire.InternodeStatus
	err := a.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodPost, Addr: addr, Path: wire.PathInternodeTLS, Query: map[string][]string{"action": {"enable"}}}, &st)
	return st, err
}
