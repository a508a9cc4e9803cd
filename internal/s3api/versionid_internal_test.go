package s3api

import (
	"fmt"
	"math"
	"testing"
)

// TestHLCID: a version id is its HLC in 16 hex digits, as fmt's %016x prints it.
func TestHLCID(t *testing.T) {
	for _, h := range []uint64{0, 1, 0xf, 0x10, 0x1234_5678_9abc_def0, 1<<63 | 5, math.MaxUint64} {
		if got, want := hlcID(h), fmt.Sprintf("%016x", h); got != want {
			t.Errorf("hlcID(%d) = %q, want %q", h, got, want)
		}
	}
}
