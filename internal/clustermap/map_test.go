package clustermap

import (
	"encoding/json"
	"reflect"
	"testing"
)

func testMap() *Map {
	return &Map{
		Epoch:      7,
		Partitions: 64,
		Replicas:   3,
		Nodes: []Node{
			{ID: "n1", Addr: "10.0.0.1:7000", Zone: "a", Capacity: 100, Weight: 1, State: StateUp, Roles: []string{RoleManager, RoleStorage}},
			{ID: "n2", Addr: "10.0.0.2:7000", Zone: "b", Capacity: 100, Weight: 1, State: StateDown, Roles: []string{RoleStorage}},
			{ID: "n3", Addr: "10.0.0.3:7000", Zone: "c", Capacity: 100, Weight: 1, State: StateOut, Roles: []string{RoleStorage}},
			{ID: "n4", Addr: "10.0.0.4:7000", Zone: "c", State: StateUp, Roles: []string{RoleGateway}},
			{ID: "n5", Addr: "10.0.0.5:7000", Zone: "a", State: StateDraining, Roles: []string{RoleStorage, RoleGateway}},
		},
		Classes: map[string]Class{
			StandardClass: {Name: StandardClass, N: 3, W: 2, R: 2, D: 2},
			"WIDE":        {Name: "WIDE", N: 6, W: 4, R: 3, D: 5},
		},
		Buckets: map[string]Bucket{"b1": {Name: "b1", Created: 42}},
		Users:   map[string]User{"AK": {AccessKey: "AK", SecretKey: "SK"}},
	}
}

func TestNodeLookupAndRoles(t *testing.T) {
	m := testMap()
	n, ok := m.Node("n2")
	if !ok || n.Addr != "10.0.0.2:7000" {
		t.Fatalf("Node(n2) = %+v, %v", n, ok)
	}
	if _, ok := m.Node("n0"); ok {
		t.Fatal("Node(n0) found")
	}
	if _, ok := m.Node("n9"); ok {
		t.Fatal("Node(n9) found")
	}
	if !n.HasRole(RoleStorage) || n.HasRole(RoleManager) {
		t.Fatalf("HasRole wrong for %+v", n)
	}
	if _, ok := (&Map{}).Node("x"); ok {
		t.Fatal("found node in empty map")
	}
}

func TestCloneIsDeep(t *testing.T) {
	m := testMap()
	d := m.Digest()
	c := m.Clone()
	if c.Digest() != d {
		t.Fatal("clone digest differs")
	}
	c.Nodes[0].Roles[0] = "changed"
	c.Nodes[1].State = StateUp
	c.Classes["X"] = Class{Name: "X", N: 1, W: 1, R: 1, D: 1}
	c.Buckets["b2"] = Bucket{Name: "b2"}
	c.Users["AK"] = User{AccessKey: "AK", SecretKey: "other"}
	if m.Digest() != d {
		t.Fatal("modifying the clone changed the original")
	}
	if (&Map{}).Clone().Classes == nil {
		t.Fatal("clone of empty map has nil maps")
	}
}

func TestDigestDeterministic(t *testing.T) {
	a, b := testMap(), testMap()
	// Same content built in another order and with nil vs empty collections.
	b.Nodes[0], b.Nodes[4] = b.Nodes[4], b.Nodes[0]
	if a.Digest() != b.Digest() {
		t.Fatal("digest depends on node order")
	}
	e1 := &Map{}
	e2 := &Map{Nodes: []Node{}, Classes: map[string]Class{}, Buckets: map[string]Bucket{}, Users: map[string]User{}}
	if e1.Digest() != e2.Digest() {
		t.Fatal("digest distinguishes nil and empty")
	}
	b = testMap()
	b.Epoch++
	if a.Digest() == b.Digest() {
		t.Fatal("digest ignores epoch")
	}
	b = testMap()
	b.Users["AK"] = User{AccessKey: "AK", SecretKey: "x"}
	if a.Digest() == b.Digest() {
		t.Fatal("digest ignores users")
	}
	if len(a.Digest()) != 64 {
		t.Fatalf("digest %q is not hex sha256", a.Digest())
	}
}

func TestJSONTags(t *testing.T) {
	b, err := json.Marshal(Class{Name: "S", N: 3, W: 2, R: 1, D: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"name":"S","n":3,"w":2,"r":1,"d":2}`; got != want {
		t.Fatalf("class JSON %s, want %s", got, want)
	}
	var m Map
	if err := json.Unmarshal([]byte(`{"epoch":3,"partitions":8,"replicas":2,"nodes":[{"id":"x","addr":"h:1","s3_addr":"h:2","admin_addr":"h:3","device_class":"ssd","state":"up","roles":["storage"]}],"users":{"k":{"access_key":"k","secret_key":"s"}}}`), &m); err != nil {
		t.Fatal(err)
	}
	if m.Epoch != 3 || m.Nodes[0].S3Addr != "h:2" || m.Nodes[0].AdminAddr != "h:3" || m.Nodes[0].DeviceClass != "ssd" || m.Users["k"].SecretKey != "s" {
		t.Fatalf("decoded %+v", m)
	}
}

func TestStorageNodes(t *testing.T) {
	m := testMap()
	var ids []string
	for _, n := range m.StorageNodes() {
		ids = append(ids, n.ID)
	}
	// n3 is out, n4 has no storage role; down and draining nodes count.
	if got, want := ids, []string{"n1", "n2", "n5"}; !equalStrings(got, want) {
		t.Fatalf("StorageNodes = %v, want %v", got, want)
	}
}

func TestPlacementNodes(t *testing.T) {
	m := testMap()
	var ids []string
	for _, n := range m.PlacementNodes() {
		ids = append(ids, n.ID)
	}
	// Draining n5 takes no new placements; down n2 keeps its own.
	if got, want := ids, []string{"n1", "n2"}; !equalStrings(got, want) {
		t.Fatalf("PlacementNodes = %v, want %v", got, want)
	}
}

func TestClassAndEffectiveClass(t *testing.T) {
	m := testMap()
	c, ok := m.Class("")
	if !ok || c.Name != StandardClass || c.N != 3 {
		t.Fatalf("Class(\"\") = %+v, %v", c, ok)
	}
	if _, ok := m.Class("NOPE"); ok {
		t.Fatal("found unknown class")
	}
	tests := []struct {
		m    *Map
		in   Class
		want Class
	}{
		// Placement uses n1 and n2 (n5 is draining): N is capped at 2.
		{m, Class{Name: "S", N: 3, W: 2, R: 2, D: 2}, Class{Name: "S", N: 2, W: 2, R: 2, D: 2}},
		{m, Class{Name: "W", N: 6, W: 4, R: 3, D: 5}, Class{Name: "W", N: 2, W: 2, R: 2, D: 2}},
		{m, Class{Name: "O", N: 1, W: 1, R: 1, D: 1}, Class{Name: "O", N: 1, W: 1, R: 1, D: 1}},
		{m, Class{Name: "Z", N: 0, W: 0, R: -1, D: 0}, Class{Name: "Z", N: 1, W: 1, R: 1, D: 1}},
		{&Map{}, Class{Name: "E", N: 3, W: 2, R: 2, D: 2}, Class{Name: "E", N: 1, W: 1, R: 1, D: 1}},
	}
	for _, tt := range tests {
		if got := tt.m.EffectiveClass(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("EffectiveClass(%+v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
