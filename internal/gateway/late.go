package gateway

import "github.com/cairnfs/cairn/internal/object"

// The last-writer rule (S3's): when two writes of a key overlap, the one that completes
// last wins. Versions order writes, so a new object version takes its HLC once the
// coordinator has the whole body, not when the request arrives: a long upload that
// started first and finished last is newer than a short one that started later and
// finished first. The version travels to the holders with the final metadata (ETag,
// checksums) that they wait for before committing (replica.Write.Final); the version
// announced before the body is provisional (see package replica, late.go).
//
// Across gateways the order is that of their hybrid logical clocks: a write whose body
// completes more than the clock skew between the two gateways after another's is newer;
// within the skew the order is arbitrary but the same on every holder
// (docs/design/20261123_cluster.md, "Versions and conflicts").

// lateVersion returns the provisional version of a new object version, and finish wrapped
// so that it gives the record its version once the body is complete: the one finish set
// (a conditional write's, taken under its lease), or this gateway's clock's next.
// Either is later than the provisional one, as holders require.
func (g *Gateway) lateVersion(finish func(*object.Object) error) (uint64, func(*object.Object) error) {
	provisional := g.clock.Next()
	return provisional, func(o *object.Object) error {
		o.HLC = 0
		if finish != nil {
			if err := finish(o); err != nil {
				return err
			}
		}
		if o.HLC <= provisional {
			g.clock.Observe(o.HLC)
			o.HLC = g.clock.Next()
		}
		return nil
	}
}
