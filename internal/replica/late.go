package replica

import (
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// The last-writer rule: of two overlapping writes of a key, the one whose body completes
// last wins. A coordinator therefore takes a new object version's HLC only once it has
// the whole body, and sends it with the final metadata (Write.Final or Write.FinalNow,
// the X-Cairn-Final trailer or header on the wire). Write.Version, sent before the body,
// is then provisional: a lower bound of the version (the coordinator's clock only moves
// forward), which hinted retry uses and which holders of older builds commit at.

// finalVersion makes o, an object record being committed at the version announced
// before the body (o.HLC), take the version in the coordinator's final metadata fin when
// that is later. A final version older than the announced one cannot come from a
// conforming coordinator and is refused: a holder never commits a version it was not
// given. A final record without a version (a part, a shard, a coordinator of an older
// build) keeps the announced one.
func finalVersion(o, fin *object.Object) error {
	switch {
	case fin.HLC == 0 || fin.HLC == o.HLC || o.HLC == 0:
		return nil
	case fin.HLC < o.HLC:
		return errors.Errorf("", errors.Invalid, "the coordinator's final version %d is older than the version %d it announced", fin.HLC, o.HLC)
	}
	o.HLC = fin.HLC
	return nil
}
