package wire

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Code is an error kind on the wire. The values are part of the protocol: never renumber
// one (TestCodesStable pins them); add new kinds at the end.
type Code int

// The error codes.
const (
	CodeOther        Code = 0
	CodeNotExist     Code = 1
	CodeExist        Code = 2
	CodeInvalid      Code = 3
	CodePermission   Code = 4
	CodeIO           Code = 5
	CodeTransient    Code = 6
	CodeCorrupt      Code = 7
	CodeNoSpace      Code = 8
	CodePrecondition Code = 9
	CodeNotEmpty     Code = 10
	CodeTooLarge     Code = 11
)

// codes maps each error kind to its code and back.
var codes = []struct {
	kind errors.Kind
	code Code
}{
	{errors.Other, CodeOther},
	{errors.NotExist, CodeNotExist},
	{errors.Exist, CodeExist},
	{errors.Invalid, CodeInvalid},
	{errors.Permission, CodePermission},
	{errors.IO, CodeIO},
	{errors.Transient, CodeTransient},
	{errors.Corrupt, CodeCorrupt},
	{errors.NoSpace, CodeNoSpace},
	{errors.Precondition, CodePrecondition},
	{errors.NotEmpty, CodeNotEmpty},
	{errors.TooLarge, CodeTooLarge},
}

// CodeOf returns the code of an error kind.
func CodeOf(k errors.Kind) Code {
	for _, c := range codes {
		if c.kind == k {
			return c.code
		}
	}
	return CodeOther
}

// Kind returns the error kind of a code, and false for a code this build does not know.
func (c Code) Kind() (errors.Kind, bool) {
	for _, e := range codes {
		if e.code == c {
			return e.kind, true
		}
	}
	return errors.Other, false
}

// sentinels are the errors that cross the wire by name, so that the S3 layer of the
// gateway maps them to the same S3 codes as a local error.
var sentinels = map[string]error{
	"NoSuchBucket":     object.ErrNoSuchBucket,
	"NoSuchKey":        object.ErrNoSuchKey,
	"NoSuchUpload":     object.ErrNoSuchUpload,
	"NoSuchVersion":    object.ErrNoSuchVersion,
	"ObjectLocked":     object.ErrLocked,
	"InvalidPart":      object.ErrInvalidPart,
	"InvalidPartOrder": object.ErrInvalidPartOrder,
	"EntityTooSmall":   object.ErrEntityTooSmall,
}

// statusOf is the HTTP status an error kind is answered with (informative: the code in
// HdrError is what the receiver reads).
func statusOf(k errors.Kind) int {
	switch k {
	case errors.NotExist:
		return http.StatusNotFound
	case errors.Permission:
		return http.StatusForbidden
	case errors.Invalid:
		return http.StatusBadRequest
	case errors.Precondition:
		return http.StatusPreconditionFailed
	case errors.Transient:
		return http.StatusServiceUnavailable
	case errors.NoSpace:
		return http.StatusInsufficientStorage
	case errors.Exist, errors.NotEmpty:
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// sentinelName is the wire name of the sentinel err wraps ("": none).
func sentinelName(err error) string {
	for n, s := range sentinels {
		if errors.IsErr(err, s) {
			return n
		}
	}
	return ""
}

// WriteError answers an internode request with err: its code and sentinel name in
// HdrError, its message in the body.
func WriteError(w http.ResponseWriter, err error) {
	name := sentinelName(err)
	kind := errors.KindOf(err)
	w.Header().Set(HdrError, strconv.Itoa(int(CodeOf(kind)))+" "+name)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(statusOf(kind))
	io.WriteString(w, err.Error())
}

// DecodeError rebuilds the error a node sent with WriteError. An answer without a code
// this build knows (a proxy, a newer node's new kind) is classified by its status.
func DecodeError(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(msg))
	codeS, name, _ := strings.Cut(resp.Header.Get(HdrError), " ")
	n, err := strconv.Atoi(codeS)
	k, known := Code(n).Kind()
	if err != nil || !known {
		switch {
		case resp.StatusCode == http.StatusForbidden:
			k = errors.Permission
		case resp.StatusCode >= 500:
			k = errors.Transient
		default:
			k = errors.Invalid
		}
	}
	if s, ok := sentinels[name]; ok {
		return errors.E(k, fmt.Errorf("%s: %w", text, s))
	}
	if text == "" {
		text = resp.Status
	}
	return errors.E(k, text)
}
