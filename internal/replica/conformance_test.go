package replica_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/hlc"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/replica/replicatest"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
)

// newLocal opens a store in a temporary directory with the suite's bucket.
func newLocal(t *testing.T) *replica.Local { return newLocalWith(t, nil) }

// newLocalWith is newLocal with the store's outbox hook.
func newLocalWith(t *testing.T, outbox func(bucket, key string, o *object.Object) [][]byte) *replica.Local {
	t.Helper()
	st, err := store.Open(store.Config{Dir: t.TempDir(), InlineMax: 1 << 10, ChunkSize: 256 << 10, SegmentSize: 16 << 20, Reserve: 1,
		CompactInterval: time.Hour, Logger: discard(), Clock: new(hlc.Clock), Outbox: outbox})
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
func newRemote(t *testing.T) *replica.Remote { return remoteOf(t, newLocal(t)) }

// remoteOf serves l as newRemote does.
func remoteOf(t *testing.T, l *replica.Local) *replica.Remote {
	t.Helper()
	secret, err := rpc.NewSecret("conformance-test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	h := replica.NewHandler(replica.HandlerConfig{Local: l, Secret: secret, Logger: discard()})
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

// TestOrigin: the origin of a replicated change (object.Object.Origin) reaches the
// holder's outbox hook with a write and with a deletion, locally and over the wire, and
// is not stored.
func TestOrigin(t *testing.T) {
	for _, remote := range []bool{false, true} {
		var mu sync.Mutex
		var seen []string
		l := newLocalWith(t, func(bucket, key string, o *object.Object) [][]byte {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, key+"="+o.Origin)
			return nil
		})
		var r replica.Replica = l
		if remote {
			r = remoteOf(t, l)
		}
		ctx := context.Background()
		meta := &object.Object{Size: 2, Origin: "c-a"}
		if _, err := r.Put(ctx, replica.Write{Bucket: replicatest.Bucket, Key: "k", Meta: meta, Body: strings.NewReader("hi"), Size: 2, Version: 10, FinalNow: meta}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Put(ctx, replica.Write{Bucket: replicatest.Bucket, Key: "mine", Meta: &object.Object{Size: 0}, Body: strings.NewReader(""), Size: 0, Version: 11, FinalNow: &object.Object{}}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Delete(ctx, replicatest.Bucket, "k", object.Object{HLC: 12, ModTime: 1, Origin: "c-b"}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := strings.Join(seen, " ")
		mu.Unlock()
		if want := "k=c-a mine= k=c-b"; got != want {
			t.Errorf("remote %v: the hook saw %q, want %q", remote, got, want)
		}
		if o, err := l.Stat(ctx, replicatest.Bucket, "k"); err != nil || o.Origin != "" {
			t.Errorf("remote %v: stored %+v %v", remote, o, err)
		}
	}
}
