package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/mdc"
	"github.com/cairnfs/cairn/internal/metrics"
	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/wire"
)

// replicator is a storage node's side of multi-data-center replication
// (docs/design/mdc.md). Sending: the store stacks an outbox entry per link with every
// committed change (the notifier's Stacker asks links), and the notification Deliverer
// sends them, the first live holder of each key sending its entries, through linkTarget:
// a batch of records and bodies POSTed to the remote's link endpoint, signed with the
// link secret. Receiving: the link endpoint (the paths under wire.PathMDC on the node
// listener, authenticated by the link's secret instead of the cluster's) applies each
// change through this cluster's write path (gateway.ApplyRemote), and answers the
// investigations of the remote.
type replicator struct {
	mgr     *clustermap.Manager
	gw      *gateway.Gateway
	box     *secrets.Box
	log     *slog.Logger
	hc      *http.Client
	dataDir string
	// dropTest, from $CAIRN_TEST_MDC_DROP (tests only): changes of keys with this prefix
	// get no link entry, as if it was lost; the investigation must repair them.
	dropTest string
	// confirmed reports whether the node's map was confirmed by the Raft leader since it
	// started (nil: always): until then a link missing from it may only be missing from
	// a stale map.
	confirmed func() bool

	mu      sync.Mutex
	secrets map[string]linkSecret   // by link name
	clients map[string]*http.Client // of links with a CA of their own, by the CA
	// learned are the remote cluster ids of links whose map entry has none (the first
	// side of a pair), from the remote's signed requests and answers, by linkKey.
	learned map[string]string

	applied, refused, superseded atomic.Int64
	// echoes: stacked changes not sent because they came from the link's remote cluster;
	// held: received changes this cluster already held (a retry, or an echo from a
	// sender that did not know their origin).
	echoes, held atomic.Int64
	lastRefusal  atomic.Pointer[string]

	inv investigations
}

type linkSecret struct {
	sealed string
	s      *rpc.Secret
}

// The link endpoint's header: which link of the receiving cluster a request is for.
const hdrLink = "X-Cairn-Link"

// maxLinkRequest bounds a batch a receiver spools (bodies included).
const maxLinkRequest = 6 << 40

func newReplicator(mgr *clustermap.Manager, gw *gateway.Gateway, box *secrets.Box, dataDir string, log *slog.Logger) *replicator {
	return &replicator{mgr: mgr, gw: gw, box: box, dataDir: dataDir, log: log.With("component", "mdc"),
		hc: &http.Client{Transport: rpc.NewTransport()}, secrets: map[string]linkSecret{}, clients: map[string]*http.Client{}, learned: map[string]string{}, dropTest: os.Getenv("CAIRN_TEST_MDC_DROP")}
}

// links returns the links that send bucket's changes, for the Stacker: not the link to
// origin, the cluster the change came from, if this node knows which that is.
func (r *replicator) links(bucket, key, origin string) []string {
	m := r.mgr.Current()
	if len(m.Links) == 0 {
		return nil
	}
	if r.dropTest != "" && strings.HasPrefix(key, r.dropTest) {
		return nil
	}
	var out []string
	for name, l := range m.Links {
		if l.Send && l.Replicates(bucket) && (origin == "" || r.remote(l) != origin) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// linkKey names a link's definition: a link made again to another endpoint or with
// another secret may lead to another cluster.
func linkKey(l clustermap.Link) string { return l.Name + "\x00" + l.Endpoint + "\x00" + l.Secret }

// remote returns the id of link l's remote cluster: the map's, or one learned from the
// remote ("": not known yet).
func (r *replicator) remote(l clustermap.Link) string {
	if l.Remote != "" {
		return l.Remote
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.learned[linkKey(l)]
}

// learn records id as link l's remote cluster, from a request or an answer signed with
// its secret.
func (r *replicator) learn(l clustermap.Link, id string) {
	if l.Remote != "" || id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.learned[linkKey(l)] = id
}

// client returns the HTTP client of link l's remote: one verifying its certificate
// against the link's CA, if it has one (kept per CA), else the system's roots.
func (r *replicator) client(l clustermap.Link) (*http.Client, error) {
	if l.CA == "" {
		return r.hc, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[l.CA]; ok {
		return c, nil
	}
	c, err := linkClient(l.CA)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", l.Name, err)
	}
	r.clients[l.CA] = c
	return c, nil
}

// linkClient returns an HTTP client trusting only the CA certificates caPEM ("": the
// system's roots).
func linkClient(caPEM string) (*http.Client, error) {
	tr := rpc.NewTransport()
	if caPEM != "" {
		pool, err := clustermap.LinkCAPool(caPEM)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}, nil
}

// secret returns the opened secret of link l (kept, so that its replay guard lasts).
func (r *replicator) secret(l clustermap.Link) (*rpc.Secret, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.secrets[l.Name]; ok && s.sealed == l.Secret {
		return s.s, nil
	}
	plain, err := r.box.Open(secrets.MDCLink, l.Name, l.Secret)
	if err != nil {
		return nil, errors.E(errors.Permission, fmt.Errorf("the secret of link %s does not open with this cluster's secret: %w", l.Name, err))
	}
	s, err := rpc.NewSecret(string(plain))
	if err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("link %s: %w", l.Name, err))
	}
	r.secrets[l.Name] = linkSecret{sealed: l.Secret, s: s}
	return s, nil
}

// target returns the Deliverer's target for outbox target name LinkPrefix+link.
func (r *replicator) target(link string) notify.Target {
	l, ok := r.mgr.Current().Links[link]
	switch {
	case (!ok || !l.Send) && r.confirmed != nil && !r.confirmed():
		// A restarted node's map is its last snapshot until the log is applied: the
		// link may be there, and its entries must not be dropped for a stale map.
		return failing{fmt.Errorf("link %s is not in this node's cluster map, which is not confirmed by the Raft leader since the node started: %w", link, notify.ErrWait)}
	case !ok || !l.Send:
		return discard{} // unlinked (or made receive-only): its changes are dropped
	case l.Paused:
		return failing{fmt.Errorf("link %s is paused (cairn mdc resume %s): %w", link, link, notify.ErrWait)}
	}
	return &linkTarget{r: r, link: l}
}

// discard is the target of a link that is gone: every entry is taken and dropped.
type discard struct{}

func (discard) Send(context.Context, [][]byte) error               { return nil }
func (discard) SendEntries(context.Context, []*notify.Entry) error { return nil }
func (discard) Close() error                                       { return nil }

// linkTarget sends entries to the remote cluster of one link.
type linkTarget struct {
	r    *replicator
	link clustermap.Link
}

func (t *linkTarget) Send(context.Context, [][]byte) error {
	return errors.E(errors.Invalid, "a replication link takes entries")
}
func (t *linkTarget) Close() error { return nil }

// SendEntries ships the changes of es in one batch: each change's record as this cluster
// holds it now and its body. A version that is gone (overwritten, deleted, purged) is
// left out: the change that replaced it has its own entry.
func (t *linkTarget) SendEntries(ctx context.Context, es []*notify.Entry) error {
	// Changes that came from the remote itself (stacked before this node knew the
	// remote's id) are not sent back.
	if remote := t.r.remote(t.link); remote != "" {
		kept := es[:0:0]
		for _, e := range es {
			if e.Origin == remote {
				t.r.echoes.Add(1)
				continue
			}
			kept = append(kept, e)
		}
		if es = kept; len(es) == 0 {
			return nil
		}
	}
	ans, err := t.r.post(ctx, t.link, wire.PathMDCApply, nil, func(w io.Writer) error { return t.r.writeBatch(ctx, es, w) })
	if err == nil {
		t.r.learn(t.link, ans.Cluster)
	}
	return err
}

// ApplyAnswer is the answer of a batch: what the receiver did with its changes.
type ApplyAnswer struct {
	Applied    int    `json:"applied"`
	Refused    int    `json:"refused"` // a version under Object Lock, an encrypted object...
	LastRefuse string `json:"last_refusal,omitempty"`
	// Held: changes the receiver already held (skipped: a retry, an echo).
	Held int `json:"held,omitempty"`
	// Cluster is the receiver's cluster id (absent from binaries before it).
	Cluster string `json:"cluster,omitempty"`
}

// smallBody is the body size up to which writeBatch reads a change's body into memory
// rather than streaming it through a pipe.
const smallBody = 64 << 10

// writeBatch writes the changes of es to w.
func (r *replicator) writeBatch(ctx context.Context, es []*notify.Entry, w io.Writer) error {
	bw := mdc.NewWriter(w)
	var buf bytes.Buffer
	for _, e := range es {
		c := &mdc.Change{Bucket: e.Bucket, Key: e.Key, Origin: e.Origin}
		if e.Change == notify.ChangeDelete {
			c.Rec = object.Object{HLC: e.HLC, ModTime: e.ModTime, Deleted: true, Versioned: e.Versioned, DeleteMarker: e.Marker, Purged: e.Purged}
			if err := bw.Write(c, nil); err != nil {
				return err
			}
			continue
		}
		rd, err := r.gw.OpenVersion(ctx, e.Bucket, e.Key, e.HLC)
		if errors.Is(errors.NotExist, err) {
			r.superseded.Add(1)
			continue
		}
		if err != nil {
			return err
		}
		c.Rec = *rd.Info()
		if c.Rec.HLC != e.HLC || c.Rec.Deleted {
			rd.Close()
			r.superseded.Add(1)
			continue
		}
		c.Rec.Body, c.Rec.Chunks, c.Rec.Inline, c.Rec.Embedded, c.Rec.Striped, c.Rec.Stripe = nil, nil, false, false, false, object.Stripe{}
		if c.Rec.Size <= smallBody {
			// A small body is read whole: no goroutine and pipe per change.
			buf.Reset()
			_, err = rd.WriteRange(ctx, &buf, 0, c.Rec.Size)
			rd.Close()
			if err == nil {
				err = bw.Write(c, &buf)
			}
			if err != nil {
				return err
			}
			continue
		}
		pr, pw := io.Pipe()
		go func() {
			_, err := rd.WriteRange(ctx, pw, 0, c.Rec.Size)
			pw.CloseWithError(err)
		}()
		err = bw.Write(c, pr)
		pr.CloseWithError(io.ErrClosedPipe)
		rd.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// post sends a signed request to link l's remote endpoint: body (nil for none) or a
// streamed body written by fill, and decodes its signed JSON answer into an ApplyAnswer
// (or out, if given).
func (r *replicator) post(ctx context.Context, l clustermap.Link, path string, body []byte, fill func(io.Writer) error, out ...any) (*ApplyAnswer, error) {
	sec, err := r.secret(l)
	if err != nil {
		return nil, err
	}
	hc, err := r.client(l)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var rd io.Reader
	switch {
	case fill != nil:
		// Buffered: the transport flushes every write of a chunked request body to the
		// connection (a system call, and one chunk for the receiver, per write).
		pr, pw := io.Pipe()
		go func() {
			bw := bufio.NewWriterSize(pw, 64<<10)
			err := fill(bw)
			if err == nil {
				err = bw.Flush()
			}
			pw.CloseWithError(err)
		}()
		defer pr.Close()
		rd = pr
	case body != nil:
		rd = bytes.NewReader(body)
	}
	method := http.MethodPost
	if rd == nil {
		method = http.MethodGet
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(l.Endpoint, "/")+path, rd)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	if fill != nil {
		req.ContentLength = -1
	}
	req.Header.Set(hdrLink, l.Name)
	sec.Sign(req, r.mgr.Current().ClusterID, 0, time.Now())
	return doLink(hc, sec, req, out...)
}

// doLink sends a signed link request and checks and decodes the signed answer.
func doLink(hc *http.Client, sec *rpc.Secret, req *http.Request, out ...any) (*ApplyAnswer, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, errors.E(errors.Transient, fmt.Errorf("link %s: %w", req.Header.Get(hdrLink), err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && resp.Header.Get(rpc.HdrRespSig) == "" {
		return nil, errors.E(errors.NotExist, fmt.Errorf("the remote cluster has no link %q: %s", req.Header.Get(hdrLink), wire.DecodeError(resp)))
	}
	if err := sec.VerifyResponse(resp, req.Header.Get(rpc.HdrNonce)); err != nil {
		if resp.StatusCode != http.StatusOK {
			return nil, errors.E(errors.Permission, fmt.Errorf("the remote cluster refused the link secret of %q: %s", req.Header.Get(hdrLink), wire.DecodeError(resp)))
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, wire.DecodeError(resp)
	}
	b, err := rpc.ReadSignedBody(resp, 64<<20)
	if err != nil {
		return nil, err
	}
	var ans ApplyAnswer
	dst := any(&ans)
	if len(out) > 0 {
		dst = out[0]
	}
	if err := json.Unmarshal(b, dst); err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("the remote's answer does not decode: %w", err))
	}
	return &ans, nil
}

// Hello is the link endpoint's answer to a signed GET of wire.PathMDCHello: the remote
// cluster's id, which `cairn mdc link` records (and which proves the secret).
type Hello struct {
	ClusterID string `json:"cluster_id"`
	Node      string `json:"node"`
}

// ServeHTTP serves the link endpoint (wire.PathMDC...): a request for a link this
// cluster has, signed with that link's secret.
func (r *replicator) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	m := r.mgr.Current()
	name := req.Header.Get(hdrLink)
	l, ok := m.Links[name]
	if !ok {
		wire.WriteError(w, errors.Errorf("", errors.NotExist, "this cluster has no replication link %q (make it here too: cairn mdc link %s --endpoint ... --secret-file ...)", name, name))
		return
	}
	sec, err := r.secret(l)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	sw, origin, _, ok := sec.Authenticate(w, req)
	if !ok {
		r.log.Warn("refused a link request", "link", name, "remote", req.RemoteAddr, "path", req.URL.Path)
		return
	}
	defer rpc.EndResponse(sw)
	if origin == "" || (m.ClusterID != "" && origin == m.ClusterID) {
		wire.WriteError(sw, errors.E(errors.Invalid, "a link request from this cluster itself (a link to its own endpoint?)"))
		return
	}
	r.learn(l, origin) // signed with the link's secret: the remote of l

	answer := func(v any) {
		b, _ := json.Marshal(v)
		rpc.WriteSignedBody(sw, "application/json", b)
	}
	switch req.URL.Path {
	case wire.PathMDCHello:
		answer(Hello{ClusterID: m.ClusterID, Node: r.gw.NodeID()})
	case wire.PathMDCApply:
		ans, err := r.serveApply(req, origin)
		if err != nil {
			wire.WriteError(sw, err)
			return
		}
		ans.Cluster = m.ClusterID
		answer(ans)
	case wire.PathMDCDigests:
		var q digestQuery
		if err := readSmallJSON(req, &q); err != nil {
			wire.WriteError(sw, err)
			return
		}
		if !q.Entries {
			ds, err := r.clusterDigests(req.Context(), l, q.Partitions)
			if err != nil {
				wire.WriteError(sw, err)
				return
			}
			answer(ds)
			return
		}
		if len(q.Parts) == 0 || len(q.Parts) > maxEntryParts {
			wire.WriteError(sw, errors.Errorf("", errors.Invalid, "the records of 1 to %d partitions at a time", maxEntryParts))
			return
		}
		es, err := r.clusterEntries(req.Context(), l, q.Partitions, q.Parts)
		if err != nil {
			wire.WriteError(sw, err)
			return
		}
		answer(es)
	case wire.PathMDCPush:
		if !l.Send {
			wire.WriteError(sw, errors.Errorf("", errors.Precondition, "link %s only receives on this side: it sends nothing back", name))
			return
		}
		var es []object.VersionEntry
		if err := readSmallJSON(req, &es); err != nil {
			wire.WriteError(sw, err)
			return
		}
		// The remote investigation's pull: what it lacks, sent back over this side's
		// own signed batch (a one-way link's receiving end sends here too).
		ans, err := r.post(req.Context(), l, wire.PathMDCApply, nil, func(w io.Writer) error { return r.writeBatch(req.Context(), entriesOf(es), w) })
		if err != nil {
			wire.WriteError(sw, err)
			return
		}
		answer(ans)
	default:
		wire.WriteError(sw, errors.E(errors.NotExist, "no such link endpoint"))
	}
}

// maxEntryParts bounds the partitions whose records one digest query asks for (an
// investigation asks for investigateGroup).
const maxEntryParts = 4 * investigateGroup

// digestQuery asks a cluster for its digests (or, Entries, its records) of the linked
// buckets in Parts of Partitions.
type digestQuery struct {
	Partitions int   `json:"partitions"`
	Parts      []int `json:"parts,omitempty"` // nil: all
	Entries    bool  `json:"entries,omitempty"`
}

func readSmallJSON(req *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(req.Body, 16<<20+1))
	if err != nil {
		return errors.E(errors.Transient, err)
	}
	if len(b) > 16<<20 {
		return errors.E(errors.TooLarge, "request too large")
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errors.E(errors.Invalid, fmt.Errorf("malformed request: %w", err))
	}
	return nil
}

// entriesOf makes outbox-like entries of records to send.
func entriesOf(vs []object.VersionEntry) []*notify.Entry {
	es := make([]*notify.Entry, 0, len(vs))
	for _, v := range vs {
		kind := notify.ChangePut
		if v.Deleted {
			kind = notify.ChangeDelete
		}
		es = append(es, &notify.Entry{Change: kind, Bucket: v.Bucket, Key: v.Key, HLC: v.HLC, Versioned: v.Versioned,
			Marker: v.DeleteMarker, Purged: v.Purged, Size: v.Size})
	}
	return es
}

// serveApply spools a batch (its signature is checked at its end) and applies it; from
// is the sending cluster, the origin of the changes that name none.
func (r *replicator) serveApply(req *http.Request, from string) (*ApplyAnswer, error) {
	f, err := os.CreateTemp(r.dataDir, "mdc-batch-*")
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	defer func() { f.Close(); os.Remove(f.Name()) }()
	n, err := io.Copy(f, io.LimitReader(req.Body, maxLinkRequest+1))
	if err != nil {
		return nil, errors.E(errors.Permission, fmt.Errorf("the batch was not received whole or does not match its signature: %w", err))
	}
	if n > maxLinkRequest {
		return nil, errors.E(errors.TooLarge, "batch too large")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, errors.E(errors.IO, err)
	}
	return r.applyBatch(req.Context(), mdc.NewReader(f), from)
}

// applyWorkers is how many changes of a batch are applied at once (the changes of one
// key in their order, by one worker): the holders' group commit makes one disk sync of
// many.
const applyWorkers = 16

// applyInline is the body size above which a change is applied by the reading goroutine,
// once the workers are idle, its body streamed from the spool.
const applyInline = 1 << 20

// applyBatch applies the changes read from br, sent by cluster from; a transient failure
// of any stops it (the sender sends the whole batch again: applying twice is harmless).
// Each change keeps its origin (the sender's, or from if it names none), which its
// holders stack with its link entries, so that it is not sent back there.
func (r *replicator) applyBatch(ctx context.Context, br *mdc.Reader, from string) (*ApplyAnswer, error) {
	ans := &ApplyAnswer{}
	var mu sync.Mutex
	var failed error
	apply := func(c *mdc.Change, body io.Reader) {
		rec := c.Rec
		rec.Origin = cmp.Or(c.Origin, from)
		written, err := r.gw.ApplyRemote(ctx, c.Bucket, c.Key, &rec, body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			ans.Applied++
			r.applied.Add(1)
			if !written {
				ans.Held++
				r.held.Add(1)
			}
		case errors.Is(errors.Precondition, err) || errors.Is(errors.Invalid, err) || errors.Is(errors.NotExist, err):
			// Never applied, and never will be (a locked version, an encrypted object,
			// a bucket this cluster does not have): counted, not retried.
			ans.Refused++
			msg := fmt.Sprintf("%s/%s: %v", c.Bucket, c.Key, err)
			ans.LastRefuse = msg
			r.refused.Add(1)
			r.lastRefusal.Store(&msg)
		default:
			if failed == nil {
				failed = err
			}
		}
	}
	type job struct {
		c    *mdc.Change
		body []byte
	}
	var wg sync.WaitGroup
	queues := make([]chan job, applyWorkers)
	start := func() {
		for i := range queues {
			q := make(chan job, 64)
			queues[i] = q
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range q {
					var body io.Reader
					if j.body != nil {
						body = bytes.NewReader(j.body)
					}
					apply(j.c, body)
				}
			}()
		}
	}
	start()
	closeAll := func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}
	for {
		c, body, err := br.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			closeAll()
			return ans, err
		}
		mu.Lock()
		stop := failed != nil
		mu.Unlock()
		if stop {
			break
		}
		if body != nil && c.Rec.Size > applyInline {
			// A large body streams from the spool: the workers finish first (they may
			// hold earlier changes of this key).
			closeAll()
			apply(c, body)
			start()
			continue
		}
		var data []byte
		if body != nil {
			data = make([]byte, c.Rec.Size)
			if _, err := io.ReadFull(body, data); err != nil {
				closeAll()
				return ans, errors.E(errors.Invalid, fmt.Errorf("a batch cut inside a body: %w", err))
			}
		}
		queues[keyWorker(c.Bucket, c.Key)] <- job{c, data}
	}
	closeAll()
	if failed != nil {
		return nil, failed
	}
	return ans, nil
}

// keyWorker spreads keys over the apply workers (FNV-1a).
func keyWorker(bucket, key string) int {
	h := uint32(2166136261)
	for _, s := range []string{bucket, "\x00", key} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * 16777619
		}
	}
	return int(h % applyWorkers)
}

// clusterEntries returns the newest records of the linked buckets of l that this
// cluster's storage nodes hold in parts of a partition count of `partitions` (every
// node up is asked: the union of its holders' copies).
func (r *replicator) clusterEntries(ctx context.Context, l clustermap.Link, partitions int, parts []int) ([]object.VersionEntry, error) {
	if partitions <= 0 || partitions > 1<<16 {
		return nil, errors.E(errors.Invalid, "partitions: 1 to 65536")
	}
	if parts == nil {
		for p := 0; p < partitions; p++ {
			parts = append(parts, p)
		}
	}
	var all []object.VersionEntry
	var mu sync.Mutex
	for _, t := range r.gw.Topology().ListTargets() {
		if t.Down {
			continue
		}
		err := r.gw.Replica(t).Scan(ctx, partitions, parts, func(e object.VersionEntry) {
			if l.Replicates(e.Bucket) {
				mu.Lock()
				all = append(all, e)
				mu.Unlock()
			}
		})
		if err != nil {
			return nil, fmt.Errorf("scanning node %s: %w", t.ID, err)
		}
	}
	return mdc.Newest(all), nil
}

// LinkStatus is one link as `cairn mdc status` shows it: its definition (never its
// secret) and, per storage node, the changes waiting for it.
type LinkStatus struct {
	Name     string       `json:"name"`
	Endpoint string       `json:"endpoint"`
	Buckets  []string     `json:"buckets,omitempty"`
	Send     bool         `json:"send"`
	Paused   bool         `json:"paused"`
	Remote   string       `json:"remote,omitempty"`
	CA       bool         `json:"private_ca,omitempty"` // the endpoint's certificate is checked against the link's CA
	Entries  int64        `json:"backlog_entries"`      // over every node
	Bytes    int64        `json:"backlog_bytes"`
	Lag      float64      `json:"lag_seconds"` // the oldest unsent change's age, over every node
	Nodes    []LinkOnNode `json:"nodes"`
}

// LinkOnNode is what one node holds for a link.
type LinkOnNode struct {
	Node    string  `json:"node"`
	Entries int64   `json:"backlog_entries"`
	Bytes   int64   `json:"backlog_bytes"`
	Lag     float64 `json:"lag_seconds"`
	Partial bool    `json:"partial,omitempty"`
	Error   string  `json:"error,omitempty"` // the link's last failure on this node, or why the node could not be asked
}

// MDCView is the admin API's view of replication.
type MDCView struct {
	ClusterID      string          `json:"cluster_id,omitempty"`
	Links          []LinkStatus    `json:"links"`
	Applied        int64           `json:"applied"` // changes received and applied, over every node since they started
	Refused        int64           `json:"refused"`
	LastRefusal    string          `json:"last_refusal,omitempty"`
	Echoes         int64           `json:"echoes"` // stacked changes not sent back to the cluster they came from
	Held           int64           `json:"held"`   // received changes that were already here (retries, echoes)
	Investigations []Investigation `json:"investigations,omitempty"`
}

// linkStatus builds the view of the links from the nodes' notification figures.
func linkStatus(m *clustermap.Map, nodes []NotifyStatus) []LinkStatus {
	var out []LinkStatus
	for _, l := range m.Links {
		ls := LinkStatus{Name: l.Name, Endpoint: l.Endpoint, Buckets: l.Buckets, Send: l.Send, Paused: l.Paused, Remote: l.Remote, CA: l.CA != ""}
		for _, n := range nodes {
			on := LinkOnNode{Node: n.Node, Error: n.Error}
			if b, ok := n.Targets[notify.LinkTarget(l.Name)]; ok {
				on.Entries, on.Bytes, on.Lag, on.Partial = b.Entries, b.Bytes, b.OldestAge, b.Partial
			}
			if e := n.LastErrors[notify.LinkTarget(l.Name)]; e != "" && on.Error == "" {
				on.Error = e
			}
			ls.Entries += on.Entries
			ls.Bytes += on.Bytes
			ls.Lag = max(ls.Lag, on.Lag)
			ls.Nodes = append(ls.Nodes, on)
		}
		out = append(out, ls)
	}
	slices.SortFunc(out, func(a, b LinkStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// exportMetrics registers the node's replication figures: its backlog over every link
// (from the Deliverer's look at the outbox) and what it received.
func (r *replicator) exportMetrics(m *metrics.Metrics, d *notify.Deliverer) {
	sum := func(f func(notify.Backlog) float64, agg func(a, b float64) float64) func() float64 {
		return func() float64 {
			var v float64
			for t, b := range d.Status().Targets {
				if strings.HasPrefix(t, notify.LinkPrefix) {
					v = agg(v, f(b))
				}
			}
			return v
		}
	}
	add := func(a, b float64) float64 { return a + b }
	m.GaugeFunc("cairn_mdc_backlog_entries", "Changes stacked on this node for replication links, not yet sent (every link).", sum(func(b notify.Backlog) float64 { return float64(b.Entries) }, add))
	m.GaugeFunc("cairn_mdc_backlog_bytes", "Bytes of the changes stacked on this node for replication links, not yet sent.", sum(func(b notify.Backlog) float64 { return float64(b.Bytes) }, add))
	m.GaugeFunc("cairn_mdc_lag_seconds", "Age of the oldest change stacked on this node for a replication link (0: none).", sum(func(b notify.Backlog) float64 { return b.OldestAge }, func(a, b float64) float64 { return max(a, b) }))
	m.CounterFunc("cairn_mdc_applied_total", "Changes received over replication links and applied by this node.", func() float64 { return float64(r.applied.Load()) })
	m.CounterFunc("cairn_mdc_refused_total", "Changes received over replication links that this node refused (Object Lock, encryption, unknown bucket).", func() float64 { return float64(r.refused.Load()) })
}

// LinkHello asks the remote endpoint of link name, signing with the link's secret as
// cluster clusterID, for its cluster id: `cairn mdc link` proves the secret with it
// before it stores anything. caPEM, if not empty, is the CA certificates the endpoint's
// certificate is verified against (else the system's roots). NotExist: the remote has
// no link of that name yet; Permission: it refused the secret.
func LinkHello(ctx context.Context, endpoint, name, secret, clusterID, caPEM string) (*Hello, error) {
	sec, err := rpc.NewSecret(secret)
	if err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("the link secret: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(endpoint, "/")+wire.PathMDCHello, nil)
	if err != nil {
		return nil, errors.E(errors.Invalid, err)
	}
	req.Header.Set(hdrLink, name)
	sec.Sign(req, clusterID, 0, time.Now())
	hc, err := linkClient(caPEM)
	if err != nil {
		return nil, err
	}
	var h Hello
	if _, err := doLink(hc, sec, req, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
