package s3api

import (
	"fmt"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
)

// TestConditionalConflictCode: a conditional write that another write of its key kept
// busy is S3's 409 ConditionalRequestConflict (though Transient inside, which is 503).
func TestConditionalConflictCode(t *testing.T) {
	err := errors.E(errors.Op("gateway.PutObject"), errors.Transient, fmt.Errorf("%w: the key's lease was busy", gateway.ErrConditionalConflict))
	if ae := toAPIError(err); ae.Status != 409 || ae.Code != "ConditionalRequestConflict" {
		t.Fatalf("conflict: %d %s", ae.Status, ae.Code)
	}
	if ae := toAPIError(errors.E(errors.Transient, "the lease holder cannot be reached")); ae.Status != 503 {
		t.Fatalf("holder unreachable: %d %s", ae.Status, ae.Code)
	}
}
