package volume

import (
	"context"

	"github.com/cairnfs/cairn/internal/clustermap"
)

// Objects is what Reclaim needs of the store.
type Objects interface {
	// List calls fn with the index of every data object of a layer (a head or a frozen
	// layer), in any order; an error of fn ends the listing with it.
	List(ctx context.Context, layer string, fn func(i int64) error) error
	// Delete removes data object i of a layer; one that does not exist is no error.
	Delete(ctx context.Context, layer string, i int64) error
}

// Reclaim frees the data objects of Garbage entry id of m (docs/design/volume-snapshots.md,
// "Reclaim"), and reports how many it deleted. It reads only the layers involved, never
// the rest of the family:
//
//   - an entry with All is a layer no one references: every data object of it goes;
//   - otherwise the layer lost its snapshot and has one child. Nothing but the views
//     (a volume's head, a snapshot) at the bottom of its run (the layers under it that
//     no snapshot names, down to the first one that is a view) reads it, so an object
//     of an unnamed layer of that run is dead exactly when a layer below it in the run,
//     the view included, has the same index. Those go.
//
// It is idempotent, and safe while the view's device writes (a head only gains objects,
// and an object found hidden stays hidden): the caller applies OpReclaimDone after it.
func Reclaim(ctx context.Context, m *clustermap.Map, objs Objects, id string, g clustermap.Garbage) (int64, error) {
	var freed int64
	if g.All {
		var idx []int64
		if err := objs.List(ctx, id, func(i int64) error { idx = append(idx, i); return nil }); err != nil {
			return 0, err
		}
		for _, i := range idx {
			if err := objs.Delete(ctx, id, i); err != nil {
				return freed, err
			}
			freed++
		}
		return freed, nil
	}
	if _, ok := m.Layers[id]; !ok {
		return 0, nil // removed since: an All entry took it over
	}
	// Down to the view at the bottom of the run.
	bottom, parent := id, ""
	for {
		if v, ok := m.VolumeByID(bottom); ok {
			parent = v.Parent
			break
		}
		if m.Named(bottom) {
			parent = m.Layers[bottom].Parent
			break
		}
		ls, vs := m.Children(bottom)
		switch {
		case len(ls) == 1 && len(vs) == 0:
			bottom = ls[0]
		case len(ls) == 0 && len(vs) == 1:
			bottom = m.Volumes[vs[0]].ID
		default:
			return 0, nil // no view reads it through one child: release handles it
		}
	}
	hidden := map[int64]bool{}
	if err := objs.List(ctx, bottom, func(i int64) error { hidden[i] = true; return nil }); err != nil {
		return 0, err
	}
	for p := parent; p != "" && !m.Named(p); p = m.Layers[p].Parent {
		var dead []int64
		if err := objs.List(ctx, p, func(i int64) error {
			if hidden[i] {
				dead = append(dead, i)
			}
			hidden[i] = true
			return nil
		}); err != nil {
			return freed, err
		}
		for _, i := range dead {
			if err := objs.Delete(ctx, p, i); err != nil {
				return freed, err
			}
			freed++
		}
	}
	return freed, nil
}

// DeadAfterCopy reports whether data object index of layer base, which volume v's head
// has just copied on write, is read by no one else any more: base is in the head's run
// (every layer from v.Parent down to base is named by no snapshot), so only the head
// read it. The device then deletes it; a crash before that leaves it to the sweep that
// attaching the volume again asks for (OpAttachVolume).
func DeadAfterCopy(m *clustermap.Map, v clustermap.Volume, base string) bool {
	for p := v.Parent; p != "" && !m.Named(p); p = m.Layers[p].Parent {
		if p == base {
			return true
		}
	}
	return false
}
