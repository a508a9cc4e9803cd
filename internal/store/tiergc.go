package store

import (
	"bytes"

	"github.com/cockroachdb/pebble/v2"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// tierGarbage records, in the batch that replaces or removes old, that old's tier copy
// is no longer named by this store (if old is an archived version's stub): the node's
// tier loop deletes the copy from the tier, then the entry (TierGarbage,
// ForgetTierGarbage). Every holder of the version records it; deleting twice is
// harmless.
func tierGarbage(b *pebble.Batch, old *object.Object) {
	if old == nil {
		return
	}
	if tier, key, ok := old.TierRef(); ok {
		b.Set(tierGCKey(tier, key), nil, nil)
	}
}

func tierGCKey(tier, key string) []byte {
	k := make([]byte, 0, len(pfxTierGC)+len(tier)+1+len(key))
	k = append(append(append(k, pfxTierGC...), tier...), 0)
	return append(k, key...)
}

// TierCopy names a copy of an archived version in a tier.
type TierCopy struct{ Tier, Key string }

// TierGarbage returns up to max tier copies no record of this store names any more.
func (s *Store) TierGarbage(max int) ([]TierCopy, error) {
	const op errors.Op = "store.TierGarbage"
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(pfxTierGC), UpperBound: []byte("T0")})
	if err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	defer it.Close()
	var out []TierCopy
	for it.First(); it.Valid() && len(out) < max; it.Next() {
		rest := it.Key()[len(pfxTierGC):]
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			continue
		}
		out = append(out, TierCopy{Tier: string(rest[:i]), Key: string(rest[i+1:])})
	}
	if err := it.Error(); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return out, nil
}

// ForgetTierGarbage removes c from TierGarbage once the copy is deleted.
func (s *Store) ForgetTierGarbage(c TierCopy) error {
	if err := s.db.Delete(tierGCKey(c.Tier, c.Key), pebble.NoSync); err != nil {
		return errors.E(errors.Op("store.ForgetTierGarbage"), errors.IO, err)
	}
	return nil
}
