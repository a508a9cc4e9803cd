package server

import (
	"context"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
)

// notifier is a storage node's bucket notifications (docs/design/notifications.md): the
// outbox entries its store writes with each change of a bucket that has a notification
// configuration (the map's), and the Deliverer that sends them to the targets the map
// defines, opened here with their secrets.
type notifier struct {
	maps atomic.Pointer[clustermap.Manager] // set once the manager is open
	stk  notify.Stacker
	d    atomic.Pointer[notify.Deliverer] // set once the gateway is open
	mdc  atomic.Pointer[replicator]       // set once the gateway is open
	box  *secrets.Box
	log  *slog.Logger
	st   *store.Store // set once open

	mu   sync.Mutex
	open map[string]openTarget
}

type openTarget struct {
	spec clustermap.NotifyTarget
	t    notify.Target
}

func newNotifier(box *secrets.Box, log *slog.Logger) *notifier {
	nt := &notifier{box: box, log: log.With("component", "notify"), open: map[string]openTarget{}}
	nt.stk.Doc = nt.doc
	nt.stk.Links = func(bucket, key, origin string) []string {
		if r := nt.mdc.Load(); r != nil {
			return r.links(bucket, key, origin)
		}
		return nil
	}
	return nt
}

// storeHooks sets the store configuration's outbox hooks.
func (nt *notifier) storeHooks(c *store.Config) {
	c.Outbox = nt.stk.Entries
	c.OutboxMeta = nt.stk.MetaEntries
	c.OnOutbox = func() {
		if d := nt.d.Load(); d != nil {
			d.Kick()
		}
	}
}

func (nt *notifier) doc(bucket string) string {
	mgr := nt.maps.Load()
	if mgr == nil {
		return ""
	}
	return mgr.Current().Buckets[bucket].Config["notification"]
}

// target returns the open target of that name, (re)opening it when the map's definition
// changed. A target whose secret cannot be opened fails every send (its events wait).
func (nt *notifier) target(name string) (notify.Target, bool) {
	if link, ok := strings.CutPrefix(name, notify.LinkPrefix); ok {
		r := nt.mdc.Load()
		if r == nil {
			return failing{errors.E(errors.Transient, "replication is not started yet")}, true
		}
		return r.target(link), true
	}
	mgr := nt.maps.Load()
	if mgr == nil {
		return failing{errors.E(errors.Transient, "the cluster map is not loaded yet")}, true
	}
	spec, ok := mgr.Current().Targets[name]
	nt.mu.Lock()
	defer nt.mu.Unlock()
	cur, had := nt.open[name]
	if had && (!ok || cur.spec != spec) {
		cur.t.Close()
		delete(nt.open, name)
		had = false
	}
	if !ok {
		return nil, false
	}
	if had {
		return cur.t, true
	}
	ts := notify.TargetSpec{Name: name, Webhook: spec.Webhook, Redis: spec.Redis, List: spec.List, Channel: spec.Channel}
	if spec.Secret != "" {
		b, err := nt.box.Open(secrets.NotifyTarget, name, spec.Secret)
		if err != nil {
			nt.log.Error("the secret of a notification target does not open with this cluster's secret: its events wait", "target", name, "err", err)
			return failing{err}, true
		}
		ts.Secret = string(b)
	}
	t, err := notify.Open(ts)
	if err != nil {
		return failing{err}, true
	}
	nt.open[name] = openTarget{spec: spec, t: t}
	return t, true
}

func (nt *notifier) close() error {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	for name, o := range nt.open {
		o.t.Close()
		delete(nt.open, name)
	}
	return nil
}

// failing is a target that cannot be used: every send fails with its error.
type failing struct{ err error }

func (f failing) Send(context.Context, [][]byte) error { return f.err }
func (f failing) Close() error                         { return nil }

// NotifyStatus is a node's notification figures (GET /internal/v1/notify).
type NotifyStatus struct {
	Node string `json:"node"`
	notify.Status
	// MDC is what the node received over replication links since it started.
	MDC   *MDCReceived `json:"mdc,omitempty"`
	Error string       `json:"error,omitempty"` // the node could not be asked
}

// MDCReceived is what a node received over replication links since it started.
type MDCReceived struct {
	Applied    int64 `json:"applied"`
	Refused    int64 `json:"refused"`
	Superseded int64 `json:"superseded"` // stacked changes not sent: their version was gone
	// Echoes: stacked changes not sent because they came from the link's remote; Held:
	// received changes that were already here (a retry, an echo).
	Echoes      int64  `json:"echoes"`
	Held        int64  `json:"held"`
	LastRefusal string `json:"last_refusal,omitempty"`
}

func (r *replicator) received() *MDCReceived {
	m := &MDCReceived{Applied: r.applied.Load(), Refused: r.refused.Load(), Superseded: r.superseded.Load(),
		Echoes: r.echoes.Load(), Held: r.held.Load()}
	if s := r.lastRefusal.Load(); s != nil {
		m.LastRefusal = *s
	}
	return m
}

// NotifyTargetInfo is a target as the admin API shows it: never its secret.
type NotifyTargetInfo struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"` // webhook or redis
	Webhook   string `json:"webhook,omitempty"`
	Redis     string `json:"redis,omitempty"`
	List      string `json:"list,omitempty"`
	Channel   string `json:"channel,omitempty"`
	HasSecret bool   `json:"has_secret"`
	QueueARN  string `json:"queue_arn"`
	TopicARN  string `json:"topic_arn"`
}

// NotifyTargets lists the map's notification targets, sorted by name.
func NotifyTargets(m *clustermap.Map) []NotifyTargetInfo {
	out := make([]NotifyTargetInfo, 0, len(m.Targets))
	for _, t := range m.Targets {
		kind := "webhook"
		if t.Redis != "" {
			kind = "redis"
		}
		out = append(out, NotifyTargetInfo{Name: t.Name, Kind: kind, Webhook: t.Webhook, Redis: t.Redis, List: t.List, Channel: t.Channel,
			HasSecret: t.Secret != "", QueueARN: notify.QueueARN(t.Name), TopicARN: notify.TopicARN(t.Name)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// exportMetrics registers the Deliverer's figures.
func (nt *notifier) exportMetrics(m *metrics.Metrics) {
	d := nt.d.Load()
	st := func(f func(notify.Status) float64) func() float64 { return func() float64 { return f(d.Status()) } }
	m.GaugeFunc("cairn_notify_pending", "Bucket notification events in this node's outbox, not yet delivered (or dropped once their first holder has them).", st(func(s notify.Status) float64 { return float64(s.Pending) }))
	m.GaugeFunc("cairn_notify_dead_letters", "Bucket notification events kept as dead letters on this node (their target failed --notify-max-attempts times).", st(func(s notify.Status) float64 { return float64(s.Dead) }))
	m.GaugeFunc("cairn_notify_oldest_seconds", "Age of the oldest event in this node's outbox (0: none).", st(func(s notify.Status) float64 { return s.OldestAge }))
	m.CounterFunc("cairn_notify_delivered_total", "Bucket notification events this node delivered and its targets acknowledged.", st(func(s notify.Status) float64 { return float64(s.Delivered) }))
	m.CounterFunc("cairn_notify_dropped_total", "Outbox entries this node dropped because the key's first live holder has them.", st(func(s notify.Status) float64 { return float64(s.Dropped) }))
	m.CounterFunc("cairn_notify_retries_total", "Failed sends to notification targets (each retried with backoff).", st(func(s notify.Status) float64 { return float64(s.Retries) }))
	m.CounterFunc("cairn_notify_dead_letters_total", "Events this node made dead letters since it started.", st(func(s notify.Status) float64 { return float64(s.DeadTotal) }))
}

// notifyHeld is the Deliverer's FirstHolds: whether the first live holder of bucket/key
// wrote outbox entries for version hlc, and sent them (asked over the internode
// protocol, signed like every internode request).
func (n *instance) notifyHeld(ctx context.Context, bucket, key string, hlc uint64) (held, sent bool, err error) {
	_, addr, local, err := n.gw.FirstHolderOf(bucket, key)
	if err != nil {
		return false, false, err
	}
	if local {
		return n.st.OutboxHeld(bucket, key, hlc)
	}
	var ans heldAnswer
	req := &rpc.Request{Method: http.MethodGet, Addr: addr, Path: wire.PathNotifyHeld,
		Query: map[string][]string{"bucket": {bucket}, "key": {key}, "version": {strconv.FormatUint(hlc, 10)}}}
	if err := n.client.DoJSON(ctx, req, &ans); err != nil {
		return false, false, err
	}
	return ans.Held, ans.Sent, nil
}

// heldAnswer is the answer of wire.PathNotifyHeld.
type heldAnswer struct {
	Held bool `json:"held"` // the node wrote the change's outbox entries
	Sent bool `json:"sent"` // and sent them all (or made them dead letters)
}

// serveHeld answers wire.PathNotifyHeld.
func (nt *notifier) serveHeld(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v, err := strconv.ParseUint(q.Get("version"), 10, 64)
	if err != nil || q.Get("bucket") == "" {
		wire.WriteError(w, errors.E(errors.Invalid, "notify held: bucket, key and version"))
		return
	}
	held, sent, err := nt.st.OutboxHeld(q.Get("bucket"), q.Get("key"), v)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, heldAnswer{Held: held, Sent: sent})
}
