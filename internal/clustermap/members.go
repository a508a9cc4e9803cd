package clustermap

import (
	"fmt"
	"slices"
	"strings"
)

// Member is a member of the Raft group.
type Member struct {
	ID    string
	Addr  string
	Voter bool
}

type actionKind int

const (
	actNone       actionKind = iota
	actAdd                   // add as nonvoter
	actUpdateAddr            // re-add with a new address, keeping suffrage
	actPromote               // nonvoter -> voter
	actDemote                // voter -> nonvoter
	actRemove                // remove from the group
	actTransfer              // transfer leadership to id
)

func (k actionKind) String() string {
	return [...]string{"none", "add", "update_addr", "promote", "demote", "remove", "transfer_leadership"}[k]
}

type action struct {
	kind   actionKind
	id     string
	addr   string
	voter  bool // for actUpdateAddr
	reason string
}

func (a action) String() string {
	return fmt.Sprintf("%s %s (%s)", a.kind, a.id, a.reason)
}

// planInput is what planMembership decides on.
type planInput struct {
	m       *Map
	members []Member
	self    string // the leader's ID
	voters  int    // desired number of voters
	// ready reports whether a nonvoter may be promoted: the leader reaches it
	// and it has been a member for a while (so it has had time to catch up).
	ready func(id string) bool
	// reachable reports whether the leader currently reaches the member.
	reachable func(id string) bool
	// strayExpired reports whether a member that is not in the map has been
	// so long enough to be removed (a grace period covers the window between
	// AddMember and the add_node command of a join).
	strayExpired func(id string) bool
}

// planMembership returns the next membership change that moves the Raft group
// towards the desired shape, or actNone. It is a pure function; the leader
// applies one action at a time and plans again.
//
// The desired shape:
//   - every node of the map that is not out is a member (nonvoters by default);
//     members whose node is out, or that are not in the map (after a grace
//     period), are removed;
//   - voters are chosen among members whose node has the manager role and is
//     up ("healthy"); the target count is Voters, or fewer if there are not
//     enough healthy managers (rounded down to an odd number when promoting,
//     but healthy voters are never demoted just to make the count odd);
//   - healthy voters are kept (no churn). Missing voters are promoted from
//     ready nonvoters, preferring zones with the fewest voters, then lower ID;
//     unhealthy voters (down, draining, out, no manager role) are demoted after
//     replacements have been promoted (or at once if no replacement is on its
//     way: they add nothing to the quorum) — but only while the voters the
//     leader reaches stay a majority of the grown group without the candidate;
//     otherwise (three voters, one down) the unhealthy voter is demoted first,
//     so that a candidate that failed unnoticed cannot cost the quorum;
//   - when the voter set is full and a ready candidate is in a zone that has no
//     voter while two voters share a zone, the candidate is promoted and the
//     surplus voter from the shared zone is demoted next (this strictly
//     increases the number of zones with a voter, so it terminates);
//   - the leader never demotes or removes itself: if it must stop being a
//     voter it transfers leadership to a healthy voter and the new leader does
//     the rest;
//   - a voter is dropped only if healthy voters remain a strict majority of
//     the remaining voters.
func planMembership(in planInput) action {
	nodes := make(map[string]Node, len(in.m.Nodes))
	for _, n := range in.m.Nodes {
		nodes[n.ID] = n
	}
	members := slices.Clone(in.members)
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	memberByID := make(map[string]Member, len(members))
	for _, mb := range members {
		memberByID[mb.ID] = mb
	}
	healthy := func(id string) bool {
		n, ok := nodes[id]
		return ok && n.HasRole(RoleManager) && n.State == StateUp
	}
	zone := func(id string) string { return nodes[id].Zone }

	// 1. Every node not out must be a member.
	for _, n := range in.m.Nodes {
		if n.State == StateOut {
			continue
		}
		if _, ok := memberByID[n.ID]; !ok {
			return action{kind: actAdd, id: n.ID, addr: n.Addr, reason: "node in map is not a member"}
		}
	}
	// 2. Addresses follow the map.
	for _, mb := range members {
		if n, ok := nodes[mb.ID]; ok && n.State != StateOut && mb.ID != in.self && n.Addr != mb.Addr {
			return action{kind: actUpdateAddr, id: mb.ID, addr: n.Addr, voter: mb.Voter, reason: "address changed in map from " + mb.Addr}
		}
	}

	var hv, uv, cands []Member // healthy voters, unhealthy voters, promotion candidates
	pending := 0               // healthy reachable nonvoters not ready yet (catching up)
	for _, mb := range members {
		switch {
		case mb.Voter && healthy(mb.ID):
			hv = append(hv, mb)
		case mb.Voter:
			uv = append(uv, mb)
		case healthy(mb.ID) && in.ready(mb.ID):
			cands = append(cands, mb)
		case healthy(mb.ID) && in.reachable(mb.ID):
			pending++
		}
	}
	want := max(in.voters, 1)
	target := min(want, len(hv)+len(cands))
	if target%2 == 0 && target > 1 {
		target--
	}
	target = max(target, min(len(hv), want))
	nvoters := len(hv) + len(uv)

	zoneCount := func(set []Member) map[string]int {
		zc := make(map[string]int)
		for _, mb := range set {
			zc[zone(mb.ID)]++
		}
		return zc
	}
	bestCandidate := func() Member {
		zc := zoneCount(hv)
		c := slices.Clone(cands)
		slices.SortStableFunc(c, func(a, b Member) int {
			if d := zc[zone(a.ID)] - zc[zone(b.ID)]; d != 0 {
				return d
			}
			return strings.Compare(a.ID, b.ID)
		})
		return c[0]
	}
	// canDrop reports whether removing a voter leaves healthy voters a strict
	// majority of the voters.
	canDrop := func(id string) bool {
		h := len(hv)
		if healthy(id) {
			h--
		}
		return 2*h > nvoters-1
	}

	// A promotion commits under the grown configuration, so it needs a majority of the
	// voters plus the candidate. The candidate may have failed since the leader last heard
	// from it (a zone failing whole: its nodes are marked down one by one), so promoting
	// is safe only while the voters the leader still reaches are a majority without it.
	// Otherwise unhealthy voters are demoted first: with two of three voters down-marked
	// or not, promoting a third node of the failed zone made four voters, two unreachable,
	// and the group lost its leader for as long as the zone was away.
	live := len(hv)
	for _, mb := range uv {
		if n, ok := nodes[mb.ID]; ok && n.State != StateDown && in.reachable(mb.ID) {
			live++
		}
	}
	safePromote := len(uv) == 0 || 2*live > nvoters+1

	// 3. Promote while below target.
	if len(hv) < target && len(cands) > 0 && safePromote {
		c := bestCandidate()
		return action{kind: actPromote, id: c.ID, addr: c.Addr, reason: fmt.Sprintf("%d healthy voters, want %d", len(hv), target)}
	}
	// 4. Remove members whose node is out or gone from the map.
	for _, mb := range members {
		if mb.ID == in.self {
			continue
		}
		n, inMap := nodes[mb.ID]
		var reason string
		switch {
		case inMap && n.State == StateOut:
			reason = "node is out"
		case !inMap && in.strayExpired(mb.ID):
			reason = "node not in map"
		default:
			continue
		}
		if mb.Voter && !canDrop(mb.ID) {
			continue
		}
		return action{kind: actRemove, id: mb.ID, reason: reason}
	}
	// 5. Demote unhealthy voters, unless a replacement is about to be ready
	// (then promote first, next round).
	for _, mb := range uv {
		if mb.ID == in.self || !canDrop(mb.ID) || (len(hv) < want && pending > 0 && safePromote) {
			continue
		}
		return action{kind: actDemote, id: mb.ID, reason: "node not healthy: " + describe(nodes, mb.ID)}
	}
	// 6. The leader itself should not be a voter: hand over leadership.
	if !healthy(in.self) {
		for _, mb := range hv {
			if mb.ID != in.self && in.reachable(mb.ID) {
				return action{kind: actTransfer, id: mb.ID, addr: mb.Addr, reason: "leader not healthy: " + describe(nodes, in.self)}
			}
		}
	}
	// 7. Demote surplus healthy voters, from the most crowded zone.
	if len(hv) > target {
		zc := zoneCount(hv)
		var best *Member
		for i := range hv {
			mb := &hv[i]
			if mb.ID == in.self || !canDrop(mb.ID) {
				continue
			}
			if best == nil || better(zc[zone(mb.ID)], in.reachable(mb.ID), mb.ID, zc[zone(best.ID)], in.reachable(best.ID), best.ID) {
				best = mb
			}
		}
		if best != nil {
			return action{kind: actDemote, id: best.ID, reason: fmt.Sprintf("%d healthy voters, want %d", len(hv), target)}
		}
	}
	// 8. Spread voters over more zones.
	if len(hv) == want && len(uv) == 0 && len(cands) > 0 {
		zc := zoneCount(hv)
		crowded := false
		for _, mb := range hv {
			if mb.ID != in.self && zc[zone(mb.ID)] > 1 {
				crowded = true
			}
		}
		if c := bestCandidate(); crowded && zc[zone(c.ID)] == 0 {
			return action{kind: actPromote, id: c.ID, addr: c.Addr, reason: fmt.Sprintf("zone %q has no voter", zone(c.ID))}
		}
	}
	return action{}
}

// better reports whether voter a is a better choice to demote than voter b:
// more crowded zone first, then unreachable ones, then higher ID.
func better(zoneA int, reachA bool, idA string, zoneB int, reachB bool, idB string) bool {
	if zoneA != zoneB {
		return zoneA > zoneB
	}
	if reachA != reachB {
		return !reachA
	}
	return idA > idB
}

func describe(nodes map[string]Node, id string) string {
	n, ok := nodes[id]
	switch {
	case !ok:
		return "not in map"
	case !n.HasRole(RoleManager):
		return "no manager role"
	default:
		return "state " + string(n.State)
	}
}
