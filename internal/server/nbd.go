package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// leaseClock tells whether this node's map can be trusted for volume leases now
// (docs/design/volumes.md, "Fencing"). Every confirmInterval the node confirms its map
// with the Raft leader: the leader itself checks that a quorum still follows it
// (VerifyLeader); another node asks the leader for its map epoch and waits until its own
// map has applied that epoch. The map counts as fresh for freshFor after the moment a
// confirmation was sent (a monotonic clock: it runs on while the process is paused). A
// node that was paused, cut off, or is behind the leader therefore refuses to serve
// volume I/O and to take volume writes until a confirmation sent after it came back
// succeeds, by which time its map shows a lease that moved; attach --force waits until
// the old holder is marked down, longer than freshFor.
//
// Volume I/O that finds the map stale waits for the next confirmation (wait) rather
// than failing: a node starved of CPU confirms late, and a client would see an I/O
// error for a lease it still holds.
type leaseClock struct {
	mgr    *clustermap.Manager
	client *rpc.Client
	log    *slog.Logger
	now    func() time.Time          // time.Now; tests set it
	last   atomic.Pointer[time.Time] // when the last successful confirmation was sent

	kick chan struct{} // a waiter asks for a confirmation now (buffered, 1)

	mu        sync.Mutex
	confirmed chan struct{} // closed at the next successful confirmation
	stale     time.Time     // when the first waiter of the current stale spell came (zero: none)
	spell     int64         // I/O that waited in this spell

	waits, timeouts atomic.Int64 // I/O that waited for a confirmation; that saw none in time
	// led: this node has been the leader since its last confirmation as one, which
	// began with a barrier (a new leader may still be applying its log to its map).
	led atomic.Bool
}

const (
	confirmInterval = 500 * time.Millisecond
	freshFor        = 2 * time.Second
)

func newLeaseClock(mgr *clustermap.Manager, client *rpc.Client, log *slog.Logger) *leaseClock {
	return &leaseClock{mgr: mgr, client: client, log: log.With("component", "lease"), now: time.Now,
		kick: make(chan struct{}, 1), confirmed: make(chan struct{})}
}

// fresh returns an error unless a confirmation sent less than freshFor ago succeeded.
func (lc *leaseClock) fresh() error {
	last := lc.last.Load()
	if last == nil {
		return errors.E(errors.Transient, "this node has not confirmed its cluster map with the Raft leader yet")
	}
	if age := lc.now().Sub(*last); age > freshFor {
		return errors.Errorf("", errors.Transient, "this node last confirmed its cluster map with the Raft leader %s ago", age.Round(time.Millisecond))
	}
	return nil
}

// freshNow says whether the map is fresh now: fresh, which builds no error when it is.
func (lc *leaseClock) freshNow() bool { return lc.fresh() == nil }

// wait returns once the map is fresh, waiting for confirmations until ctx ends; then it
// returns the reason the map is not fresh. The first waiter of a stale spell logs it, and
// the confirmation that ends the spell logs how long it lasted (record).
func (lc *leaseClock) wait(ctx context.Context) error {
	if lc.fresh() == nil {
		return nil
	}
	lc.waits.Add(1)
	lc.mu.Lock()
	if lc.stale.IsZero() {
		lc.stale = lc.now()
		lc.log.Warn("volume I/O waits: this node's cluster map is not confirmed by the Raft leader lately", "err", lc.fresh())
	}
	lc.spell++
	lc.mu.Unlock()
	for {
		lc.mu.Lock()
		ch := lc.confirmed
		lc.mu.Unlock()
		err := lc.fresh()
		if err == nil {
			return nil
		}
		select {
		case lc.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			lc.timeouts.Add(1)
			return errors.Errorf("", errors.Transient, "no confirmation of this node's cluster map came in time (%v): %v", context.Cause(ctx), err)
		}
	}
}

// record notes a successful confirmation sent at sent and wakes the waiters.
func (lc *leaseClock) record(sent time.Time) {
	lc.last.Store(&sent)
	lc.mu.Lock()
	defer lc.mu.Unlock()
	close(lc.confirmed)
	lc.confirmed = make(chan struct{})
	if !lc.stale.IsZero() && lc.fresh() == nil {
		lc.log.Info("volume I/O resumes: this node's cluster map is confirmed again", "waited", lc.now().Sub(lc.stale).Round(time.Millisecond), "requests", lc.spell)
		lc.stale, lc.spell = time.Time{}, 0
	}
}

// run confirms the map every confirmInterval (at once when an I/O waits) until ctx ends.
func (lc *leaseClock) run(ctx context.Context) {
	t := time.NewTicker(confirmInterval)
	defer t.Stop()
	for {
		sent := lc.now()
		if lc.confirm(ctx) == nil {
			lc.record(sent)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-lc.kick:
		}
	}
}

// confirmedSinceStart reports whether a confirmation succeeded since this process started: from
// then on its map holds every change committed before the restart (a restarted node's
// map starts from its last Raft snapshot and catches up as the log is applied).
func (lc *leaseClock) confirmedSinceStart() bool { return lc.last.Load() != nil }

// catchUp confirms the map at once, retrying until one succeeds or within ends: a
// restarted member calls it before it serves, so that its first requests see the map
// as committed rather than its last snapshot. It reports whether one succeeded.
func (lc *leaseClock) catchUp(ctx context.Context, within time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		sent := lc.now()
		if lc.confirm(ctx) == nil {
			lc.record(sent)
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (lc *leaseClock) confirm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, freshFor)
	defer cancel()
	if lc.mgr.IsLeader() {
		if !lc.led.Load() {
			// Leader since the last look: its map may lag what it committed until a
			// barrier has been applied.
			if err := lc.mgr.Barrier(ctx); err != nil {
				return err
			}
			lc.led.Store(true)
		}
		return lc.mgr.VerifyLeader(ctx)
	}
	lc.led.Store(false)
	_, addr := lc.mgr.Leader()
	if addr == "" {
		return errors.E(errors.Transient, "no Raft leader")
	}
	var info mapInfo
	if err := lc.client.DoJSON(ctx, &rpc.Request{Method: http.MethodGet, Addr: addr, Path: wire.PathMapInfo}, &info); err != nil {
		return err
	}
	_, err := lc.mgr.WaitEpoch(ctx, info.Epoch)
	return err
}

// listenNBD opens the NBD listener. An address that is not loopback needs TLS (client
// certificates authenticate) or the networks its clients may come from (--nbd-allow).
func listenNBD(addr string, allow []netip.Prefix, requireTLS bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, errors.E(errors.Invalid, fmt.Errorf("--nbd-listen %s: %w", addr, err))
	}
	ip, perr := netip.ParseAddr(host)
	loopback := (perr == nil && ip.IsLoopback()) || host == "localhost"
	if !loopback && len(allow) == 0 && !requireTLS {
		return nil, errors.Errorf("", errors.Invalid, "--nbd-listen %s is not a loopback address: plain NBD has no authentication, so give --nbd-tls require (clients present certificates of the cluster CA: cairn volume client-cert) or --nbd-allow with the networks its clients may connect from (e.g. 10.0.0.0/24)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.E(errors.IO, fmt.Errorf("--nbd-listen %s: %w", addr, err))
	}
	return ln, nil
}

// allowNBD is the NBD server's check of a client address: loopback clients always, others
// only from the allowed networks; nil (every address) when TLS authenticates the clients
// and no network is given.
func allowNBD(allow []netip.Prefix, requireTLS bool) func(net.Addr) bool {
	if requireTLS && len(allow) == 0 {
		return nil
	}
	return func(a net.Addr) bool {
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return false
		}
		ip := ap.Addr().Unmap()
		if ip.IsLoopback() {
			return true
		}
		for _, p := range allow {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
}

// nbdTLS is the NBD listener's TLS (--nbd-tls require): the node's internode certificate
// presented, a client certificate of the cluster CA required (an NBD client's, not a
// node's, and not one the map records as revoked: checkRevoked), each connection
// configured at its handshake from what the node holds then.
func (t *internodeTLS) nbdTLS(maps func() *clustermap.Map) *tls.Config {
	cert := func() (*tls.Certificate, error) {
		if c := t.cert.Load(); c != nil {
			return c, nil
		}
		return nil, errors.E(errors.Transient, "this node has no internode certificate yet: NBD over TLS presents it")
	}
	var pool struct {
		fp string
		p  *x509.CertPool
	}
	var mu sync.Mutex
	return &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			ca := t.ca.Load()
			if ca == nil {
				return nil, errors.E(errors.Transient, "this cluster has no CA (internode TLS is off: cairn admin internode-tls enable): NBD clients cannot be verified")
			}
			mu.Lock()
			if pool.fp != ca.Fingerprint() {
				pool.fp, pool.p = ca.Fingerprint(), ca.Pool()
			}
			p := pool.p
			mu.Unlock()
			return nodetls.NBDServerConfig(cert, p, func(c *x509.Certificate) error { return checkRevoked(maps(), c) }), nil
		}}
}

// checkRevoked refuses an NBD client certificate the map records as revoked (cairn
// volume client-cert revoke); the handshake's error is logged by the NBD server
// ("nbd: connection refused").
func checkRevoked(m *clustermap.Map, c *x509.Certificate) error {
	serial := c.SerialNumber.Text(16)
	r, ok := m.NBDClientRevoked(serial)
	if !ok {
		return nil
	}
	return errors.Errorf("", errors.Permission, "the NBD client certificate of %q (serial %s) was revoked at %s (cairn volume client-cert list)",
		c.Subject.CommonName, serial, time.Unix(0, r.Revoked).UTC().Format(time.RFC3339))
}

// authorizeNBD is the NBD listener's export check under TLS: the client certificate
// names the volume (or a prefix of it). Plain connections (only on a listener that does
// not require TLS) open every export.
func authorizeNBD(requireTLS bool) func(*tls.ConnectionState, string) bool {
	return func(cs *tls.ConnectionState, export string) bool {
		if cs == nil || len(cs.PeerCertificates) == 0 {
			return !requireTLS
		}
		cl, err := nodetls.NBDClientOf(cs.PeerCertificates[0])
		return err == nil && cl.Allows(export)
	}
}

// NBDClientCert is the answer of POST /admin/v1/volume-client-cert: an NBD client
// certificate and the CA that verifies the NBD listeners' certificates.
type NBDClientCert struct {
	Name     string    `json:"name"`
	Volumes  []string  `json:"volumes"`
	Cert     string    `json:"cert"` // PEM
	CA       string    `json:"ca"`   // PEM
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"not_after"`
	// Recorded says the certificate is in the map's records (feature level 10): it is
	// listed and can be revoked by name (by serial, it can be revoked anyway).
	Recorded bool `json:"recorded"`
}

// NBDClientInfo is an NBD client certificate's record as GET /admin/v1/volume-client-certs
// and POST /admin/v1/volume-client-cert/revoke show it.
type NBDClientInfo struct {
	Serial   string     `json:"serial"`
	Name     string     `json:"name,omitempty"`
	Volumes  []string   `json:"volumes,omitempty"`
	Issued   *time.Time `json:"issued,omitempty"`
	NotAfter *time.Time `json:"not_after,omitempty"`
	Revoked  *time.Time `json:"revoked,omitempty"`
}

func nbdClientInfo(c clustermap.NBDClient) NBDClientInfo {
	at := func(ns int64) *time.Time {
		if ns == 0 {
			return nil
		}
		t := time.Unix(0, ns).UTC()
		return &t
	}
	return NBDClientInfo{Serial: c.Serial, Name: c.Name, Volumes: c.Volumes, Issued: at(c.Issued), NotAfter: at(c.NotAfter), Revoked: at(c.Revoked)}
}

// nbdClientCerts lists the map's NBD client certificate records, oldest first (those
// revoked by serial without a record last).
func (a *adminHandler) nbdClientCerts() []NBDClientInfo {
	m := a.mgr.Current()
	out := make([]NBDClientInfo, 0, len(m.NBDClients))
	for _, c := range m.NBDClients {
		out = append(out, nbdClientInfo(c))
	}
	slices.SortFunc(out, func(x, y NBDClientInfo) int {
		switch {
		case x.Issued == nil && y.Issued != nil:
			return 1
		case x.Issued != nil && y.Issued == nil:
			return -1
		case x.Issued != nil && !x.Issued.Equal(*y.Issued):
			return x.Issued.Compare(*y.Issued)
		}
		return strings.Compare(x.Serial, y.Serial)
	})
	return out
}

// revokeNBDClient revokes the NBD client certificate of serial, or every one recorded for
// name (clustermap.OpRevokeNBDClient), and returns once every storage node that is up has
// applied the revocation: from then on their NBD listeners refuse the certificate at the
// TLS handshake. Connections opened before stay open.
func (a *adminHandler) revokeNBDClient(ctx context.Context, serial, name string) ([]NBDClientInfo, error) {
	const op errors.Op = "server.revokeNBDClient"
	serial = strings.ToLower(strings.TrimPrefix(serial, "0x"))
	if serial != "" {
		if err := clustermap.ValidSerial(serial); err != nil {
			return nil, errors.E(op, err)
		}
	}
	if (serial == "") == (name == "") {
		return nil, errors.E(op, errors.Invalid, "give the certificate's serial or its name (serial= or name=)")
	}
	if lvl := a.mgr.Current().Level; lvl < nbdClientLevel {
		return nil, errors.Errorf(op, errors.Precondition, "the cluster is at feature level %d: revoking NBD client certificates needs level %d (every node at this release; the leader raises it by itself)", lvl, nbdClientLevel)
	}
	nm, err := a.apply.Apply(ctx, clustermap.Command{Op: clustermap.OpRevokeNBDClient, NBDClient: &clustermap.NBDClient{Serial: serial, Name: name, Revoked: time.Now().UnixNano()}})
	if err != nil {
		return nil, errors.E(op, err)
	}
	var out []NBDClientInfo
	for _, c := range nm.NBDClients {
		if (serial != "" && c.Serial == serial) || (name != "" && c.Name == name) {
			out = append(out, nbdClientInfo(c))
			a.log.Info("revoked an NBD client certificate", "name", c.Name, "serial", c.Serial)
		}
	}
	if err := a.waitEpoch(ctx, nm, "the certificate is revoked", "until they have, they may still accept it: retry the revoke (it is idempotent)"); err != nil {
		return out, errors.E(op, err)
	}
	return out, nil
}

// maxClientCSR bounds the body of a client certificate request.
const maxClientCSR = 16 << 10

// nbdClientCert signs an NBD client's certificate request (the body, DER) for name and
// volumes (comma-separated patterns), valid for valid (Go duration; empty: a year), if
// this node holds the cluster CA key (a manager). The answer's body is signed
// (X-Cairn-Body-Sum): the CA it carries cannot be swapped on the way.
func (a *adminHandler) nbdClientCert(w http.ResponseWriter, r *http.Request) error {
	const op errors.Op = "server.nbdClientCert"
	q := r.URL.Query()
	name := q.Get("name")
	var volumes []string
	for _, v := range strings.Split(q.Get("volumes"), ",") {
		if v = strings.TrimSpace(v); v != "" {
			volumes = append(volumes, v)
		}
	}
	var lifetime time.Duration
	if s := q.Get("valid"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return errors.E(op, errors.Invalid, fmt.Sprintf("valid=%q: a duration such as 8760h", s))
		}
		lifetime = d
	}
	csr, err := io.ReadAll(io.LimitReader(r.Body, maxClientCSR+1))
	if err != nil {
		return errors.E(op, errors.Transient, err)
	}
	if len(csr) > maxClientCSR {
		return errors.E(op, errors.TooLarge, "certificate request too large")
	}
	m := a.mgr.Current()
	if m.Internode == nil {
		return errors.E(op, errors.NotExist, "this cluster has no CA (internode TLS is off): enable it first (cairn admin internode-tls enable)")
	}
	ca := a.itls.ca.Load()
	if ca == nil || !ca.HasKey() || ca.Fingerprint() != mapCA(m).Fingerprint() {
		return errors.E(op, errors.NotExist, fmt.Sprintf("node %s does not hold the cluster CA key (only managers do): run the command with --admin on a manager", a.self))
	}
	p, err := ca.SignNBDClient(csr, name, volumes, time.Now(), lifetime)
	if err != nil {
		return errors.E(op, err)
	}
	b, _ := pem.Decode(p)
	if b == nil {
		return errors.E(op, errors.Invalid, "the certificate issued is not PEM")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	ans := NBDClientCert{Name: name, Volumes: volumes, Cert: string(p), CA: string(ca.CertPEM), Serial: leaf.SerialNumber.Text(16), NotAfter: leaf.NotAfter}
	if m.Level >= nbdClientLevel {
		// Recorded before it is handed out: every certificate answered can be revoked.
		rec := clustermap.NBDClient{Serial: ans.Serial, Name: name, Volumes: volumes, Issued: time.Now().UnixNano(), NotAfter: leaf.NotAfter.UnixNano()}
		if _, err := a.apply.Apply(r.Context(), clustermap.Command{Op: clustermap.OpIssueNBDClient, NBDClient: &rec}); err != nil {
			return errors.E(op, fmt.Errorf("the certificate was not recorded, so not handed out: %w", err))
		}
		ans.Recorded = true
	}
	body, _ := json.Marshal(ans)
	a.log.Info("issued an NBD client certificate", "name", name, "volumes", strings.Join(volumes, ","), "serial", ans.Serial, "not_after", leaf.NotAfter, "remote", r.RemoteAddr)
	rpc.WriteSignedBody(w, "application/json", body)
	return nil
}

// nbdTLSHint logs the name NBD clients must connect to: the listener presents the node's
// internode certificate, which names the host of the node's advertised address, and
// qemu and libnbd check the host they dial against it. A listener bound to another
// address is warned about.
func nbdTLSHint(log *slog.Logger, listen, nodeAddr string) {
	names := addrHosts(nodeAddr)
	host, _, _ := net.SplitHostPort(listen)
	if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() && !slices.Contains(names, host) {
		log.Warn("nbd: TLS clients check the host they dial against the node's certificate, which names only the node address's host: connect to that, or give --node-addr the NBD host", "nbd", listen, "certificate_names", strings.Join(names, ","))
		return
	}
	log.Info("nbd: TLS required; clients connect to the host the node's certificate names", "nbd", listen, "certificate_names", strings.Join(names, ","))
}
