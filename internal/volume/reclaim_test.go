package volume

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairnfs/cairn/internal/clustermap"
)

// memObjects is a store of data objects for Reclaim: layer -> index -> content.
type memObjects struct {
	objs  map[string]map[int64]int
	lists map[string]int // List calls per layer
}

func (s *memObjects) List(_ context.Context, layer string, fn func(int64) error) error {
	s.lists[layer]++
	for _, i := range slices.Sorted(maps.Keys(s.objs[layer])) {
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

func (s *memObjects) Delete(_ context.Context, layer string, i int64) error {
	delete(s.objs[layer], i)
	if len(s.objs[layer]) == 0 {
		delete(s.objs, layer)
	}
	return nil
}

func (s *memObjects) put(layer string, i int64, v int) {
	if s.objs[layer] == nil {
		s.objs[layer] = map[int64]int{}
	}
	s.objs[layer][i] = v
}

// resolve reads index i of the view whose top layer is top, over chain: the content
// and the layer that has it ("" and 0: none, zeroes).
func (s *memObjects) resolve(m *clustermap.Map, top, parent string, i int64) (string, int) {
	if v, ok := s.objs[top][i]; ok {
		return top, v
	}
	for _, l := range m.Chain(parent) {
		if v, ok := s.objs[l][i]; ok {
			return l, v
		}
	}
	return "", 0
}

// views are the volumes' heads and the snapshots: name -> (top layer, its parent).
func views(m *clustermap.Map) map[string][2]string {
	out := map[string][2]string{}
	for _, v := range m.Volumes {
		out[v.Name] = [2]string{v.ID, v.Parent}
	}
	for k, s := range m.Snapshots {
		out[k] = [2]string{s.Layer, m.Layers[s.Layer].Parent}
	}
	return out
}

// objKey names a data object.
type objKey struct {
	layer string
	i     int64
}

// TestReclaimProperty runs random sequences of write, snapshot, clone, rollback, attach
// and delete against the map's commands, a store of data objects and Reclaim, and
// checks them against a brute-force model after every step: every view (volume or
// snapshot) reads exactly what the model says it holds (no referenced object was
// freed), and the objects stored are exactly those some view reads (none leaked;
// space accounting), except those a simulated crash kept a device from deleting
// after its copy on write, which the next attach's sweep frees. At the end the
// whole family is deleted and no object is left.
func TestReclaimProperty(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { reclaimRun(t, uint64(seed)) })
	}
}

func reclaimRun(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 18))
	m, err := clustermap.ApplyCommand(&clustermap.Map{}, clustermap.Command{Op: clustermap.OpInit, Init: &clustermap.Map{Partitions: 8, Replicas: 1,
		Nodes:   []clustermap.Node{{ID: "n1", Addr: "a:1"}},
		Classes: map[string]clustermap.Class{clustermap.StandardClass: {Name: clustermap.StandardClass, N: 1, W: 1, R: 1, D: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	store := &memObjects{objs: map[string]map[int64]int{}, lists: map[string]int{}}
	model := map[string]map[int64]int{} // view -> index -> content (absent: zeroes)
	crashed := map[objKey]bool{}        // (layer, index) a crash kept from being deleted
	ids, token := 0, 0
	newID := func() string { ids++; return fmt.Sprintf("%016x", ids) }
	apply := func(c clustermap.Command) error {
		nm, err := clustermap.ApplyCommand(m, c)
		if err == nil {
			m = nm
		}
		return err
	}
	drain := func() {
		for len(m.Garbage) > 0 {
			for _, l := range slices.Sorted(maps.Keys(m.Garbage)) {
				g := m.Garbage[l]
				if _, err := Reclaim(ctx, m, store, l, g); err != nil {
					t.Fatal(err)
				}
				if err := apply(clustermap.Command{Op: clustermap.OpReclaimDone, Layer: l, Seq: g.Seq}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	var log []string
	check := func(leaks, exact bool) {
		t.Helper()
		live := map[objKey]bool{}
		for name, vw := range views(m) {
			for i := int64(0); i < 8; i++ {
				l, v := store.resolve(m, vw[0], vw[1], i)
				if v != model[name][i] {
					t.Fatalf("after %v: view %s index %d reads %d, the model says %d", log, name, i, v, model[name][i])
				}
				if l != "" {
					live[objKey{l, i}] = true
				}
			}
		}
		if !leaks {
			return // garbage not reclaimed yet is not a leak
		}
		for l, objs := range store.objs {
			for i := range objs {
				k := objKey{l, i}
				if !live[k] && (exact || !crashed[k]) {
					t.Fatalf("after %v: object %s/%d is stored, and no view reads it (leaked)", log, l, i)
				}
			}
		}
		for _, lay := range m.Layers { // every layer left is still needed
			ls, vs := m.Children(lay.ID)
			if !m.Named(lay.ID) && len(ls)+len(vs) != 1 {
				t.Fatalf("after %v: unnamed layer %s has %d children", log, lay.ID, len(ls)+len(vs))
			}
		}
	}
	names := func(snapshots bool) []string {
		if snapshots {
			return slices.Sorted(maps.Keys(m.Snapshots))
		}
		return slices.Sorted(maps.Keys(m.Volumes))
	}
	pick := func(s []string) string {
		if len(s) == 0 {
			return ""
		}
		return s[rng.IntN(len(s))]
	}
	nvol := 0
	for step := 0; step < 60; step++ {
		switch op := rng.IntN(10); {
		case op == 0 || len(m.Volumes) == 0:
			nvol++
			name := fmt.Sprintf("v%d", nvol)
			if apply(clustermap.Command{Op: clustermap.OpCreateVolume, Volume: &clustermap.Volume{Name: name, ID: newID(), Size: 8 << 16, BlockSize: 1 << 16}}) == nil {
				model[name] = map[int64]int{}
				log = append(log, "create "+name)
			}
		case op <= 3: // a write to one data object: copy on write if the head lacks it
			name := pick(names(false))
			v := m.Volumes[name]
			i := int64(rng.IntN(8))
			token++
			base, _ := store.resolve(m, v.ID, v.Parent, i)
			store.put(v.ID, i, token)
			model[name][i] = token
			crash := rng.IntN(8) == 0
			if base != "" && base != v.ID && DeadAfterCopy(m, v, base) {
				if crash {
					crashed[objKey{base, i}] = true
				} else {
					store.Delete(ctx, base, i)
				}
			}
			log = append(log, fmt.Sprintf("write %s/%d crash=%v", name, i, crash))
		case op == 4:
			name := pick(names(false))
			s := fmt.Sprintf("s%d", step)
			if apply(clustermap.Command{Op: clustermap.OpSnapshotVolume, Name: name, Snapshot: s, Layer: newID()}) == nil {
				model[clustermap.SnapshotKey(name, s)] = maps.Clone(model[name])
				log = append(log, "snapshot "+name+"@"+s)
			}
		case op == 5:
			src := pick(names(true))
			if src == "" {
				continue
			}
			nvol++
			name := fmt.Sprintf("v%d", nvol)
			if err := apply(clustermap.Command{Op: clustermap.OpCloneVolume, Snapshot: src, Volume: &clustermap.Volume{Name: name, ID: newID()}}); err != nil {
				t.Fatal(err)
			}
			model[name] = maps.Clone(model[src])
			log = append(log, "clone "+src+" "+name)
		case op == 6:
			name := pick(names(false))
			var snaps []string
			for _, s := range m.Snapshots {
				if s.Volume == name {
					snaps = append(snaps, s.Name)
				}
			}
			slices.Sort(snaps)
			s := pick(snaps)
			if s == "" {
				continue
			}
			if err := apply(clustermap.Command{Op: clustermap.OpRollbackVolume, Name: name, Snapshot: s, Layer: newID()}); err != nil {
				t.Fatal(err)
			}
			model[name] = maps.Clone(model[clustermap.SnapshotKey(name, s)])
			log = append(log, "rollback "+name+"@"+s)
		case op == 7: // attach and detach: the sweep for crashes
			name := pick(names(false))
			if apply(clustermap.Command{Op: clustermap.OpAttachVolume, Name: name, NodeID: "n1"}) != nil || apply(clustermap.Command{Op: clustermap.OpDetachVolume, Name: name}) != nil {
				t.Fatal("attach/detach")
			}
			log = append(log, "attach "+name)
		case op == 8:
			key := pick(names(true))
			if key == "" {
				continue
			}
			s := m.Snapshots[key]
			if apply(clustermap.Command{Op: clustermap.OpDeleteSnapshot, Name: s.Volume, Snapshot: s.Name}) == nil {
				delete(model, key)
				log = append(log, "delete "+key)
			}
		case op == 9:
			if !deleteVolume(t, ctx, m, store, pick(names(false)), apply) {
				continue
			}
			log = append(log, "delete volume")
		}
		// Reclaim goes on in the background: check before and after it ran.
		check(false, false)
		drain()
		check(true, false)
		for k := range model {
			if _, ok := views(m)[k]; !ok {
				delete(model, k)
			}
		}
	}
	// Attach every volume once (the sweep of crashes): then exactly the live objects.
	for _, name := range names(false) {
		apply(clustermap.Command{Op: clustermap.OpAttachVolume, Name: name, NodeID: "n1"})
		apply(clustermap.Command{Op: clustermap.OpDetachVolume, Name: name})
	}
	drain()
	check(true, true)
	// The whole family goes, and with it every object.
	for round := 0; len(m.Volumes)+len(m.Snapshots) > 0; round++ {
		if round > 1000 {
			t.Fatalf("the family cannot be deleted: %v %v", m.Volumes, m.Snapshots)
		}
		for _, key := range names(true) {
			s := m.Snapshots[key]
			apply(clustermap.Command{Op: clustermap.OpDeleteSnapshot, Name: s.Volume, Snapshot: s.Name})
		}
		for _, name := range names(false) {
			deleteVolume(t, ctx, m, store, name, apply)
		}
		drain()
	}
	if len(store.objs) != 0 || len(m.Layers) != 0 {
		t.Fatalf("after deleting the family: objects %v, layers %v", store.objs, m.Layers)
	}
}

// deleteVolume deletes a volume as the admin API does: its head's objects, then the
// command (refused while it has snapshots).
func deleteVolume(t *testing.T, ctx context.Context, m *clustermap.Map, store *memObjects, name string, apply func(clustermap.Command) error) bool {
	v := m.Volumes[name]
	for _, s := range m.Snapshots {
		if s.Volume == name {
			return false
		}
	}
	for i := range store.objs[v.ID] {
		store.Delete(ctx, v.ID, i)
	}
	if err := apply(clustermap.Command{Op: clustermap.OpDeleteVolume, Name: name}); err != nil {
		t.Fatal(err)
	}
	return true
}
