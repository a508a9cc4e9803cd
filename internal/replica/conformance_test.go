package replica_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/replica/replicatest"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
)

// newLocal opens a store in a temporary directory with the suite's bucket.
func newLocal(t *testing.T) *replica.Local {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), InlineMax: 1 << 10, ChunkSize: 256 << 10, SegmentSize: 16 << 20, Reserve: 1,
		CompactInterval: time.Hour, Logger: discard(), Clock: new(hlc.Clock)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.CreateBucket(replicatest.Bucket); err != nil {
		t.Fatal(err)
	}
	return &replica.Local{Node: "n1", Store: st}
}

// newRemote serves a new Local on a loopback socket behind the internode signature check,
// as a node does, and returns a Remote for it.
func newRemote(t *testing.T) *replica.Remote {
	t.Helper()
	secret, err := rpc.NewSecret("conformance-test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	h := replica.NewHandler(replica.HandlerConfig{Local: newLocal(t), Secret: secret, Logger: discard()})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := secret.Authenticate(w, r)
		if !ok {
			return
		}
		h.ServeHTTP(w, r)
		rpc.EndResponse(w)
	}))
	t.Cleanup(srv.Close)
	tr := rpc.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	return &replica.Remote{Node: "n1", Addr: srv.Listener.Addr().String(), Timeout: 10 * time.Second,
		RPC: &rpc.Client{Secret: secret, Node: "gw", HTTP: &http.Client{Transport: tr}}}
}

func TestConformanceLocal(t *testing.T) {
	replicatest.Run(t, func(t *testing.T) replica.Replica { return newLocal(t) })
}

func TestConformanceRemote(t *testing.T) {
	replicatest.Run(t, func(t *testing.T) replica.Replica { return newRemote(t) })
}

// TestConformanceFaultsHealed: a replica wrapped in Faults that inject nothing is the
// replica itself.
func TestConformanceFaultsHealed(t *testing.T) {
	replicatest.Run(t, func(t *testing.T) replica.Replica { return replica.NewFaults().Wrap(newLocal(t)) })
}
