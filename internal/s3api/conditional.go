package s3api

import (
	"net/http"

	"github.com/cairnfs/cairn/internal/object"
)

// Conditional writes: If-Match and If-None-Match on PutObject, on CopyObject (they are
// conditions on the destination; the x-amz-copy-source-if-* headers are the source's) and
// on CompleteMultipartUpload. The gateway evaluates them atomically with the write,
// across gateways (gateway/conditional.go): 412 PreconditionFailed when the condition is
// false, 404 NoSuchKey for If-Match on a key that holds no object, 409
// ConditionalRequestConflict when another write of the key kept it busy, 503 when the
// node that serializes the key's conditional writes cannot be reached.

// errConditionalConflict is S3's answer to a conditional write that a concurrent write
// of its key interfered with: the client reads the object again and retries.
var errConditionalConflict = &apiError{"ConditionalRequestConflict", "A conflicting conditional operation is currently in progress against this resource. Try again.", 409}

// writeConditions reads a write's If-Match and If-None-Match into opts. S3 takes only
// '*' in If-None-Match on a write (an ETag there is refused: NotImplemented, as AWS
// answers a header value it does not implement); If-Match takes a list of ETags.
func writeConditions(hd http.Header, opts *object.PutOptions) error {
	switch inm := hd.Get("If-None-Match"); inm {
	case "":
	case "*":
		opts.IfNoneMatch = true
	default:
		return errf(501, "NotImplemented", "If-None-Match on a write supports only '*'.")
	}
	opts.IfMatch = hd.Get("If-Match")
	return nil
}
