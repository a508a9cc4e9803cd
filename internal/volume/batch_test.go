package volume

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/replica"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/topology"
)

// remoteHolders serves the stores of n2 and n3 (fenced by their maps) on loopback sockets
// behind the internode signature check, as nodes do, and makes s reach them there (through
// their Faults); n1 stays in process.
type remoteHolders struct {
	c      *cluster
	secret *rpc.Secret
	mu     sync.Mutex
	srvs   map[string]*httptest.Server
	client *rpc.Client
}

func serveRemotes(t testing.TB, c *cluster, s *Service) *remoteHolders {
	t.Helper()
	secret, err := rpc.NewSecret("volume-batch-test-secret-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	tr := rpc.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	h := &remoteHolders{c: c, secret: secret, srvs: map[string]*httptest.Server{},
		client: &rpc.Client{Secret: secret, Node: "n1", HTTP: &http.Client{Transport: tr}, Epoch: func() uint64 { return 1 }}}
	for _, id := range []string{"n2", "n3"} {
		c.locals[id].Fence = Fence(c.maps, nil)
		h.start(t, id)
	}
	s.cfg.Replica = func(t topology.Target) replica.Replica {
		if t.ID == "n1" {
			return c.faults[t.ID].Wrap(c.locals[t.ID])
		}
		h.mu.Lock()
		addr := h.srvs[t.ID].Listener.Addr().String()
		h.mu.Unlock()
		return c.faults[t.ID].Wrap(&replica.Remote{Node: t.ID, Addr: addr, RPC: h.client, Timeout: 2 * time.Second})
	}
	return h
}

// start (re)starts holder id's server over its store.
func (h *remoteHolders) start(t testing.TB, id string) {
	t.Helper()
	rh := replica.NewHandler(replica.HandlerConfig{Local: h.c.locals[id], Secret: h.secret, Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, _, _, ok := h.secret.Authenticate(w, r)
		if !ok {
			return
		}
		rh.ServeHTTP(w, r)
		rpc.EndResponse(w)
	}))
	t.Cleanup(srv.Close)
	h.mu.Lock()
	h.srvs[id] = srv
	h.mu.Unlock()
}

// kill stops holder id's server, cutting its connections (a killed process).
func (h *remoteHolders) kill(id string) {
	h.mu.Lock()
	srv := h.srvs[id]
	h.mu.Unlock()
	srv.CloseClientConnections()
	srv.Close()
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after 10 s", what)
		}
		<-tick.C
	}
}

func (s *Service) queued(id string) int {
	return s.sender(id).Queued()
}

// concurrentWrites writes 4 KiB at off into each of objects 0..15 at once, while holder
// id is hung, and returns, once they are all queued behind its requests in flight, a
// function that waits for them.
func concurrentWrites(t *testing.T, c *cluster, s *Service, d *conn, model []byte, off int64, seed byte, hung string) func() []error {
	t.Helper()
	c.faults[hung].Hang()
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range 16 {
		p := bytes.Repeat([]byte{seed + byte(i)}, 4096)
		at := int64(i)*blockSize + off
		copy(model[at:], p)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = d.WriteAt(p, at)
		}()
	}
	waitFor(t, "the writes to queue behind the hung holder's requests", func() bool { return s.queued(hung) == 16-maxInFlight })
	return func() []error {
		wg.Wait()
		return errs
	}
}

// checkHolders checks that every holder of every data object holds model's bytes at one
// order.
func checkHolders(t *testing.T, c *cluster, model []byte) {
	t.Helper()
	for i := int64(0); i < int64(len(model))/blockSize; i++ {
		var first uint64
		for id, st := range c.stores {
			key := ObjectKey("00000000000000aa", i)
			o, err := st.StatObject(clustermap.VolumeBucket, key)
			if err != nil {
				t.Fatalf("node %s, object %d: %v", id, i, err)
			}
			if first == 0 {
				first = o.HLC
			} else if o.HLC != first {
				t.Fatalf("object %d: holders at orders %s and %s", i, orderString(first), orderString(o.HLC))
			}
			r, err := st.OpenObject(clustermap.VolumeBucket, key)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			_, err = r.WriteRange(context.Background(), &buf, 0, blockSize)
			r.Close()
			if err != nil || !bytes.Equal(buf.Bytes(), model[i*blockSize:(i+1)*blockSize]) {
				t.Fatalf("node %s holds other bytes of object %d (%v)", id, i, err)
			}
		}
	}
}

// TestBatchedWrites: writes that queue behind a holder's requests in flight go to it in
// range batches over the internode protocol, and every holder ends with every write.
// Then the holder is killed with a batch queued: the writes wait for it until it is
// marked down and go on without it; back, it is caught up by the next writes.
func TestBatchedWrites(t *testing.T) {
	c := newCluster(t)
	s := c.service("n1")
	h := serveRemotes(t, c, s)
	d := openDevice(t, s, "vm")
	model := make([]byte, 4<<20)
	for i := range int64(16) { // every object used once: their holders are synced
		p := bytes.Repeat([]byte{byte(i)}, 100)
		copy(model[i*blockSize:], p)
		if _, err := d.WriteAt(p, i*blockSize); err != nil {
			t.Fatal(err)
		}
	}
	if b, _ := s.BatchStats(); b != 0 {
		t.Fatalf("%d batches of writes sent one by one", b)
	}

	wait := concurrentWrites(t, c, s, d, model, 8192, 'a', "n2")
	c.faults["n2"].Heal()
	for i, err := range wait() {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if b, n := s.BatchStats(); b < 1 || n < 16-maxInFlight {
		t.Fatalf("%d batches carried %d writes; want the %d queued in at least one", b, n, 16-maxInFlight)
	}
	checkHolders(t, c, model)

	// n2 killed with a batch queued for it: the writes retry until it is marked down.
	wait = concurrentWrites(t, c, s, d, model, 16384, 'A', "n2")
	h.kill("n2")
	c.faults["n2"].Heal()
	done := make(chan []error, 1)
	go func() { done <- wait() }()
	select {
	case errs := <-done:
		t.Fatalf("the writes returned while a holder was gone and not marked down: %v", errs)
	default:
	}
	c.setMap(func(m *clustermap.Map) { m.Nodes[1].State = clustermap.StateDown })
	for i, err := range <-done {
		if err != nil {
			t.Fatalf("write %d after the holder was marked down: %v", i, err)
		}
	}
	// Back (its store as it was): the next write of each object catches it up.
	h.start(t, "n2")
	c.setMap(func(m *clustermap.Map) { m.Nodes[1].State = clustermap.StateUp })
	for i := range int64(16) {
		p := []byte("back")
		copy(model[i*blockSize+20000:], p)
		if _, err := d.WriteAt(p, i*blockSize+20000); err != nil {
			t.Fatal(err)
		}
	}
	checkHolders(t, c, model)
	if got := readAt(t, d, 0, len(model)); !bytes.Equal(got, model) {
		t.Fatal("the volume reads other bytes than were written")
	}
}

// TestFailedWriteSyncsAgain: a write that failed after some holders took it leaves the
// object to be synced again, so the next write follows the highest order: no holder
// counts the next write as one it took already (and misses it).
func TestFailedWriteSyncsAgain(t *testing.T) {
	c := newCluster(t)
	s := c.service("n1")
	s.cfg.WriteTimeout = 500 * time.Millisecond
	d := openDevice(t, s, "vm")
	if _, err := d.WriteAt([]byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	c.faults["n3"].Hang() // n1 and n2 take the next write; n3 never answers
	if _, err := d.WriteAt([]byte("AAAA"), 100); err == nil {
		t.Fatal("a write a holder never answered succeeded")
	}
	c.faults["n3"].Heal()
	if _, err := d.WriteAt([]byte("BBBB"), 200); err != nil {
		t.Fatal(err)
	}
	for id, st := range c.stores {
		r, err := st.OpenObject(clustermap.VolumeBucket, ObjectKey("00000000000000aa", 0))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		_, err = r.WriteRange(context.Background(), &buf, 0, 300)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := buf.Bytes(); string(got[200:204]) != "BBBB" {
			t.Errorf("node %s lacks the acknowledged write (%q at 200, %q at 100)", id, got[200:204], got[100:104])
		}
	}
	if _, err := d.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReplicatedWrite: 4 KiB writes from 32 goroutines to random places of a 64 MiB
// volume of three holders, two of them reached over loopback (plain HTTP, signed), with
// range batches on and off. cpu-us/op is the process's CPU time (user and system) per
// write: the writer's and both holders' (one process), the figure batches divide.
func BenchmarkReplicatedWrite(b *testing.B) {
	for _, batch := range []bool{true, false} {
		b.Run(map[bool]string{true: "batch", false: "single"}[batch], func(b *testing.B) { benchWrites(b, batch) })
	}
}

func benchWrites(b *testing.B, batch bool) {
	c := newCluster(b)
	c.setMap(func(m *clustermap.Map) {
		m.Volumes["big"] = clustermap.Volume{Name: "big", ID: "00000000000000bb", Size: 64 << 20, BlockSize: blockSize, Holder: "n1", Epoch: 1}
	})
	s := c.service("n1")
	s.cfg.Batch = func() bool { return batch }
	serveRemotes(b, c, s)
	dv, _, err := s.Open(context.Background(), "big")
	if err != nil {
		b.Fatal(err)
	}
	d := dv.(*conn)
	defer d.Close()
	const size = 64 << 20
	p := bytes.Repeat([]byte{7}, 4096)
	for off := int64(0); off < size; off += blockSize { // every object synced first
		if _, err := d.WriteAt(p, off); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(16) // 32 writers on 2 cores
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := next.Add(1)
			off := (n * 2654435761 % (size / 4096)) * 4096
			if _, err := d.WriteAt(p, off); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-us/op")
	if bs, ws := s.BatchStats(); bs > 0 {
		b.ReportMetric(float64(ws)/float64(bs), "writes/batch")
	}
}

// cpuTime is the process's CPU time so far (user and system), in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
