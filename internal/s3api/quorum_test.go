package s3api

import (
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
)

// TestQuorumMessage: a 503 for a failed write says nothing was written only when no
// replica applied it, and otherwise that the outcome is unknown.
func TestQuorumMessage(t *testing.T) {
	for _, tc := range []struct {
		qe          gateway.QuorumError
		want, avoid string
	}{
		{gateway.QuorumError{What: "write", Got: 0, Need: 2, Of: 3}, "Nothing was written", "unknown"},
		{gateway.QuorumError{What: "write", Got: 1, Need: 2, Of: 3, Unknown: true}, "The outcome is unknown", "Nothing was"},
		{gateway.QuorumError{What: "delete", Got: 0, Need: 2, Of: 3, Unknown: true}, "may have applied the delete", "Nothing was"},
		{gateway.QuorumError{What: "read", Got: 0, Need: 1, Of: 3}, "Retry later", "Nothing was"},
	} {
		qe := tc.qe
		ae := toAPIError(errors.E(errors.Transient, &qe))
		if ae.Status != 503 || !strings.Contains(ae.Message, tc.want) || strings.Contains(ae.Message, tc.avoid) {
			t.Errorf("%+v: %d %q; want 503 saying %q, not %q", tc.qe, ae.Status, ae.Message, tc.want, tc.avoid)
		}
	}
}
