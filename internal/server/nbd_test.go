package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	stderrors "errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/nodetls"
	"github.com/cairnfs/cairn/internal/notify"
	"github.com/cairnfs/cairn/internal/testutil"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// A listener that is not on loopback needs TLS or an allow-list; with TLS and no list,
// every address may connect (the certificate decides).
func TestListenNBDRules(t *testing.T) {
	// 192.0.2.1 is a documentation address no host has: past the check, binding fails.
	_, err := listenNBD("192.0.2.1:10809", nil, false)
	if !errors.Is(errors.Invalid, err) || !strings.Contains(err.Error(), "--nbd-tls require") {
		t.Errorf("plain, no allow-list: %v", err)
	}
	for _, c := range []struct {
		allow []netip.Prefix
		tls   bool
	}{{nil, true}, {[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, false}} {
		if _, err := listenNBD("192.0.2.1:10809", c.allow, c.tls); errors.Is(errors.Invalid, err) {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	if allowNBD(nil, true) != nil {
		t.Error("TLS without an allow-list filters addresses")
	}
	allow := allowNBD([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, true)
	if allow(&net.TCPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}) || !allow(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 1}) {
		t.Error("TLS with an allow-list: the list is not applied")
	}
	if err := (&Config{Roles: []string{"gateway"}, Replicas: 1, Partitions: 1, Voters: 1, NBDTLS: true, NBDListen: "127.0.0.1:0", Internode: InternodeTLS{Off: true}}).validate(); err == nil {
		t.Error("--nbd-tls require with --internode-tls off accepted")
	}
}

// The export rule under TLS: an NBD client certificate opens what it names; a node
// certificate, or a plain connection on a listener that requires TLS, opens nothing.
func TestAuthorizeNBD(t *testing.T) {
	ca, err := nodetls.NewCA("c", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nodetls.NewKey()
	csr, _ := nodetls.NewNBDClientCSR(key, "hv1")
	p, err := ca.SignNBDClient(csr, "hv1", []string{"vm1", "db-*"}, time.Now(), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(p)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	auth := authorizeNBD(true)
	for export, want := range map[string]bool{"vm1": true, "vm1@s": true, "db-a": true, "vm2": false} {
		if auth(cs, export) != want {
			t.Errorf("%s: %v", export, !want)
		}
	}
	if auth(nil, "vm1") {
		t.Error("a plain connection opens an export of a TLS-required listener")
	}
	if !authorizeNBD(false)(nil, "vm1") {
		t.Error("a plain listener refuses a plain connection")
	}
}

// Volume I/O that finds the map unconfirmed waits for a confirmation (one sent less than
// freshFor ago) and then goes on; a confirmation that came too late to count does not
// release it; no confirmation by the end of the context is an error. The clock is the
// test's; the waiter's kick (its request for a confirmation now) says it is waiting.
func TestLeaseClockWait(t *testing.T) {
	lc := newLeaseClock(nil, nil, testutil.NewLogger(t))
	base := time.Now()
	var now atomic.Pointer[time.Time]
	set := func(d time.Duration) { at := base.Add(d); now.Store(&at) }
	set(0)
	lc.now = func() time.Time { return *now.Load() }

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lc.wait(ctx); !errors.Is(errors.Transient, err) || !strings.Contains(err.Error(), "not confirmed") {
		t.Fatalf("never confirmed, context ended: %v", err)
	}
	lc.record(base)
	if err := lc.wait(ctx); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	if lc.waits.Load() != 1 || lc.timeouts.Load() != 1 {
		t.Fatalf("waits %d, timeouts %d, want 1 and 1", lc.waits.Load(), lc.timeouts.Load())
	}

	set(3 * time.Second) // the last confirmation is stale
	done := make(chan error, 1)
	go func() { done <- lc.wait(context.Background()) }()
	<-lc.kick
	lc.record(base.Add(500 * time.Millisecond)) // sent 2.5 s ago: too late to count
	<-lc.kick                                   // woken, still stale, waiting again
	select {
	case err := <-done:
		t.Fatalf("released by a stale confirmation: %v", err)
	default:
	}
	lc.record(base.Add(2900 * time.Millisecond))
	if err := <-done; err != nil {
		t.Fatalf("after a fresh confirmation: %v", err)
	}
	if lc.waits.Load() != 2 || lc.timeouts.Load() != 1 {
		t.Fatalf("waits %d, timeouts %d, want 2 and 1", lc.waits.Load(), lc.timeouts.Load())
	}
}

// A restarted node's map starts from its last Raft snapshot and catches up as the log
// after it is applied. catchUp returns once the leader confirmed the map, which then
// holds every change committed before the restart; until a confirmation, the entries of
// a link missing from the map wait (it may be missing only from a stale map) instead of
// being dropped as a removed link's are.
func TestCatchUpAfterRestart(t *testing.T) {
	dir, log := t.TempDir(), testutil.NewLogger(t)
	open := func() *clustermap.Manager {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := clustermap.Config{Dir: dir, ID: "n1", Addr: ln.Addr().String(), Listener: ln, Logger: log,
			Dial: func(addr string, timeout time.Duration) (net.Conn, error) {
				return net.DialTimeout("tcp", addr, timeout)
			},
			Bootstrap: &clustermap.Map{Partitions: 8, Replicas: 1,
				Nodes:   []clustermap.Node{{ID: "n1", Addr: ln.Addr().String(), S3Addr: "s3", Capacity: 1 << 30, Weight: 1, Roles: []string{clustermap.RoleManager, clustermap.RoleStorage}}},
				Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 1, W: 1, R: 1, D: 1}}}}
		m, err := clustermap.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	apply := func(m *clustermap.Manager, name string) {
		t.Helper()
		proctest.WaitFor(t, time.Minute, func() error { // until the node is the leader
			_, err := m.Apply(ctx, clustermap.Command{Op: clustermap.OpCreateBucket, Bucket: &clustermap.Bucket{Name: name}})
			if err != nil && !errors.Is(errors.Transient, err) {
				t.Fatalf("create %s: %v", name, err)
			}
			return err
		})
	}
	m := open()
	apply(m, "before")
	if err := m.Compact(ctx); err != nil { // the snapshot the restart starts from
		t.Fatal(err)
	}
	for i := range 50 {
		apply(m, fmt.Sprintf("after-%d", i))
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	m = open()
	defer m.Close()
	lc := newLeaseClock(m, nil, log)
	r := &replicator{mgr: m, confirmed: lc.confirmedSinceStart}
	if lc.confirmedSinceStart() {
		t.Fatal("confirmed before any confirmation")
	}
	if err := r.target("gone").Send(ctx, nil); !stderrors.Is(err, notify.ErrWait) {
		t.Fatalf("a link missing from an unconfirmed map: %v, want a wait", err)
	}
	if !lc.catchUp(ctx, 30*time.Second) {
		t.Fatal("no confirmation of a single node's map")
	}
	cur := m.Current()
	for i := range 50 {
		if _, ok := cur.Buckets[fmt.Sprintf("after-%d", i)]; !ok {
			t.Fatalf("after catchUp, the map (epoch %d) lacks after-%d, committed before the restart", cur.Epoch, i)
		}
	}
	if _, ok := r.target("gone").(discard); !ok {
		t.Fatalf("a link missing from a confirmed map: %T, want its entries dropped", r.target("gone"))
	}
}
