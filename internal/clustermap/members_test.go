package clustermap

import (
	"testing"
)

// planMap builds a map from "id zone state roles" shorthands: roles is a
// string of letters m (manager), s (storage), g (gateway).
func planMap(specs ...[4]string) *Map {
	m := &Map{Epoch: 1, Partitions: 8}
	for _, s := range specs {
		var roles []string
		for _, r := range s[3] {
			roles = append(roles, map[rune]string{'m': RoleManager, 's': RoleStorage, 'g': RoleGateway}[r])
		}
		m.Nodes = append(m.Nodes, Node{ID: s[0], Addr: s[0] + ":1", Zone: s[1], State: NodeState(s[2]), Roles: roles})
	}
	sortNodes(m.Nodes)
	return m
}

func mem(id string, voter bool) Member { return Member{ID: id, Addr: id + ":1", Voter: voter} }

// settlingByTest lists, per test case, members that are reachable but not
// ready (still catching up).
var settlingByTest = map[string][]string{
	"down voter demoted while replacement catches up":      {"n2", "n4"},
	"down voter of five kept while replacement catches up": {"n2", "n6"},
}

func TestPlanMembership(t *testing.T) {
	up, down, out, draining := "up", "down", "out", "draining"
	five := planMap(
		[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", up, "ms"},
		[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"},
	)
	tests := []struct {
		name    string
		m       *Map
		members []Member
		voters  int
		notRdy  []string // not ready / unreachable
		stray   []string // strays whose grace expired
		want    action   // kind and id only
	}{
		{"single node done", planMap([4]string{"n1", "a", up, "ms"}), []Member{mem("n1", true)}, 3, nil, nil, action{}},
		{"add missing node", five, []Member{mem("n1", true)}, 3, nil, nil, action{kind: actAdd, id: "n2"}},
		{"two nodes stay one voter", planMap([4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", false)}, 3, nil, nil, action{}},
		{"promote spreading zones", five,
			[]Member{mem("n1", true), mem("n2", false), mem("n3", false), mem("n4", false), mem("n5", false)}, 3, nil, nil,
			action{kind: actPromote, id: "n3"}},
		{"promote third zone", five,
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", false), mem("n5", false)}, 3, nil, nil,
			action{kind: actPromote, id: "n5"}},
		{"not ready is not promoted", five,
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", false), mem("n5", false)}, 3, []string{"n5"}, nil,
			action{kind: actPromote, id: "n2"}},
		{"three voters distinct zones is stable", five,
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", false), mem("n5", true)}, 3, nil, nil, action{}},
		{"zone swap promotes", five,
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", false), mem("n5", false)}, 3, nil, nil,
			action{kind: actPromote, id: "n5"}},
		{"zone swap demotes crowded", five,
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", false), mem("n5", true)}, 3, nil, nil,
			action{kind: actDemote, id: "n2"}},
		{"surplus never demotes leader", five,
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", true), mem("n5", true)}, 3, nil, nil,
			action{kind: actDemote, id: "n4"}},
		// One of three voters down: promoting first would make four voters, three of them
		// needed, with the candidate perhaps failed unnoticed (a zone failing whole).
		{"down voter of three demoted before its replacement", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", down, "ms"},
			[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", false), mem("n5", true)}, 3, nil, nil,
			action{kind: actDemote, id: "n3"}},
		{"unreachable voter of three, not yet down, demoted before its replacement", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", draining, "ms"},
			[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", false), mem("n5", true)}, 3, []string{"n3"}, nil,
			action{kind: actDemote, id: "n3"}},
		// One of five voters down: four reached stay a majority of six, so the
		// replacement is promoted first.
		{"down voter of five replaced first", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", down, "ms"},
			[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"}, [4]string{"n6", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", true), mem("n5", true), mem("n6", false)}, 5, nil, nil,
			action{kind: actPromote, id: "n6"}},
		{"down voter of five kept while replacement catches up", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", down, "ms"},
			[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"}, [4]string{"n6", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", true), mem("n5", true), mem("n6", false)}, 5, nil, nil,
			action{kind: actNone}},
		{"down voter demoted after replacement", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", down, "ms"},
			[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", true), mem("n5", true)}, 3, nil, nil,
			action{kind: actDemote, id: "n3"}},
		{"down voter demoted while replacement catches up", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "a", up, "ms"}, [4]string{"n3", "b", down, "ms"},
			[4]string{"n4", "b", up, "ms"}, [4]string{"n5", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", false), mem("n3", true), mem("n4", false), mem("n5", true)}, 3, nil, nil,
			action{kind: actDemote, id: "n3"}},
		{"down voter without replacement demoted", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", up, "ms"}, [4]string{"n3", "c", down, "ms"}),
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true)}, 3, nil, nil,
			action{kind: actDemote, id: "n3"}},
		{"draining voter demoted", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", draining, "ms"}, [4]string{"n3", "c", up, "ms"}, [4]string{"n4", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", false)}, 3, nil, nil,
			action{kind: actPromote, id: "n4"}},
		{"no majority of healthy: no demotion of healthy", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", up, "ms"}, [4]string{"n3", "c", down, "ms"},
			[4]string{"n4", "c", down, "ms"}, [4]string{"n5", "c", down, "ms"}),
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", true), mem("n5", true)}, 1, nil, nil,
			action{}},
		{"out member removed", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", out, "s"}),
			[]Member{mem("n1", true), mem("n2", false)}, 3, nil, nil,
			action{kind: actRemove, id: "n2"}},
		{"out node not added", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", out, "s"}),
			[]Member{mem("n1", true)}, 3, nil, nil, action{}},
		{"stray kept during grace", planMap([4]string{"n1", "a", up, "ms"}),
			[]Member{mem("n1", true), mem("n9", false)}, 3, nil, nil, action{}},
		{"stray removed after grace", planMap([4]string{"n1", "a", up, "ms"}),
			[]Member{mem("n1", true), mem("n9", false)}, 3, nil, []string{"n9"}, action{kind: actRemove, id: "n9"}},
		{"non-manager voter demoted", planMap(
			[4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", up, "s"}),
			[]Member{mem("n1", true), mem("n2", true)}, 3, nil, nil, action{kind: actDemote, id: "n2"}},
		{"address change", planMap([4]string{"n1", "a", up, "ms"}, [4]string{"n2", "b", up, "s"}),
			[]Member{mem("n1", true), {ID: "n2", Addr: "old:1"}}, 3, nil, nil, action{kind: actUpdateAddr, id: "n2"}},
		{"unhealthy leader transfers", planMap(
			[4]string{"n1", "a", draining, "ms"}, [4]string{"n2", "b", up, "ms"}, [4]string{"n3", "c", up, "ms"}, [4]string{"n4", "c", up, "ms"}),
			[]Member{mem("n1", true), mem("n2", true), mem("n3", true), mem("n4", true)}, 3, nil, nil,
			action{kind: actTransfer, id: "n2"}},
		{"lone unhealthy leader stays", planMap([4]string{"n1", "a", down, "ms"}),
			[]Member{mem("n1", true)}, 3, nil, nil, action{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notReady := map[string]bool{}
			for _, id := range tt.notRdy {
				notReady[id] = true
			}
			settling := map[string]bool{}
			for _, id := range settlingByTest[tt.name] {
				settling[id] = true
			}
			stray := map[string]bool{}
			for _, id := range tt.stray {
				stray[id] = true
			}
			got := planMembership(planInput{
				m: tt.m, members: tt.members, self: "n1", voters: tt.voters,
				ready:        func(id string) bool { return !notReady[id] && !settling[id] },
				reachable:    func(id string) bool { return !notReady[id] },
				strayExpired: func(id string) bool { return stray[id] },
			})
			if got.kind != tt.want.kind || got.id != tt.want.id {
				t.Fatalf("plan = %v, want %s %s", got, tt.want.kind, tt.want.id)
			}
		})
	}
}

// TestPlanConverges simulates reconciliation rounds from every node a
// nonvoter and checks the fixed point: 3 voters in 3 zones.
func TestPlanConverges(t *testing.T) {
	m := planMap(
		[4]string{"n1", "a", "up", "ms"}, [4]string{"n2", "a", "up", "ms"}, [4]string{"n3", "b", "up", "ms"},
		[4]string{"n4", "b", "up", "ms"}, [4]string{"n5", "c", "up", "ms"}, [4]string{"n6", "c", "up", "s"},
	)
	members := map[string]Member{"n1": mem("n1", true)}
	for round := 0; ; round++ {
		if round > 30 {
			t.Fatal("no fixed point")
		}
		var list []Member
		for _, mb := range members {
			list = append(list, mb)
		}
		a := planMembership(planInput{m: m, members: list, self: "n1", voters: 3,
			ready: func(string) bool { return true }, reachable: func(string) bool { return true },
			strayExpired: func(string) bool { return false }})
		switch a.kind {
		case actNone:
			zones := map[string]bool{}
			nv := 0
			for _, mb := range members {
				if mb.Voter {
					nv++
					n, _ := m.Node(mb.ID)
					zones[n.Zone] = true
				}
			}
			if nv != 3 || len(zones) != 3 || len(members) != 6 || members["n6"].Voter {
				t.Fatalf("fixed point %v", members)
			}
			return
		case actAdd:
			members[a.id] = Member{ID: a.id, Addr: a.addr}
		case actPromote:
			members[a.id] = Member{ID: a.id, Addr: a.addr, Voter: true}
		case actDemote:
			members[a.id] = Member{ID: a.id, Addr: members[a.id].Addr}
		default:
			t.Fatalf("unexpected action %v", a)
		}
	}
}
