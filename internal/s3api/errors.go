package s3api

import (
	"context"
	"encoding/xml"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/sigv4"
)

// apiError is an S3 error response.
type apiError struct {
	Code    string
	Message string
	Status  int
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{Code: code, Status: status, Message: fmt.Sprintf(format, args...)}
}

// Common errors.
var (
	errNoSuchBucket      = &apiError{"NoSuchBucket", "The specified bucket does not exist.", 404}
	errNoSuchKey         = &apiError{"NoSuchKey", "The specified key does not exist.", 404}
	errNoSuchUpload      = &apiError{"NoSuchUpload", "The specified multipart upload does not exist. The upload ID might be invalid, or the multipart upload might have been aborted or completed.", 404}
	errInvalidPart       = &apiError{"InvalidPart", "One or more of the specified parts could not be found. The part might not have been uploaded, or the specified entity tag might not have matched the part's entity tag.", 400}
	errInvalidPartOrder  = &apiError{"InvalidPartOrder", "The list of parts was not in ascending order. The parts list must be specified in order by part number.", 400}
	errEntityTooSmall    = &apiError{"EntityTooSmall", "Your proposed upload is smaller than the minimum allowed object size.", 400}
	errEntityTooLarge    = &apiError{"EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.", 400}
	errMalformedXML      = &apiError{"MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema.", 400}
	errBucketNotEmpty    = &apiError{"BucketNotEmpty", "The bucket you tried to delete is not empty.", 409}
	errBucketOwned       = &apiError{"BucketAlreadyOwnedByYou", "Your previous request to create the named bucket succeeded and you already own it.", 409}
	errInvalidBucketName = &apiError{"InvalidBucketName", "The specified bucket is not valid.", 400}
	errKeyTooLong        = &apiError{"KeyTooLongError", "Your key is too long.", 400}
	errPrecondition      = &apiError{"PreconditionFailed", "At least one of the pre-conditions you specified did not hold.", 412}
	errNotModified       = &apiError{"NotModified", "Not Modified", 304}
	errInvalidRange      = &apiError{"InvalidRange", "The requested range is not satisfiable.", 416}
	errBadDigest         = &apiError{"BadDigest", "The Content-MD5 you specified did not match what we received.", 400}
	errInvalidDigest     = &apiError{"InvalidDigest", "The Content-MD5 you specified is not valid.", 400}
	errIncompleteBody    = &apiError{"IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.", 400}
	errMissingLength     = &apiError{"MissingContentLength", "You must provide the Content-Length HTTP header.", 411}
	errNoSpace           = &apiError{"InsufficientStorage", "The server does not have enough free disk space to store the object; earlier data is intact.", 507}
	errSlowDown          = &apiError{"SlowDown", "Please reduce your request rate.", 503}
	errNotImplemented    = &apiError{"NotImplemented", "A header or query you provided implies functionality that is not implemented.", 501}
	errMethodNotAllowed  = &apiError{"MethodNotAllowed", "The specified method is not allowed against this resource.", 405}
	errInternal          = &apiError{"InternalError", "We encountered an internal error. Please try again.", 500}
	errCorrupt           = &apiError{"InternalError", "The stored data failed its checksum; no corrupted bytes were returned. The object needs repair.", 500}
)

// toAPIError maps an error from any layer to the S3 error returned to the client. This is
// the one table from internal kinds and sentinels to S3 codes.
// detail is the message of the innermost error of err's chain of *errors.Error, without
// the operations that wrapped it.
func detail(err error) string {
	for {
		e, ok := err.(*errors.Error)
		if !ok || e.Err == nil {
			return err.Error()
		}
		err = e.Err
	}
}

func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var se *sigv4.Error
	if errors.As(err, &se) {
		return &apiError{Code: se.Code, Message: se.Message, Status: se.Status}
	}
	var qe *gateway.QuorumError
	if errors.As(err, &qe) {
		return &apiError{Code: "ServiceUnavailable", Status: 503, Message: quorumMessage(qe)}
	}
	switch {
	case errors.IsErr(err, gateway.ErrMapUnavailable):
		return &apiError{"ServiceUnavailable", "Buckets cannot be created, deleted or configured now: " + detail(err) +
			". Reading and writing objects in existing buckets does not need the map.", 503}
	case errors.IsErr(err, gateway.ErrUpgrading):
		d := detail(err) // "the cluster is being upgraded: ..."
		return &apiError{"ServiceUnavailable", strings.ToUpper(d[:1]) + d[1:] + ".", 503}
	case errors.IsErr(err, gateway.ErrConditionalConflict):
		return errConditionalConflict
	case errors.IsErr(err, gateway.ErrInvalidStorageClass):
		return &apiError{"InvalidStorageClass", "The storage class you specified is not valid: " + detail(err), 400}
	case errors.IsErr(err, object.ErrNoSuchBucket):
		return errNoSuchBucket
	case errors.IsErr(err, object.ErrNoSuchKey):
		return errNoSuchKey
	case errors.IsErr(err, object.ErrLocked):
		return errLocked
	case errors.IsErr(err, object.ErrInvalidObjectState):
		return &apiError{"InvalidObjectState", "The operation is not valid for the object's storage class", 403}
	case errors.IsErr(err, object.ErrRestoreInProgress):
		return &apiError{"RestoreAlreadyInProgress", "Object restore is already in progress", 409}
	case errors.IsErr(err, object.ErrNoSuchVersion):
		return &apiError{"NoSuchVersion", "The specified version does not exist.", 404}
	case errors.IsErr(err, object.ErrNoSuchUpload):
		return errNoSuchUpload
	case errors.IsErr(err, object.ErrInvalidPart):
		return errInvalidPart
	case errors.IsErr(err, object.ErrInvalidPartOrder):
		return errInvalidPartOrder
	case errors.IsErr(err, object.ErrEntityTooSmall):
		return errEntityTooSmall
	case errors.IsErr(err, context.Canceled), errors.IsErr(err, context.DeadlineExceeded):
		return &apiError{"RequestTimeout", "Your socket connection to the server was not read from or written to within the timeout period.", 400}
	}
	switch errors.KindOf(err) {
	case errors.NotExist:
		return errNoSuchKey
	case errors.Precondition:
		return errPrecondition
	case errors.NoSpace:
		return errNoSpace
	case errors.Transient:
		return errSlowDown
	case errors.Corrupt:
		return errCorrupt
	case errors.Invalid:
		return errIncompleteBody
	case errors.NotEmpty:
		return errBucketNotEmpty
	case errors.Exist:
		return errBucketOwned
	case errors.TooLarge:
		return errEntityTooLarge
	}
	return errInternal
}

type errorBody struct {
	XMLName    xml.Name `xml:"Error"`
	Code       string
	Message    string
	Resource   string `xml:",omitempty"`
	RequestID  string `xml:"RequestId"`
	BucketName string `xml:",omitempty"`
	Key        string `xml:",omitempty"`
}

// writeError sends err as an S3 XML error (no body for HEAD or 304).
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, rq *request, err error) {
	ae := toAPIError(err)
	if ae.Status >= 500 && ae.Status != http.StatusNotImplemented {
		h.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "code", ae.Code, "err", err)
	} else {
		h.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "query", queryNames(r), "code", ae.Code, "err", err)
	}
	rq.status = ae.Status
	rq.code = ae.Code
	clearHeaders(w.Header(), ae.Status == http.StatusNotModified)
	if ae.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if r.Method == http.MethodHead || ae.Status == http.StatusNotModified {
		w.WriteHeader(ae.Status)
		return
	}
	body := errorBody{Code: ae.Code, Message: ae.Message, Resource: r.URL.Path, RequestID: rq.id, BucketName: rq.bucket, Key: rq.key}
	out, _ := xml.Marshal(body)
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", fmt.Sprint(len(xml.Header)+len(out)))
	w.WriteHeader(ae.Status)
	w.Write([]byte(xml.Header))
	w.Write(out)
}

// clearHeaders removes from a response that is about to carry an error every header a
// handler set before it failed (ETag, Last-Modified, Content-Range, x-amz-storage-class,
// x-amz-meta-*, checksums, ...), so that no error looks like an object. It keeps the
// headers every response carries, the version headers (a delete marker's NoSuchKey or
// MethodNotAllowed names the marker) and, for 304 Not Modified, the validators S3 sends
// with it.
func clearHeaders(hd http.Header, notModified bool) {
	marker := hd.Get("X-Amz-Delete-Marker") != ""
	for k := range hd {
		switch k {
		case "X-Amz-Request-Id", "X-Amz-Id-2", "Server", "Connection", "Date", "Vary",
			"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Allow-Methods",
			"Access-Control-Expose-Headers", "Access-Control-Max-Age":
			continue // and the CORS headers, so that a page may read the error
		case "X-Amz-Delete-Marker", "X-Amz-Version-Id":
			continue // the version a read found: a delete marker's answer names it
		case "Etag", "Last-Modified":
			if notModified || (marker && k == "Last-Modified") {
				continue
			}
		}
		delete(hd, k)
	}
}

// quorumMessage explains a quorum failure truthfully: a write that no replica applied says
// so; one that some replica applied or may have applied says that its outcome is unknown.
func quorumMessage(qe *gateway.QuorumError) string {
	msg := fmt.Sprintf("Too few replicas are reachable: %d of %d answered, the %s quorum is %d.", qe.Got, qe.Of, qe.What, qe.Need)
	switch {
	case qe.What == "read":
		return msg + " Retry later."
	case qe.Unknown:
		return msg + " The outcome is unknown: some replica may have applied the " + qe.What +
			", and it may still take effect on the others later. Retry it, or read to find out."
	default:
		return msg + " Nothing was written; retry later."
	}
}

// queryNames lists the names of r's query parameters (the sub-resource of a refused
// request, say), not their values, which may carry signatures.
func queryNames(r *http.Request) string {
	q := r.URL.Query()
	names := make([]string, 0, len(q))
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
