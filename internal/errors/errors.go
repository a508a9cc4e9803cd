// Package errors is cairn's error type: an operation, a kind and an underlying error,
// in the style of upspin's errors package, with Unwrap so that the standard errors.Is and
// errors.As work. The s3api package maps kinds to S3 error codes in one table.
package errors

import (
	stderrors "errors"
	"fmt"
	"strings"
)

// Op names the operation that failed, as "package.Method".
type Op string

// Kind classifies an error so that callers can react without matching strings.
type Kind uint8

// The kinds of error.
const (
	Other        Kind = iota // unclassified
	NotExist                 // the item does not exist
	Exist                    // the item already exists
	Invalid                  // the request or argument is invalid
	Permission               // not allowed
	IO                       // an I/O error
	Transient                // try again later
	Corrupt                  // stored data failed its checksum
	NoSpace                  // the disk is (nearly) full
	Precondition             // a conditional request's condition failed
	NotEmpty                 // e.g. deleting a bucket that holds objects
	TooLarge                 // the entity is larger than allowed
)

func (k Kind) String() string {
	switch k {
	case NotExist:
		return "item does not exist"
	case Exist:
		return "item already exists"
	case Invalid:
		return "invalid argument"
	case Permission:
		return "permission denied"
	case IO:
		return "I/O error"
	case Transient:
		return "transient error"
	case Corrupt:
		return "data corrupted"
	case NoSpace:
		return "insufficient storage"
	case Precondition:
		return "precondition failed"
	case NotEmpty:
		return "not empty"
	case TooLarge:
		return "entity too large"
	}
	return "error"
}

// Error is an error with an operation and a kind.
type Error struct {
	Op   Op
	Kind Kind
	Err  error
}

// E builds an *Error from its arguments: an Op, a Kind, an error, or a string (which
// becomes the underlying error). If the kind is not given and the underlying error is an
// *Error, its kind is inherited.
func E(args ...any) error {
	e := &Error{}
	for _, a := range args {
		switch a := a.(type) {
		case Op:
			e.Op = a
		case Kind:
			e.Kind = a
		case error:
			e.Err = a
		case string:
			e.Err = stderrors.New(a)
		default:
			panic(fmt.Sprintf("errors.E: bad argument %T", a))
		}
	}
	if e.Kind == Other {
		var inner *Error
		if stderrors.As(e.Err, &inner) {
			e.Kind = inner.Kind
		}
	}
	return e
}

// Errorf is E(op, kind, fmt.Errorf(format, args...)).
func Errorf(op Op, kind Kind, format string, args ...any) error {
	return E(op, kind, fmt.Errorf(format, args...))
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(string(e.Op))
		b.WriteString(": ")
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString(e.Kind.String())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of the outermost *Error in err's chain with a kind, or Other.
func KindOf(err error) Kind {
	for err != nil {
		if e, ok := err.(*Error); ok && e.Kind != Other {
			return e.Kind
		}
		err = stderrors.Unwrap(err)
	}
	return Other
}

// Is reports whether err has kind k.
func Is(k Kind, err error) bool { return KindOf(err) == k }

// New, As and Unwrap are the standard library's, so that callers need one import.
var (
	New    = stderrors.New
	As     = stderrors.As
	IsErr  = stderrors.Is
	Join   = stderrors.Join
	Unwrap = stderrors.Unwrap
)
