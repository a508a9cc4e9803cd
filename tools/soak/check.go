package main

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"time"
)

// allowedStates returns the states a read of a key may return if it started at rs and
// ended at re, given the key's writes: value ids, and "" for not found. Pass the zero
// time as rs to allow stale reads (R + W <= N: only what was never written is ruled out).
//
// Versions are ordered by hybrid logical clocks in microseconds, assigned by the gateway
// while it handles the write (one machine, one wall clock here), so a write that started
// after another ended has the larger version. A write is a candidate unless an
// acknowledged write y (durable on W replicas) started after it could last have taken
// effect and ended before the read started: y's version then beats it on every replica a
// read can consult. When a write could last take effect:
//   - acked: at its end;
//   - failed (the server answered an error): its version, if it has one, was assigned
//     before the answer, so at its end too; it may show up later, with that version;
//   - unknown (no answer: timeout, reset): never bounded; it is never ruled out;
//   - notSent (connection refused): never; it is not a candidate.
//
// The key starts absent, as if deleted at time zero.
func allowedStates(writes []*op, rs, re time.Time) map[string]bool {
	// A write whose effect is bounded by t is beaten iff some acknowledged write that ended
	// before rs started after t: iff the latest start of those is after t.
	var latest time.Time
	found := false
	for _, y := range writes {
		if y.outcome == acked && y.end.Before(rs) && (!found || y.start.After(latest)) {
			latest, found = y.start, true
		}
	}
	beaten := func(bound time.Time) bool { return found && latest.After(bound) }
	out := map[string]bool{}
	if !beaten(time.Time{}) {
		out[""] = true
	}
	for _, w := range writes {
		if w.outcome == notSent || !w.start.Before(re) {
			continue
		}
		if w.outcome != unknown && beaten(w.end) {
			continue
		}
		if w.kind == "put" {
			out[w.id] = true
		} else {
			out[""] = true
		}
	}
	return out
}

func stateName(id string) string {
	if id == "" {
		return "not found"
	}
	return id
}

func statesList(m map[string]bool) string {
	var s []string
	for k := range m {
		s = append(s, stateName(k))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// checkReads checks the reads answered during the run: each returned a value written for
// its key by a write that had started (and was sent), and, when W + R > N, one that no
// acknowledged write had replaced before the read started.
func checkReads(cfg *config, h *history) (out []string) {
	h.mu.Lock()
	keys := make([]string, 0, len(h.ops))
	for k := range h.ops {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		writes := h.writes(k)
		h.mu.Lock()
		ops := append([]*op(nil), h.ops[k]...)
		h.mu.Unlock()
		for _, g := range ops {
			if g.kind != "get" {
				continue
			}
			if ok := allowedStates(writes, time.Time{}, g.end); !ok[g.id] {
				out = append(out, fmt.Sprintf("key %s: read via %s at %s returned %s, which no write sent before the read ended explains (possible: %s)",
					k, g.node, g.start.Format("15:04:05.000000"), stateName(g.id), statesList(ok)))
				continue
			}
			if cfg.fresh() {
				if ok := allowedStates(writes, g.start, g.end); !ok[g.id] {
					out = append(out, fmt.Sprintf("key %s: stale read via %s at %s: returned %s although a later write had been acknowledged before the read started (possible: %s)",
						k, g.node, g.start.Format("15:04:05.000000"), stateName(g.id), statesList(ok)))
				}
			}
		}
	}
	return out
}

// keyHistory describes a key's operations for a violation report (the last max of them).
func keyHistory(h *history, key string, max int) string {
	h.mu.Lock()
	ops := append([]*op(nil), h.ops[key]...)
	h.mu.Unlock()
	sort.Slice(ops, func(i, j int) bool { return ops[i].start.Before(ops[j].start) })
	var b strings.Builder
	if len(ops) > max {
		fmt.Fprintf(&b, "      ... %d earlier operations\n", len(ops)-max)
		ops = ops[len(ops)-max:]
	}
	for _, o := range ops {
		fmt.Fprintf(&b, "      %s\n", o)
	}
	return b.String()
}

func md5hex(b []byte) string {
	s := md5.Sum(b)
	return hex.EncodeToString(s[:])
}

// checkPlacement checks the replicas of a key after healing: n replicas, all answering,
// all holding the same version: the value want (its ETag, size and storage class, and
// for a value of a class other than STANDARD a layout starting with layout), or a
// tombstone or nothing if want is nil.
func checkPlacement(p *placementJSON, n int, want *value, layout string) string {
	if len(p.Replicas) != n {
		return fmt.Sprintf("%d replicas listed, want %d: %+v", len(p.Replicas), n, p.Replicas)
	}
	var etag string
	if want != nil {
		etag = want.etag()
	}
	var bad []string
	for _, r := range p.Replicas {
		switch {
		case r.Error != "":
			bad = append(bad, fmt.Sprintf("%s: error %s", r.Node, r.Error))
		case want == nil && !(r.Deleted || r.Missing):
			bad = append(bad, fmt.Sprintf("%s: holds a live version (hlc %d, etag %s, %d bytes) of a key that reads as not found", r.Node, r.HLC, r.ETag, r.Size))
		case want != nil && (r.Deleted || r.Missing):
			bad = append(bad, fmt.Sprintf("%s: %s, want %s", r.Node, map[bool]string{true: "deleted", false: "missing"}[r.Deleted], want.id))
		case want != nil && (strings.Trim(r.ETag, `"`) != etag || r.Size != int64(want.size)):
			bad = append(bad, fmt.Sprintf("%s: etag %s size %d, want %s (etag %s size %d)", r.Node, r.ETag, r.Size, want.id, etag, want.size))
		case want != nil && r.HLC != p.Replicas[0].HLC:
			bad = append(bad, fmt.Sprintf("%s: version %d, %s has %d", r.Node, r.HLC, p.Replicas[0].Node, p.Replicas[0].HLC))
		case want != nil && r.Class != want.class:
			bad = append(bad, fmt.Sprintf("%s: class %s, but %s was written in %s", r.Node, className(r.Class), want.id, className(want.class)))
		case want != nil && want.class == "" && r.Layout != "copy":
			bad = append(bad, fmt.Sprintf("%s: layout %q, want a whole copy", r.Node, r.Layout))
		case want != nil && want.class != "" && !strings.HasPrefix(r.Layout, layout):
			bad = append(bad, fmt.Sprintf("%s: layout %q, want %q", r.Node, r.Layout, layout))
		}
	}
	return strings.Join(bad, "; ")
}
