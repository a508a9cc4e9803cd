package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// Internode mutual TLS (docs/design/internode-tls.md). A node's identity is in
// DATA/internode: its key and certificate (node.key, node.pem), the cluster CA's
// certificate (ca.pem) and, on a manager, the CA's key (ca.key, 0600); the file
// "required" once the cluster refuses plain connections. A new cluster's first node
// makes the CA (or takes the operator's) and its own certificate; every other node
// enrols: it sends a certificate request to a member, signed with the cluster secret,
// and gets back its certificate and the CA in an answer whose body the cluster secret
// signs too. A node with the manager role (a voter, or a standby that may be promoted)
// fetches the CA key from another manager over mutual TLS as soon as it has joined, so
// that every voter can sign from the moment it is promoted; a node without the role
// deletes it once a manager holds it.

// InternodeTLS configures mutual TLS on the node address.
type InternodeTLS struct {
	// Off bootstraps a cluster without internode TLS (plain HTTP and Raft, authenticated
	// by the cluster secret; `cairn admin internode-tls enable` turns TLS on later). Only
	// a bootstrap reads it: a node joining a cluster does what the cluster does.
	Off bool
	// CACertFile and CAKeyFile are an operator's CA (PEM, both or neither): a bootstrap
	// uses it instead of making one; a later start installs the key if the certificate
	// is the cluster's (a manager given the key again).
	CACertFile, CAKeyFile string
	// CertLifetime is the lifetime of the node certificates this node signs (0:
	// nodetls.CertLifetime); a node renews its own when a third of its life is left.
	CertLifetime time.Duration
	// CheckInterval is how often a node checks its certificate and, on a manager, the CA
	// key (0: 1s; also at every map change). The checks are local; a failed renewal is retried after
	// 10 s.
	CheckInterval time.Duration
}

func (c InternodeTLS) validate() error {
	if (c.CACertFile == "") != (c.CAKeyFile == "") {
		return errors.E(errors.Invalid, "--internode-ca-cert and --internode-ca-key go together")
	}
	if c.Off && c.CACertFile != "" {
		return errors.E(errors.Invalid, "--internode-tls off and an internode CA contradict each other")
	}
	return nil
}

// maxEnrolAnswer bounds an enrolment answer's and a CA key's body.
const maxEnrolAnswer = 64 << 10

// internodeTLS is this node's internode TLS: the rpc.TLSSource of its listener and its
// dialer, the enrolment and CA-key endpoints, and the loop that renews its certificate.
type internodeTLS struct {
	files nodetls.Files
	id    string
	cfg   InternodeTLS
	log   *slog.Logger

	cert     atomic.Pointer[tls.Certificate]
	ca       atomic.Pointer[nodetls.CA] // the cluster CA (with its key on a manager holding it)
	required atomic.Bool
	server   atomic.Pointer[tls.Config]
	client   atomic.Pointer[tls.Config]

	// Set once the node's parts exist (wire).
	mgr       *clustermap.Manager
	rpc       *rpc.Client
	secret    *rpc.Secret
	app       *applyer
	hosts     func() []string // the names the node's certificate must carry
	manager   bool            // the node has the manager role: it holds the CA key
	onChange  func()          // a certificate obtained: drop pooled plain connections
	onRequire func()          // TLS became required: close plain connections

	mu        sync.Mutex // one enrolment or key change at a time
	nextRenew time.Time  // after a failed renewal, when to try again (under mu)
}

var _ rpc.TLSSource = (*internodeTLS)(nil)

func (t *internodeTLS) ServerConfig() *tls.Config { return t.server.Load() }
func (t *internodeTLS) ClientConfig() *tls.Config { return t.client.Load() }
func (t *internodeTLS) Required() bool            { return t.required.Load() }

func (t *internodeTLS) getCert() *tls.Certificate { return t.cert.Load() }

// openInternodeTLS loads the node's identity from dir (none yet is fine).
func openInternodeTLS(dir, id string, cfg InternodeTLS, log *slog.Logger) (*internodeTLS, error) {
	t := &internodeTLS{files: nodetls.Files{Dir: dir}, id: id, cfg: cfg, log: log.With("component", "internode-tls")}
	if t.cfg.CheckInterval <= 0 {
		t.cfg.CheckInterval = time.Second
	}
	ca, err := t.files.LoadCA()
	switch {
	case errors.Is(errors.NotExist, err):
	case err != nil:
		return nil, err
	default:
		t.ca.Store(ca)
	}
	c, err := t.files.LoadCert()
	switch {
	case errors.Is(errors.NotExist, err):
	case err != nil:
		return nil, err
	default:
		t.cert.Store(c)
	}
	if t.files.IsRequired() {
		t.required.Store(true)
	}
	if ca != nil && cfg.CACertFile != "" {
		op, err := readCA(cfg)
		if err != nil {
			return nil, err
		}
		if op.Fingerprint() != ca.Fingerprint() {
			return nil, errors.E(errors.Invalid, fmt.Sprintf("--internode-ca-cert is not this cluster's CA (fingerprint %s, the cluster's %s)", op.Fingerprint(), ca.Fingerprint()))
		}
		if !ca.HasKey() {
			if err := t.files.SaveCA(op); err != nil {
				return nil, err
			}
			t.ca.Store(op)
		}
	}
	t.rebuild()
	return t, nil
}

func readCA(cfg InternodeTLS) (*nodetls.CA, error) {
	cp, err := os.ReadFile(cfg.CACertFile)
	if err != nil {
		return nil, errors.E(errors.IO, fmt.Errorf("--internode-ca-cert: %w", err))
	}
	kp, err := os.ReadFile(cfg.CAKeyFile)
	if err != nil {
		return nil, errors.E(errors.IO, fmt.Errorf("--internode-ca-key: %w", err))
	}
	return nodetls.ParseCA(cp, kp)
}

// rebuild makes the TLS configurations from the certificate and CA held (none while
// either is missing).
func (t *internodeTLS) rebuild() {
	ca, c := t.ca.Load(), t.cert.Load()
	if ca == nil || c == nil {
		t.server.Store(nil)
		t.client.Store(nil)
		return
	}
	pool := ca.Pool()
	t.server.Store(nodetls.ServerConfig(t.getCert, pool))
	t.client.Store(nodetls.ClientConfig(t.getCert, pool))
}

// bootstrap makes a new cluster's CA (or takes the operator's) and this node's
// certificate, and returns what the first map says (nil: internode TLS off).
func (t *internodeTLS) bootstrap(hosts []string) (*clustermap.InternodeTLS, error) {
	if t.cfg.Off {
		return nil, nil
	}
	var ca *nodetls.CA
	var err error
	if t.cfg.CACertFile != "" {
		if ca, err = readCA(t.cfg); err != nil {
			return nil, err
		}
		if !ca.HasKey() {
			return nil, errors.E(errors.Invalid, "--internode-ca-key is required with --internode-ca-cert")
		}
	} else if ca, err = nodetls.NewCA("cairn cluster CA "+randString(8, "abcdefghijklmnopqrstuvwxyz0123456789"), time.Now()); err != nil {
		return nil, err
	}
	if err := t.files.SaveCA(ca); err != nil {
		return nil, err
	}
	t.ca.Store(ca)
	if err := t.issueLocal(ca, hosts); err != nil {
		return nil, err
	}
	if err := t.setRequired(); err != nil {
		return nil, err
	}
	t.log.Info("new cluster: internode TLS CA made", "ca", ca.Fingerprint(), "not_after", ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	return &clustermap.InternodeTLS{CA: string(ca.CertPEM), Required: true}, nil
}

// issueLocal signs this node's certificate with ca, which holds its key.
func (t *internodeTLS) issueLocal(ca *nodetls.CA, hosts []string) error {
	key, err := nodetls.NewKey()
	if err != nil {
		return err
	}
	der, err := nodetls.NewCSR(key, t.id, hosts)
	if err != nil {
		return err
	}
	csr, err := nodetls.ParseCSR(der, t.id)
	if err != nil {
		return err
	}
	p, err := ca.Sign(csr, t.id, time.Now(), t.cfg.CertLifetime)
	if err != nil {
		return err
	}
	c, _, err := nodetls.CheckAnswer(wire.EnrolAnswer{Cert: string(p), CA: string(ca.CertPEM)}, key, t.id, ca, time.Now())
	if err != nil {
		return err
	}
	return t.setCert(c, ca)
}

// setCert keeps c, obtained from ca, as this node's certificate (and ca as the cluster's
// CA, keeping a key held for it).
func (t *internodeTLS) setCert(c *tls.Certificate, ca *nodetls.CA) error {
	if old := t.ca.Load(); old == nil || old.Fingerprint() != ca.Fingerprint() {
		if err := t.files.SaveCA(ca); err != nil {
			return err
		}
		t.ca.Store(ca)
	}
	if err := t.files.SaveCert(c); err != nil {
		return err
	}
	first := t.cert.Load() == nil
	t.cert.Store(c)
	t.rebuild()
	t.log.Info("internode certificate installed", "serial", c.Leaf.SerialNumber.Text(16), "names", certNames(c.Leaf),
		"not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	if first && t.onChange != nil {
		t.onChange()
	}
	return nil
}

// setRequired records that plain connections are refused from now on.
func (t *internodeTLS) setRequired() error {
	if t.required.Load() {
		return nil
	}
	if err := t.files.SetRequired(); err != nil {
		return err
	}
	t.required.Store(true)
	t.log.Info("internode TLS is required: plain connections are refused from now on")
	if t.onRequire != nil {
		t.onRequire()
	}
	return nil
}

func certNames(c *x509.Certificate) string {
	names := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	return fmt.Sprint(names)
}

// addrHosts are the names a certificate for a node advertised at addr carries.
func addrHosts(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return []string{"localhost"}
	}
	return []string{host}
}

// enrol asks the node at addr for a certificate for this node, through c (nil: the
// enrolment transport, for a node without a certificate: TLS without a client
// certificate, or plain if the node at addr does not offer TLS). trusted is the CA this
// node already trusts (nil: none: it takes the answer's, which the cluster secret signs).
// NotExist: the cluster has no internode CA.
func (t *internodeTLS) enrol(ctx context.Context, c *rpc.Client, addr string, trusted *nodetls.CA) (required bool, err error) {
	const op errors.Op = "server.enrol"
	key, err := nodetls.NewKey()
	if err != nil {
		return false, err
	}
	der, err := nodetls.NewCSR(key, t.id, t.hosts())
	if err != nil {
		return false, err
	}
	body, _ := json.Marshal(wire.EnrolRequest{Node: t.id, CSR: der})
	var seen *x509.Certificate
	if c == nil {
		c = &rpc.Client{Secret: t.secret, Node: t.id, HTTP: &http.Client{Transport: rpc.NewEnrolTransport(func(s *x509.Certificate) { seen = s })}}
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: addr, Path: wire.PathEnrol, Body: bytes.NewReader(body), Size: int64(len(body))})
	if err != nil {
		return false, errors.E(op, err)
	}
	data, err := rpc.ReadSignedBody(resp, maxEnrolAnswer)
	if err != nil {
		return false, errors.E(op, err)
	}
	var ans wire.EnrolAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return false, errors.E(op, errors.Invalid, "malformed enrolment answer")
	}
	cert, ca, err := nodetls.CheckAnswer(ans, key, t.id, trusted, time.Now())
	if err != nil {
		return false, errors.E(op, err)
	}
	if seen != nil {
		if _, err := nodetls.Verify(ca, seen, time.Now()); err != nil {
			return false, errors.E(op, errors.Permission, fmt.Errorf("the node at %s presented a certificate of another CA than the one it answered: %v", addr, err))
		}
	}
	if old := t.ca.Load(); old != nil && old.Fingerprint() == ca.Fingerprint() {
		ca = old // keep the key held for it
	}
	if err := t.setCert(cert, ca); err != nil {
		return false, err
	}
	return ans.Required, nil
}

// mapCA is the CA the cluster map names (nil: none, or one that does not parse).
func mapCA(m *clustermap.Map) *nodetls.CA {
	if m.Internode == nil {
		return nil
	}
	ca, err := nodetls.ParseCA([]byte(m.Internode.CA), nil)
	if err != nil {
		return nil
	}
	return ca
}

// run keeps this node's internode TLS in step with the map: TLS required when the map
// says so, a certificate of the map's CA (renewed before it expires or when the node's
// address changes), the CA key on a manager and not on others. It checks every
// CheckInterval and at each map change, until ctx ends.
func (t *internodeTLS) run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.CheckInterval)
	defer tick.Stop()
	maps := t.mgr.Watch(ctx)
	for {
		t.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case _, ok := <-maps:
			if !ok {
				return
			}
		}
	}
}

func (t *internodeTLS) check(ctx context.Context) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mgr.Current()
	if m.Internode == nil {
		return
	}
	if m.Internode.Required {
		if err := t.setRequired(); err != nil {
			t.log.Error("could not record that internode TLS is required", "err", err)
		}
	}
	want := mapCA(m)
	if want == nil {
		t.log.Error("the cluster map's internode CA does not parse")
		return
	}
	if ca := t.ca.Load(); ca != nil && ca.Fingerprint() != want.Fingerprint() {
		t.log.Error("this node trusts another internode CA than the cluster map's: not renewing", "ours", ca.Fingerprint(), "map", want.Fingerprint())
		return
	}
	if c := t.cert.Load(); (c == nil || nodetls.NeedsRenewal(c.Leaf, t.hosts(), time.Now())) && time.Now().After(t.nextRenew) {
		if !t.renew(ctx, want) {
			t.nextRenew = time.Now().Add(10 * time.Second)
		}
	}
	t.checkCAKey(ctx)
}

// renew gets this node a new certificate of ca: signed here if this node holds the key,
// else through the leader or another voter. It reports whether it did.
func (t *internodeTLS) renew(ctx context.Context, ca *nodetls.CA) bool {
	if held := t.ca.Load(); held != nil && held.HasKey() {
		if err := t.issueLocal(held, t.hosts()); err != nil {
			t.log.Error("could not sign this node's internode certificate", "err", err)
			return false
		}
		return true
	}
	clients := []*rpc.Client{t.rpc, nil} // with the current certificate; else without one
	if t.cert.Load() == nil {
		clients = clients[1:]
	}
	var last error
	for _, c := range clients {
		// nil: the enrolment transport, TLS without a client certificate (a node whose
		// certificate expired while it was away is refused with it).
		for _, addr := range t.signers() {
			if _, err := t.enrol(ctx, c, addr, ca); err != nil {
				last = err
				continue
			}
			return true
		}
	}
	if last != nil {
		t.log.Warn("could not renew this node's internode certificate", "err", last)
	}
	return false
}

// signers are the addresses to ask for a certificate: the leader, then the other
// voters, then this node's peers in the map.
func (t *internodeTLS) signers() []string {
	var out []string
	add := func(a string) {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	_, leader := t.mgr.Leader()
	add(leader)
	if ms, err := t.mgr.Members(); err == nil {
		for _, mb := range ms {
			if mb.Voter && mb.ID != t.id {
				add(mb.Addr)
			}
		}
	}
	for _, n := range t.mgr.Current().Nodes {
		if n.ID != t.id && n.State == clustermap.StateUp {
			add(n.Addr)
		}
	}
	return out
}

// checkCAKey fetches the CA key on a manager (a node with the manager role: a voter, or a
// standby that may be promoted) that lacks it, and deletes it on a node that is not a
// manager once a manager reports holding it. extra are more addresses to ask (the join
// address, before the map has arrived).
func (t *internodeTLS) checkCAKey(ctx context.Context, extra ...string) {
	ca := t.ca.Load()
	if ca == nil || t.cert.Load() == nil {
		return
	}
	var others []string
	for _, n := range t.mgr.Current().Nodes {
		if n.ID != t.id && n.State != clustermap.StateOut && n.HasRole(clustermap.RoleManager) && !slices.Contains(others, n.Addr) {
			others = append(others, n.Addr)
		}
	}
	for _, a := range extra {
		if a != "" && !slices.Contains(others, a) {
			others = append(others, a)
		}
	}
	switch {
	case t.manager && !ca.HasKey():
		for _, addr := range others {
			if err := t.fetchCAKey(ctx, addr, ca); err != nil {
				t.log.Debug("could not fetch the CA key", "from", addr, "err", err)
				continue
			}
			t.log.Info("this node is a manager: it holds the internode CA key now", "from", addr)
			return
		}
	case !t.manager && ca.HasKey() && len(others) > 0:
		for _, addr := range others {
			st, err := t.nodeStatus(ctx, addr)
			if err != nil || !st.CAKey {
				continue
			}
			if err := t.files.RemoveCAKey(); err != nil {
				t.log.Error("could not delete the CA key of a node that is no manager", "err", err)
				return
			}
			certOnly, err := nodetls.ParseCA(ca.CertPEM, nil)
			if err == nil {
				t.ca.Store(certOnly)
			}
			t.log.Info("this node is no manager: internode CA key deleted", "held_by", st.ID)
			return
		}
	}
}

// fetchCAKey asks the manager at addr for the CA key (over mutual TLS: the Dialer never
// sends this request plain once the node has a certificate, and the manager refuses it
// without one).
func (t *internodeTLS) fetchCAKey(ctx context.Context, addr string, ca *nodetls.CA) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := t.rpc.Do(ctx, &rpc.Request{Method: http.MethodGet, Addr: addr, Path: wire.PathCAKey})
	if err != nil {
		return err
	}
	kp, err := rpc.ReadSignedBody(resp, maxEnrolAnswer)
	if err != nil {
		return err
	}
	withKey, err := nodetls.ParseCA(ca.CertPEM, kp)
	if err != nil {
		return err
	}
	if err := t.files.SaveCA(withKey); err != nil {
		return err
	}
	t.ca.Store(withKey)
	return nil
}

// self is this node's line of the internode TLS status.
func (t *internodeTLS) self() wire.InternodeNode {
	st := wire.InternodeNode{ID: t.id, Required: t.Required()}
	if ca := t.ca.Load(); ca != nil {
		st.CAKey = ca.HasKey()
		if c := t.cert.Load(); c != nil {
			if _, err := nodetls.Verify(ca, c.Leaf, time.Now()); err == nil {
				st.CA = ca.Fingerprint()
			} else {
				st.Err = err.Error()
			}
			st.NotAfter = c.Leaf.NotAfter.UTC().Format(time.RFC3339)
		}
	}
	return st
}

// nodeStatus asks the node at addr for its line of the status.
func (t *internodeTLS) nodeStatus(ctx context.Context, addr string) (wire.InternodeNode, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var st wire.InternodeNode
	err := t.rpc.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: addr, Path: wire.PathInternodeTLS, Query: map[string][]string{"self": {"1"}}}, &st)
	return st, err
}

// status is the cluster's internode TLS: the map's, and each node's own line.
func (t *internodeTLS) status(ctx context.Context) wire.InternodeStatus {
	m := t.mgr.Current()
	var out wire.InternodeStatus
	var want string
	if ca := mapCA(m); ca != nil {
		want, out.CA, out.Required = ca.Fingerprint(), ca.Fingerprint(), m.Internode.Required
	}
	var nodes []clustermap.Node
	for _, n := range m.Nodes {
		if n.State != clustermap.StateOut {
			nodes = append(nodes, n)
		}
	}
	out.Nodes = make([]wire.InternodeNode, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if n.ID == t.id {
				out.Nodes[i] = t.self()
				return
			}
			st, err := t.nodeStatus(ctx, n.Addr)
			if err != nil {
				st = wire.InternodeNode{ID: n.ID, Err: err.Error()}
			}
			st.ID = n.ID
			out.Nodes[i] = st
		}()
	}
	wg.Wait()
	for _, n := range out.Nodes {
		if want == "" || n.CA != want {
			out.Missing = append(out.Missing, n.ID)
		}
	}
	return out
}

// enable turns internode TLS on (this node leads): the CA into the map (made here if the
// cluster has none), then, once every node that is not out holds a certificate of it
// (they enrol when they see it), required. A node that does not get one within wait is
// named in the error; the command can be run again.
func (t *internodeTLS) enable(ctx context.Context, wait time.Duration) (wire.InternodeStatus, error) {
	const op errors.Op = "server.enableInternodeTLS"
	m := t.mgr.Current()
	if m.Internode == nil {
		t.mu.Lock()
		ca := t.ca.Load()
		var err error
		if ca == nil || !ca.HasKey() {
			if ca, err = nodetls.NewCA("cairn cluster CA "+randString(8, "abcdefghijklmnopqrstuvwxyz0123456789"), time.Now()); err == nil {
				err = t.files.SaveCA(ca)
			}
			if err == nil {
				t.ca.Store(ca)
				t.log.Info("internode TLS CA made", "ca", ca.Fingerprint())
			}
		}
		if err == nil && t.cert.Load() == nil {
			err = t.issueLocal(ca, t.hosts())
		}
		t.mu.Unlock()
		if err != nil {
			return wire.InternodeStatus{}, errors.E(op, err)
		}
		if m, err = t.app.Apply(ctx, clustermap.Command{Op: clustermap.OpSetInternodeTLS, Internode: &clustermap.InternodeTLS{CA: string(ca.CertPEM)}}); err != nil {
			return wire.InternodeStatus{}, errors.E(op, err)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		st := t.status(ctx)
		if len(st.Missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return st, errors.E(op, errors.Transient, fmt.Sprintf("nodes without a certificate of the cluster CA after %s: %v (internode TLS not required yet; run the command again)", wait, st.Missing))
		}
		select {
		case <-ctx.Done():
			return st, errors.E(op, errors.Transient, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
	if !m.Internode.Required {
		it := *m.Internode
		it.Required = true
		if _, err := t.app.Apply(ctx, clustermap.Command{Op: clustermap.OpSetInternodeTLS, Internode: &it}); err != nil {
			return wire.InternodeStatus{}, errors.E(op, err)
		}
	}
	// Done when every node says it refuses plain connections (each applies the map
	// change within moments).
	for {
		st := t.status(ctx)
		var plain []string
		for _, n := range st.Nodes {
			if !n.Required {
				plain = append(plain, n.ID)
			}
		}
		if len(plain) == 0 {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, errors.E(op, errors.Transient, fmt.Sprintf("internode TLS is required, but these nodes have not said so yet: %v", plain))
		}
		select {
		case <-ctx.Done():
			return st, errors.E(op, errors.Transient, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ServeHTTP serves the internode TLS paths: enrolment, the CA key, the status and
// enable.
func (t *internodeTLS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case wire.PathEnrol:
		t.serveEnrol(w, r)
	case wire.PathCAKey:
		t.serveCAKey(w, r)
	case wire.PathInternodeTLS:
		switch {
		case r.Method == http.MethodGet && r.URL.Query().Get("self") != "":
			writeJSON(w, t.self())
		case r.Method == http.MethodGet:
			writeJSON(w, t.status(r.Context()))
		case r.Method == http.MethodPost && r.URL.Query().Get("action") == "enable":
			if !t.mgr.IsLeader() {
				wire.WriteError(w, errors.E(errors.Transient, clustermap.ErrNotLeader))
				return
			}
			st, err := t.enable(r.Context(), 20*time.Second)
			if err != nil {
				wire.WriteError(w, err)
				return
			}
			writeJSON(w, st)
		default:
			wire.WriteError(w, errors.E(errors.Invalid, "want GET, or POST ?action=enable"))
		}
	default:
		http.NotFound(w, r)
	}
}

// serveEnrol signs a node's certificate request if this node holds the CA key, else
// passes it to the voters (which must sign it or refuse). The answer's body is signed.
func (t *internodeTLS) serveEnrol(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		wire.WriteError(w, errors.E(errors.Invalid, "enrolment is a POST"))
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, nodetls.MaxEnrolRequest+1))
	if err != nil {
		wire.WriteError(w, errors.E(errors.Transient, err))
		return
	}
	req, csr, err := nodetls.ParseEnrolRequest(data)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	m := t.mgr.Current()
	if m.Internode == nil {
		wire.WriteError(w, errors.E(errors.NotExist, "this cluster has no internode CA (internode TLS is off)"))
		return
	}
	if ca := t.ca.Load(); ca != nil && ca.HasKey() && ca.Fingerprint() == mapCA(m).Fingerprint() {
		p, err := ca.Sign(csr, req.Node, time.Now(), t.cfg.CertLifetime)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		body, _ := json.Marshal(wire.EnrolAnswer{Cert: string(p), CA: string(ca.CertPEM), Required: m.Internode.Required})
		t.log.Info("issued an internode certificate", "node", req.Node, "remote", r.RemoteAddr, "forwarded", req.Forwarded)
		rpc.WriteSignedBody(w, "application/json", body)
		return
	}
	if req.Forwarded {
		wire.WriteError(w, errors.E(errors.Transient, "this node does not hold the internode CA key"))
		return
	}
	req.Forwarded = true
	fwd, _ := json.Marshal(req)
	last := errors.E(errors.Transient, "no voting manager holds the internode CA key")
	for _, addr := range t.signers() {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		resp, err := t.rpc.Do(ctx, &rpc.Request{Method: http.MethodPost, Addr: addr, Path: wire.PathEnrol, Body: bytes.NewReader(fwd), Size: int64(len(fwd))})
		if err == nil {
			var body []byte
			if body, err = rpc.ReadSignedBody(resp, maxEnrolAnswer); err == nil {
				cancel()
				rpc.WriteSignedBody(w, "application/json", body)
				return
			}
		}
		cancel()
		last = err
	}
	wire.WriteError(w, last)
}

// serveCAKey gives the CA key to a manager (a node of the map with the manager role)
// that asks over mutual TLS.
func (t *internodeTLS) serveCAKey(w http.ResponseWriter, r *http.Request) {
	peer := ""
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		peer, _ = nodetls.NodeID(r.TLS.PeerCertificates[0])
	}
	if peer == "" {
		wire.WriteError(w, errors.E(errors.Permission, "the CA key is given only over mutual TLS"))
		return
	}
	if n, ok := t.mgr.Current().Node(peer); !ok || n.State == clustermap.StateOut || !n.HasRole(clustermap.RoleManager) {
		wire.WriteError(w, errors.E(errors.Permission, fmt.Sprintf("node %s is not a manager of this cluster", peer)))
		return
	}
	ca := t.ca.Load()
	if ca == nil || !ca.HasKey() {
		wire.WriteError(w, errors.E(errors.NotExist, "this node does not hold the internode CA key"))
		return
	}
	kp, err := ca.KeyPEM()
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	t.log.Info("gave the internode CA key to a manager", "node", peer)
	rpc.WriteSignedBody(w, "application/x-pem-file", kp)
}

// checkPeer is the internode listener's TLS rule, before a request's signature is read:
// a plain request once TLS is required, or a request under TLS without a verified client
// certificate for anything but enrolment, is refused (and its connection closed).
func (t *internodeTLS) checkPeer(r *http.Request) error {
	switch {
	case r.TLS == nil && t.Required():
		return errors.E(errors.Permission, "this cluster requires internode TLS")
	case r.TLS != nil && len(r.TLS.VerifiedChains) == 0 && r.URL.Path != wire.PathEnrol:
		return errors.E(errors.Permission, "a client certificate of the cluster CA is required (only enrolment is open without one)")
	}
	return nil
}

// checkSigner refuses a request whose verified client certificate names another node
// than the one that signed it.
func checkSigner(r *http.Request, from string) error {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return nil
	}
	id, err := nodetls.NodeID(r.TLS.PeerCertificates[0])
	if err != nil {
		return err
	}
	if id != from {
		return errors.E(errors.Permission, fmt.Sprintf("the client certificate names node %q, the request is signed as %q", id, from))
	}
	return nil
}
