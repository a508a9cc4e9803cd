package clustermap

import (
	"encoding/json"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// The NBD client records: issued, revoked by serial and by name, pruned once expired;
// each malformed command refused and leaving the map unchanged.
func TestNBDClientCommands(t *testing.T) {
	m, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Nodes: []Node{{ID: "n1", Addr: "a:1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial, name string, issued, notAfter int64) Command {
		return Command{Op: OpIssueNBDClient, NBDClient: &NBDClient{Serial: serial, Name: name, Volumes: []string{"vm*"}, Issued: issued, NotAfter: notAfter}}
	}
	revoke := func(serial, name string, at int64) Command {
		return Command{Op: OpRevokeNBDClient, NBDClient: &NBDClient{Serial: serial, Name: name, Revoked: at}}
	}
	revokedAt := func(serial string) func(m *Map) int64 {
		return func(m *Map) int64 { return m.NBDClients[serial].Revoked }
	}
	for _, tc := range []struct {
		name  string
		c     Command
		kind  errors.Kind // Other: accepted
		check func(m *Map) bool
	}{
		{"issue", issue("0a1b", "hv1", 10, 1000), errors.Other, func(m *Map) bool { return m.NBDClients["0a1b"].Name == "hv1" }},
		{"issue another of hv1", issue("0a1c", "hv1", 11, 2000), errors.Other, nil},
		{"issue hv2", issue("ff", "hv2", 12, 2000), errors.Other, nil},
		{"issue a recorded serial", issue("0a1b", "hv3", 13, 1000), errors.Exist, nil},
		{"issue without a record", Command{Op: OpIssueNBDClient}, errors.Invalid, nil},
		{"issue a bad serial", issue("0A1B", "hv3", 13, 1000), errors.Invalid, nil},
		{"issue without a name", issue("0a1d", "", 13, 1000), errors.Invalid, nil},
		{"issue without an expiry", issue("0a1d", "hv3", 13, 0), errors.Invalid, nil},
		{"issue revoked", Command{Op: OpIssueNBDClient, NBDClient: &NBDClient{Serial: "0a1d", Name: "hv3", Issued: 13, NotAfter: 100, Revoked: 13}}, errors.Invalid, nil},
		{"revoke by serial", revoke("0a1b", "", 20), errors.Other, func(m *Map) bool { return revokedAt("0a1b")(m) == 20 && revokedAt("0a1c")(m) == 0 }},
		{"revoke again keeps the first time", revoke("0a1b", "", 21), errors.Other, func(m *Map) bool { return revokedAt("0a1b")(m) == 20 }},
		{"revoke by name", revoke("", "hv1", 22), errors.Other, func(m *Map) bool { return revokedAt("0a1c")(m) == 22 && revokedAt("ff")(m) == 0 }},
		{"revoke an unrecorded serial", revoke("beef", "", 23), errors.Other, func(m *Map) bool { return revokedAt("beef")(m) == 23 && m.NBDClients["beef"].NotAfter == 0 }},
		{"revoke an unknown name", revoke("", "nobody", 24), errors.NotExist, nil},
		{"revoke both", revoke("ff", "hv2", 24), errors.Invalid, nil},
		{"revoke neither", revoke("", "", 24), errors.Invalid, nil},
		{"revoke without a time", revoke("ff", "", 0), errors.Invalid, nil},
		{"revoke a bad serial", revoke("xyz", "", 24), errors.Invalid, nil},
		{"expired records are dropped", issue("0b", "hv4", 1500, 3000), errors.Other,
			func(m *Map) bool {
				_, gone := m.NBDClients["0a1b"]
				_, kept := m.NBDClients["beef"]
				return !gone && kept && len(m.NBDClients) == 4
			}},
		{"a name whose certificates expired", revoke("", "hv1", 2500), errors.NotExist, nil},
	} {
		before := m.Digest()
		nm, err := ApplyCommand(m, tc.c)
		if errors.KindOf(err) != tc.kind || (err != nil && tc.kind == errors.Other) {
			t.Fatalf("%s: %v, want kind %v", tc.name, err, tc.kind)
		}
		if m.Digest() != before {
			t.Fatalf("%s: the map applied to changed", tc.name)
		}
		if err != nil {
			continue
		}
		if tc.check != nil && !tc.check(nm) {
			t.Fatalf("%s: %+v", tc.name, nm.NBDClients)
		}
		m = nm
	}
	if c, ok := m.NBDClientRevoked("0a1c"); !ok || c.Name != "hv1" {
		t.Errorf("0a1c: %+v %v, want revoked", c, ok)
	}
	if _, ok := m.NBDClientRevoked("ff"); ok {
		t.Error("ff revoked")
	}
}

// FuzzNBDClientCommands: any NBD client command (as JSON in the Raft log) applied to a map
// with records leaves that map unchanged, and an accepted one leaves only well-formed,
// unexpired records. Seeded with the table test's kinds of commands.
func FuzzNBDClientCommands(f *testing.F) {
	for _, c := range []Command{
		{Op: OpIssueNBDClient, NBDClient: &NBDClient{Serial: "0a1b", Name: "hv1", Volumes: []string{"vm*"}, Issued: 10, NotAfter: 1000}},
		{Op: OpIssueNBDClient, NBDClient: &NBDClient{Serial: "ab", Name: "hv9", Issued: 2000, NotAfter: 3000}},
		{Op: OpRevokeNBDClient, NBDClient: &NBDClient{Serial: "0a1c", Revoked: 20}},
		{Op: OpRevokeNBDClient, NBDClient: &NBDClient{Name: "hv1", Revoked: 22}},
		{Op: OpRevokeNBDClient, NBDClient: &NBDClient{Serial: "XYZ", Name: "hv1"}},
		{Op: OpIssueNBDClient},
	} {
		b, _ := json.Marshal(c)
		f.Add(b)
	}
	base, err := ApplyCommand(&Map{}, Command{Op: OpInit, Init: &Map{Partitions: 8, Replicas: 1, Nodes: []Node{{ID: "n1", Addr: "a:1"}}}})
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range []Command{
		{Op: OpIssueNBDClient, NBDClient: &NBDClient{Serial: "0a1c", Name: "hv1", Issued: 11, NotAfter: 2000}},
		{Op: OpIssueNBDClient, NBDClient: &NBDClient{Serial: "ff", Name: "hv2", Issued: 12, NotAfter: 5000}},
	} {
		if base, err = ApplyCommand(base, c); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Command
		if json.Unmarshal(b, &c) != nil || (c.Op != OpIssueNBDClient && c.Op != OpRevokeNBDClient) {
			return
		}
		before := base.Digest()
		nm, err := ApplyCommand(base, c)
		if base.Digest() != before {
			t.Fatal("the map applied to changed")
		}
		if err != nil {
			return
		}
		if len(nm.NBDClients) > MaxNBDClients {
			t.Fatalf("%d records", len(nm.NBDClients))
		}
		for s, r := range nm.NBDClients {
			if s != r.Serial || ValidSerial(s) != nil {
				t.Fatalf("record %q: %+v", s, r)
			}
		}
	})
}
