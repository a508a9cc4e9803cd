package clustermap

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/cairnfs/cairn/internal/errors"
)

func ptr(s string) *string { return &s }

func initMap() *Map {
	return &Map{
		Partitions: 64,
		Replicas:   3,
		Nodes: []Node{
			{ID: "n2", Addr: "h2:7000", Zone: "b", Roles: []string{RoleStorage}},
			{ID: "n1", Addr: "h1:7000", Zone: "a", Roles: []string{RoleManager, RoleGateway, RoleStorage}},
		},
		Classes: map[string]Class{StandardClass: {Name: StandardClass, N: 3, W: 2, R: 2, D: 2}},
	}
}

// initialized returns the map after OpInit with initMap.
func initialized(t *testing.T) *Map {
	t.Helper()
	m, err := applyCommand(emptyMap(), Command{Op: OpInit, Init: initMap()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestApplyInit(t *testing.T) {
	m := initialized(t)
	if m.Epoch != 1 || len(m.Nodes) != 2 || m.Nodes[0].ID != "n1" || m.Nodes[1].ID != "n2" {
		t.Fatalf("after init: %+v", m)
	}
	for _, n := range m.Nodes {
		if n.State != StateUp {
			t.Errorf("node %s state %q, want up", n.ID, n.State)
		}
	}
	if m.Buckets == nil || m.Users == nil {
		t.Fatal("nil maps after init")
	}
	if _, err := applyCommand(m, Command{Op: OpInit, Init: initMap()}); !errors.Is(errors.Exist, err) {
		t.Fatalf("second init: %v, want Exist", err)
	}
	bad := []func(*Map){
		func(m *Map) { m.Partitions = 0 },
		func(m *Map) { m.Nodes[1].ID = "n2" },                    // duplicate id
		func(m *Map) { m.Nodes[1].Addr = "h2:7000" },             // duplicate addr
		func(m *Map) { m.Nodes[0].Roles = []string{"chef"} },     // bad role
		func(m *Map) { m.Nodes[0].State = "sleepy" },             // bad state
		func(m *Map) { m.Classes["X"] = Class{Name: "X", N: 1} }, // bad class
		func(m *Map) { m.Classes["X"] = Class{Name: "Y", N: 1, W: 1, R: 1, D: 1} },
		func(m *Map) { m.Buckets = map[string]Bucket{"a": {Name: "b"}} },
	}
	for i, f := range bad {
		im := initMap()
		f(im)
		if _, err := applyCommand(emptyMap(), Command{Op: OpInit, Init: im}); err == nil {
			t.Errorf("bad init %d accepted", i)
		}
	}
	if _, err := applyCommand(emptyMap(), Command{Op: OpInit}); !errors.Is(errors.Invalid, err) {
		t.Errorf("init without map: %v", err)
	}
	if _, err := applyCommand(emptyMap(), Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "x"}}); !errors.Is(errors.Precondition, err) {
		t.Errorf("command before init: %v, want Precondition", err)
	}
}

func TestApplyCommands(t *testing.T) {
	n3 := &Node{ID: "n3", Addr: "h3:7000", Zone: "c", Capacity: 10, Weight: 1, Roles: []string{RoleStorage}}
	tests := []struct {
		name  string
		cmd   Command
		kind  errors.Kind // expected error kind, or Other for success
		check func(t *testing.T, m *Map)
	}{
		{"add node", Command{Op: OpAddNode, Node: n3}, errors.Other, func(t *testing.T, m *Map) {
			n, ok := m.Node("n3")
			if !ok || n.State != StateUp || n.Zone != "c" || len(m.Nodes) != 3 || m.Nodes[2].ID != "n3" {
				t.Fatalf("n3 = %+v %v; nodes %+v", n, ok, m.Nodes)
			}
		}},
		{"add node sorted", Command{Op: OpAddNode, Node: &Node{ID: "n0", Addr: "h0:1"}}, errors.Other, func(t *testing.T, m *Map) {
			if m.Nodes[0].ID != "n0" || m.Nodes[1].ID != "n1" {
				t.Fatalf("nodes not sorted: %+v", m.Nodes)
			}
		}},
		{"add node duplicate id", Command{Op: OpAddNode, Node: &Node{ID: "n1", Addr: "other:1"}}, errors.Exist, nil},
		{"add node duplicate addr", Command{Op: OpAddNode, Node: &Node{ID: "n9", Addr: "h1:7000"}}, errors.Exist, nil},
		{"add node rejoin", Command{Op: OpAddNode, Node: &Node{ID: "n2", Addr: "h2:7000", S3Addr: "h2:9000", Zone: "z", Capacity: 5, Roles: []string{RoleStorage, RoleGateway}}}, errors.Other, func(t *testing.T, m *Map) {
			n, _ := m.Node("n2")
			if n.S3Addr != "h2:9000" || n.Zone != "z" || n.Capacity != 5 || !n.HasRole(RoleGateway) || n.State != StateUp || len(m.Nodes) != 2 {
				t.Fatalf("n2 = %+v", n)
			}
		}},
		{"add node missing", Command{Op: OpAddNode}, errors.Invalid, nil},
		{"add node no addr", Command{Op: OpAddNode, Node: &Node{ID: "x"}}, errors.Invalid, nil},
		{"add node bad role", Command{Op: OpAddNode, Node: &Node{ID: "x", Addr: "x:1", Roles: []string{"boss"}}}, errors.Invalid, nil},
		{"update node", Command{Op: OpUpdateNode, Node: &Node{ID: "n2", Addr: "h2b:7000", AdminAddr: "h2:8000", Capacity: 99, Weight: 2, DeviceClass: "ssd", Zone: "q", State: StateOut}}, errors.Other, func(t *testing.T, m *Map) {
			n, _ := m.Node("n2")
			if n.Addr != "h2b:7000" || n.AdminAddr != "h2:8000" || n.Capacity != 99 || n.Weight != 2 || n.DeviceClass != "ssd" || n.Zone != "q" {
				t.Fatalf("n2 = %+v", n)
			}
			if n.State != StateUp || !n.HasRole(RoleStorage) {
				t.Fatalf("update_node changed state or roles: %+v", n)
			}
		}},
		{"update node unknown", Command{Op: OpUpdateNode, Node: &Node{ID: "n9", Addr: "h9:1"}}, errors.NotExist, nil},
		{"update node addr taken", Command{Op: OpUpdateNode, Node: &Node{ID: "n2", Addr: "h1:7000"}}, errors.Exist, nil},
		{"set state", Command{Op: OpSetState, NodeID: "n2", State: StateDown}, errors.Other, func(t *testing.T, m *Map) {
			if n, _ := m.Node("n2"); n.State != StateDown {
				t.Fatalf("n2 state %q", n.State)
			}
		}},
		{"set state unknown node", Command{Op: OpSetState, NodeID: "n9", State: StateDown}, errors.NotExist, nil},
		{"set state bad state", Command{Op: OpSetState, NodeID: "n2", State: "asleep"}, errors.Invalid, nil},
		{"remove node", Command{Op: OpRemoveNode, NodeID: "n1"}, errors.Other, func(t *testing.T, m *Map) {
			if _, ok := m.Node("n1"); ok || len(m.Nodes) != 1 {
				t.Fatalf("nodes %+v", m.Nodes)
			}
		}},
		{"remove node unknown", Command{Op: OpRemoveNode, NodeID: "n9"}, errors.NotExist, nil},
		{"create bucket", Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "photos", Created: 123}}, errors.Other, func(t *testing.T, m *Map) {
			if b := m.Buckets["photos"]; b.Created != 123 {
				t.Fatalf("bucket %+v", b)
			}
		}},
		{"create bucket exists", Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "old"}}, errors.Exist, nil},
		{"create bucket no name", Command{Op: OpCreateBucket, Bucket: &Bucket{}}, errors.Invalid, nil},
		{"delete bucket", Command{Op: OpDeleteBucket, Name: "old"}, errors.Other, func(t *testing.T, m *Map) {
			if _, ok := m.Buckets["old"]; ok {
				t.Fatal("bucket still there")
			}
		}},
		{"delete bucket absent", Command{Op: OpDeleteBucket, Name: "nope"}, errors.NotExist, nil},
		{"put user", Command{Op: OpPutUser, User: &User{AccessKey: "AK", SecretKey: "SK"}}, errors.Other, func(t *testing.T, m *Map) {
			if m.Users["AK"].SecretKey != "SK" {
				t.Fatal("user not stored")
			}
		}},
		{"put user replaces", Command{Op: OpPutUser, User: &User{AccessKey: "OLD", SecretKey: "new"}}, errors.Other, func(t *testing.T, m *Map) {
			if m.Users["OLD"].SecretKey != "new" {
				t.Fatal("user not replaced")
			}
		}},
		{"put user no key", Command{Op: OpPutUser, User: &User{}}, errors.Invalid, nil},
		{"put class", Command{Op: OpPutClass, Class: &Class{Name: "REDUCED", N: 2, W: 1, R: 1, D: 2}}, errors.Other, func(t *testing.T, m *Map) {
			if c, ok := m.Class("REDUCED"); !ok || c.N != 2 {
				t.Fatalf("class %+v", c)
			}
		}},
		{"put class W > N", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 3, R: 1, D: 1}}, errors.Invalid, nil},
		{"put class R 0", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 1, R: 0, D: 1}}, errors.Invalid, nil},
		{"put class D > N", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 1, W: 1, R: 1, D: 2}}, errors.Invalid, nil},
		{"put class no name", Command{Op: OpPutClass, Class: &Class{N: 1, W: 1, R: 1, D: 1}}, errors.Invalid, nil},
		{"put class nil", Command{Op: OpPutClass}, errors.Invalid, nil},
		{"put class bad name", Command{Op: OpPutClass, Class: &Class{Name: "a b", N: 1, W: 1, R: 1, D: 1}}, errors.Invalid, nil},
		{"put class EC 1+1", Command{Op: OpPutClass, Class: &Class{Name: "EC11", N: 2, W: 2, R: 1, D: 2, K: 1, M: 1}}, errors.Other, func(t *testing.T, m *Map) {
			if c, ok := m.Class("EC11"); !ok || !c.EC() || c.K != 1 || c.M != 1 {
				t.Fatalf("class %+v", c)
			}
		}},
		{"put class EC k=0", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 2, R: 1, D: 1, K: 0, M: 2}}, errors.Invalid, nil},
		{"put class EC m=0", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 2, R: 1, D: 1, K: 2, M: 0}}, errors.Invalid, nil},
		{"put class EC too wide", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 40, W: 34, R: 1, D: 1, K: 33, M: 7}}, errors.Invalid, nil},
		{"put class EC N != k+m", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 5, W: 5, R: 1, D: 1, K: 4, M: 2}}, errors.Invalid, nil},
		{"put class EC W < k", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 3, W: 1, R: 1, D: 1, K: 2, M: 1}}, errors.Invalid, nil},
		// Two storage nodes: 4+2 needs six failure domains.
		{"put class EC more shards than nodes", Command{Op: OpPutClass, Class: &Class{Name: "EC42", N: 6, W: 5, R: 4, D: 4, K: 4, M: 2}}, errors.Invalid, nil},
		{"put class unknown device class", Command{Op: OpPutClass, Class: &Class{Name: "FAST", N: 1, W: 1, R: 1, D: 1, DeviceClass: "ssd"}}, errors.Invalid, nil},
		{"put class bad S3 name", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 1, W: 1, R: 1, D: 1, S3Names: []string{"PLATINUM"}}}, errors.Invalid, nil},
		{"put class S3 name", Command{Op: OpPutClass, Class: &Class{Name: "TWO", N: 2, W: 2, R: 1, D: 2, S3Names: []string{"STANDARD_IA"}}}, errors.Other, func(t *testing.T, m *Map) {
			if c, ok := m.ResolveClass("STANDARD_IA"); !ok || c.Name != "TWO" {
				t.Fatalf("STANDARD_IA resolves to %+v %v", c, ok)
			}
			if c, ok := m.ResolveClass("GLACIER"); !ok || c.Name != StandardClass {
				t.Fatalf("unmapped GLACIER resolves to %+v %v; want STANDARD", c, ok)
			}
			if _, ok := m.ResolveClass("PLATINUM"); ok {
				t.Fatal("PLATINUM resolves")
			}
		}},
		{"put class more copies than nodes", Command{Op: OpPutClass, Class: &Class{Name: "THREE", N: 3, W: 2, R: 1, D: 2}}, errors.Invalid, nil},
		{"put class STANDARD on a device class", Command{Op: OpPutClass, Class: &Class{Name: StandardClass, N: 2, W: 2, R: 1, D: 2, DeviceClass: "ssd"}}, errors.Invalid, nil},
		{"put class STANDARD erasure-coded", Command{Op: OpPutClass, Class: &Class{Name: StandardClass, N: 2, W: 2, R: 1, D: 2, K: 1, M: 1}}, errors.Invalid, nil},
		{"put class STANDARD chunked", Command{Op: OpPutClass, Class: &Class{Name: StandardClass, N: 2, W: 2, R: 1, D: 2, Chunk: 1 << 20}}, errors.Invalid, nil},
		{"put class chunk too small", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 2, R: 1, D: 2, Chunk: 4096}}, errors.Invalid, nil},
		{"put class chunk too large", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 2, R: 1, D: 2, Chunk: 32 << 20}}, errors.Invalid, nil},
		{"put class chunk not 4 KiB aligned", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 2, W: 2, R: 1, D: 2, Chunk: 100000}}, errors.Invalid, nil},
		{"put class stripe too large", Command{Op: OpPutClass, Class: &Class{Name: "X", N: 9, W: 9, R: 1, D: 2, K: 8, M: 1, Chunk: 16 << 20}}, errors.Invalid, nil},
		{"put class chunk", Command{Op: OpPutClass, Class: &Class{Name: "SMALL", N: 2, W: 2, R: 1, D: 2, Chunk: 256 << 10}}, errors.Other, func(t *testing.T, m *Map) {
			if c, ok := m.Class("SMALL"); !ok || c.ChunkSize() != 256<<10 || !c.Sharded() {
				t.Fatalf("SMALL = %+v", c)
			}
			if c, _ := m.Class(StandardClass); c.Sharded() {
				t.Fatalf("STANDARD = %+v", c)
			}
		}},
		{"apply policy without one", Command{Op: OpApplyPolicy, Name: "old"}, errors.Precondition, nil},
		{"apply policy unknown bucket", Command{Op: OpApplyPolicy, Name: "nope"}, errors.NotExist, nil},
		{"set bucket config", Command{Op: OpSetBucketConfig, Name: "old", Key: "cors", Doc: ptr("<CORSConfiguration/>")}, errors.Other, func(t *testing.T, m *Map) {
			if got := m.Buckets["old"].Config; len(got) != 1 || got["cors"] != "<CORSConfiguration/>" {
				t.Fatalf("config = %v", got)
			}
		}},
		{"delete bucket config", Command{Op: OpSetBucketConfig, Name: "configured", Key: "cors", Doc: ptr("")}, errors.Other, func(t *testing.T, m *Map) {
			if got := m.Buckets["configured"].Config; len(got) != 1 || got["tagging"] != "t" {
				t.Fatalf("config = %v", got)
			}
		}},
		{"delete last bucket config", Command{Op: OpSetBucketConfig, Name: "old", Key: "cors", Doc: ptr("")}, errors.Other, func(t *testing.T, m *Map) {
			if got := m.Buckets["old"].Config; got != nil {
				t.Fatalf("config = %v", got)
			}
		}},
		{"set bucket config unknown bucket", Command{Op: OpSetBucketConfig, Name: "nope", Key: "cors", Doc: ptr("x")}, errors.NotExist, nil},
		{"set bucket config without kind", Command{Op: OpSetBucketConfig, Name: "old", Doc: ptr("x")}, errors.Invalid, nil},
		{"set bucket config without document", Command{Op: OpSetBucketConfig, Name: "old", Key: "cors"}, errors.Invalid, nil},
		{"set bucket config too large", Command{Op: OpSetBucketConfig, Name: "old", Key: "cors", Doc: ptr(strings.Repeat("x", MaxBucketConfig+1))}, errors.Invalid, nil},
		{"unknown op", Command{Op: "launch_rockets"}, errors.Invalid, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := initialized(t)
			base.Buckets["old"] = Bucket{Name: "old"}
			base.Buckets["configured"] = Bucket{Name: "configured", Config: map[string]string{"cors": "c", "tagging": "t"}}
			base.Users["OLD"] = User{AccessKey: "OLD", SecretKey: "old"}
			before := base.Digest()
			got, err := applyCommand(base, tt.cmd)
			if base.Digest() != before {
				t.Fatal("applyCommand modified its input")
			}
			if tt.kind != errors.Other {
				if err == nil || !errors.Is(tt.kind, err) {
					t.Fatalf("err = %v, want kind %v", err, tt.kind)
				}
				if got != nil {
					t.Fatal("rejected command returned a map")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Epoch != base.Epoch+1 {
				t.Fatalf("epoch %d, want %d", got.Epoch, base.Epoch+1)
			}
			tt.check(t, got)
		})
	}
}

// logOf returns a sequence of raft log entries exercising every command,
// including rejected ones.
func logOf(t *testing.T) []*raft.Log {
	cmds := []Command{
		{Op: OpInit, Init: initMap()},
		{Op: OpAddNode, Node: &Node{ID: "n3", Addr: "h3:7000", Roles: []string{RoleStorage}}},
		{Op: OpAddNode, Node: &Node{ID: "n3", Addr: "hX:7000"}}, // rejected
		{Op: OpCreateBucket, Bucket: &Bucket{Name: "b", Created: 5}},
		{Op: OpCreateBucket, Bucket: &Bucket{Name: "b", Created: 6}}, // rejected
		{Op: OpSetState, NodeID: "n2", State: StateDown},
		{Op: OpUpdateNode, Node: &Node{ID: "n3", Addr: "h3:7000", Capacity: 77}},
		{Op: OpPutUser, User: &User{AccessKey: "a", SecretKey: "s"}},
		{Op: OpPutClass, Class: &Class{Name: "ONE", N: 1, W: 1, R: 1, D: 1}},
		{Op: OpSetBucketConfig, Name: "b", Key: "cors", Doc: ptr("<CORSConfiguration/>")},
		{Op: OpSetBucketConfig, Name: "b", Key: "tagging", Doc: ptr("<Tagging/>")},
		{Op: OpSetBucketConfig, Name: "b", Key: "cors", Doc: ptr("")},
		{Op: OpSetBucketConfig, Name: "nope", Key: "cors", Doc: ptr("x")}, // rejected
		{Op: OpDeleteBucket, Name: "b"},
		{Op: OpRemoveNode, NodeID: "n2"},
		{Op: OpRemoveNode, NodeID: "n2"}, // rejected
	}
	var logs []*raft.Log
	for i, c := range cmds {
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: b})
	}
	logs = append(logs, &raft.Log{Index: uint64(len(logs) + 1), Term: 1, Type: raft.LogCommand, Data: []byte("{garbage")})
	return logs
}

func TestFSMDeterministic(t *testing.T) {
	var seen []*Map
	f1 := newFSM(nil)
	f2 := newFSM(nil)
	f2.onChange = func(m *Map) { f2.cur.Store(m); seen = append(seen, m) }
	rejected := 0
	for _, l := range logOf(t) {
		r1 := f1.Apply(l)
		r2 := f2.Apply(l)
		if _, ok := r1.(error); ok {
			rejected++
			if _, ok := r2.(error); !ok {
				t.Fatalf("entry %d: fsm1 rejected, fsm2 accepted", l.Index)
			}
			continue
		}
		if r1.(*Map).Digest() != r2.(*Map).Digest() {
			t.Fatalf("entry %d: digests differ", l.Index)
		}
	}
	if rejected != 5 {
		t.Fatalf("%d rejected entries, want 5", rejected)
	}
	m := f1.cur.Load()
	if m.Epoch != 12 || m.Digest() != f2.cur.Load().Digest() {
		t.Fatalf("final epoch %d; digests %s %s", m.Epoch, m.Digest(), f2.cur.Load().Digest())
	}
	if len(seen) != 12 {
		t.Fatalf("onChange called %d times, want 12", len(seen))
	}
	// Non-command entries are ignored.
	if r := f1.Apply(&raft.Log{Type: raft.LogNoop}); r != nil || f1.cur.Load() != m {
		t.Fatal("noop entry changed the map")
	}
}

type memSink struct {
	bytes.Buffer
	canceled, closed bool
}

func (s *memSink) ID() string                  { return "mem" }
func (s *memSink) Cancel() error               { s.canceled = true; return nil }
func (s *memSink) Close() error                { s.closed = true; return nil }
func (s *memSink) Write(p []byte) (int, error) { return s.Buffer.Write(p) }

func TestFSMSnapshotRestore(t *testing.T) {
	f1 := newFSM(nil)
	for _, l := range logOf(t) {
		f1.Apply(l)
	}
	snap, err := f1.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Changes after the snapshot do not affect it.
	f1.Apply(&raft.Log{Type: raft.LogCommand, Data: []byte(`{"op":"put_user","user":{"access_key":"late","secret_key":"x"}}`)})
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !sink.closed || sink.canceled {
		t.Fatal("sink not closed properly")
	}
	var notified *Map
	f2 := newFSM(nil)
	f2.onChange = func(m *Map) { f2.cur.Store(m); notified = m }
	if err := f2.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	want := f1.cur.Load().Clone()
	delete(want.Users, "late")
	want.Epoch--
	if got := f2.cur.Load(); got.Digest() != want.Digest() || notified != got {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	if err := f2.Restore(io.NopCloser(bytes.NewReader([]byte("not json")))); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("restore garbage: %v", err)
	}
}

// A bucket's policy is set, then applied: each apply request raises the generation the
// storage nodes work towards; clearing the policy keeps the count.
func TestApplyPolicyGenerations(t *testing.T) {
	m := initialized(t)
	m.Buckets["b"] = Bucket{Name: "b"}
	rule := "*.log => STANDARD\n"
	m, err := applyCommand(m, Command{Op: OpSetPolicy, Name: "b", Policy: &rule})
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 2; want++ {
		if m, err = applyCommand(m, Command{Op: OpApplyPolicy, Name: "b"}); err != nil {
			t.Fatal(err)
		}
		if got := m.Buckets["b"].Apply; got != want {
			t.Fatalf("apply generation %d, want %d", got, want)
		}
	}
	bad := "*.log => NOPE\n"
	if _, err := applyCommand(m, Command{Op: OpSetPolicy, Name: "b", Policy: &bad}); !errors.Is(errors.Invalid, err) {
		t.Fatalf("policy naming an unknown class: %v", err)
	}
}

// OpSetInternodeTLS: set once with a CA, Required only ever turned on, the CA never
// replaced.
func TestSetInternodeTLS(t *testing.T) {
	set := func(ca string, req bool) Command {
		return Command{Op: OpSetInternodeTLS, Internode: &InternodeTLS{CA: ca, Required: req}}
	}
	tests := []struct {
		name  string
		start *InternodeTLS
		cmd   Command
		kind  errors.Kind // Other: accepted
	}{
		{"first, optional", nil, set("ca1", false), errors.Other},
		{"first, required", nil, set("ca1", true), errors.Other},
		{"require", &InternodeTLS{CA: "ca1"}, set("ca1", true), errors.Other},
		{"again", &InternodeTLS{CA: "ca1", Required: true}, set("ca1", true), errors.Other},
		{"no CA", nil, set("", false), errors.Invalid},
		{"nil", nil, Command{Op: OpSetInternodeTLS}, errors.Invalid},
		{"too large", nil, set(strings.Repeat("x", MaxInternodeCA+1), false), errors.Invalid},
		{"another CA", &InternodeTLS{CA: "ca1"}, set("ca2", false), errors.Invalid},
		{"back to optional", &InternodeTLS{CA: "ca1", Required: true}, set("ca1", false), errors.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := initialized(t)
			base.Internode = tt.start
			before := base.Digest()
			got, err := applyCommand(base, tt.cmd)
			if base.Digest() != before {
				t.Fatal("applyCommand modified its input")
			}
			if tt.kind != errors.Other {
				if !errors.Is(tt.kind, err) {
					t.Fatalf("err = %v, want kind %v", err, tt.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *got.Internode != *tt.cmd.Internode {
				t.Fatalf("internode %+v, want %+v", got.Internode, tt.cmd.Internode)
			}
			if c := got.Clone(); c.Internode == got.Internode || *c.Internode != *got.Internode || c.Digest() != got.Digest() {
				t.Fatal("Clone does not copy Internode")
			}
		})
	}
}

// The feature level only goes up.
func TestRaiseLevel(t *testing.T) {
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		level, want int
		ok          bool
	}{{5, 5, true}, {5, 5, false}, {4, 5, false}, {6, 6, true}} {
		nm, err := ApplyCommand(m, Command{Op: OpRaiseLevel, Level: c.level})
		if (err == nil) != c.ok {
			t.Fatalf("raise to %d from %d: %v", c.level, m.Level, err)
		}
		if err == nil {
			m = nm
		}
		if m.Level != c.want {
			t.Fatalf("level %d after raising to %d, want %d", m.Level, c.level, c.want)
		}
	}
}

// A map has placement version 2 only at Level PlacementV2Level or above (so no node of an
// older build, which would compute version 1's tables, can join it), whether it is set
// at bootstrap or by set_placement; unknown versions are refused; the version survives
// Clone and changes the digest.
func TestPlacementVersion(t *testing.T) {
	for _, c := range []struct {
		name           string
		version, level int
		kind           errors.Kind
	}{
		{"v0", 0, 0, 0},
		{"v1", 1, 0, 0},
		{"v2 at its level", 2, PlacementV2Level, 0},
		{"v2 above", 2, PlacementV2Level + 1, 0},
		{"v2 below its level", 2, PlacementV2Level - 1, errors.Precondition},
		{"v3", 3, PlacementV2Level, errors.Invalid},
		{"negative", -1, PlacementV2Level, errors.Invalid},
	} {
		t.Run("init "+c.name, func(t *testing.T) {
			m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Level: c.level, PlacementVersion: c.version}})
			if c.kind != 0 {
				if !errors.Is(c.kind, err) {
					t.Fatalf("got %v, want a %v error", err, c.kind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.PlacementVersion != c.version || m.Clone().PlacementVersion != c.version {
				t.Fatalf("version %d (clone %d), want %d", m.PlacementVersion, m.Clone().PlacementVersion, c.version)
			}
		})
	}
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Level: PlacementV2Level - 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyCommand(m, Command{Op: OpSetPlacement, Placement: 2}); !errors.Is(errors.Precondition, err) {
		t.Fatalf("set_placement 2 below level %d: %v", PlacementV2Level, err)
	}
	if m, err = ApplyCommand(m, Command{Op: OpRaiseLevel, Level: PlacementV2Level}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{0, 3, -1} {
		if _, err := ApplyCommand(m, Command{Op: OpSetPlacement, Placement: v}); !errors.Is(errors.Invalid, err) {
			t.Errorf("set_placement %d: %v, want Invalid", v, err)
		}
	}
	v2, err := ApplyCommand(m, Command{Op: OpSetPlacement, Placement: 2})
	if err != nil {
		t.Fatal(err)
	}
	if v2.PlacementVersion != 2 || v2.Epoch != m.Epoch+1 {
		t.Fatalf("after set_placement 2: version %d epoch %d", v2.PlacementVersion, v2.Epoch)
	}
	same := v2.Clone()
	same.PlacementVersion = 1
	if same.Digest() == v2.Digest() {
		t.Fatal("the digest does not cover the placement version")
	}
	v1, err := ApplyCommand(v2, Command{Op: OpSetPlacement, Placement: 1})
	if err != nil || v1.PlacementVersion != 1 {
		t.Fatalf("back to version 1: %v, version %d", err, v1.PlacementVersion)
	}
}

// FuzzPlacementCommands: an init or set_placement command (as JSON in the Raft log) never
// leaves a map with a placement version this build does not know, or with version 2 below
// PlacementV2Level, and never changes the map it is applied to. Seeded with
// TestPlacementVersion's cases.
func FuzzPlacementCommands(f *testing.F) {
	for _, c := range []Command{
		{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Level: PlacementV2Level, PlacementVersion: 2}},
		{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Level: PlacementV2Level - 1, PlacementVersion: 2}},
		{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, PlacementVersion: 3}},
		{Op: OpSetPlacement, Placement: 2},
		{Op: OpSetPlacement, Placement: 1},
		{Op: OpSetPlacement},
		{Op: OpSetPlacement, Placement: -1},
	} {
		b, _ := json.Marshal(c)
		f.Add(b, true)
		f.Add(b, false)
	}
	bases := map[bool]*Map{}
	for _, at := range []bool{true, false} {
		lvl := PlacementV2Level - 1
		if at {
			lvl = PlacementV2Level
		}
		m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Level: lvl}})
		if err != nil {
			f.Fatal(err)
		}
		bases[at] = m
	}
	f.Fuzz(func(t *testing.T, b []byte, atLevel bool) {
		var c Command
		if json.Unmarshal(b, &c) != nil || (c.Op != OpInit && c.Op != OpSetPlacement) {
			return
		}
		base := bases[atLevel]
		if c.Op == OpInit {
			base = &Map{}
		}
		before := base.Digest()
		nm, err := ApplyCommand(base, c)
		if base.Digest() != before {
			t.Fatal("the map applied to changed")
		}
		if err != nil {
			return
		}
		if v := nm.PlacementVersion; v < 0 || v > MaxPlacementVersion || (v >= 2 && nm.Level < PlacementV2Level) {
			t.Fatalf("accepted a map with placement version %d at level %d", v, nm.Level)
		}
	})
}
