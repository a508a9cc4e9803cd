package replica

import (
	"fmt"
	"io"

	"github.com/cairnfs/cairn/internal/errors"
)

// ErrReaderGone is what a writer to a replica sees when that replica stopped reading
// the body it was sent (it failed, or answered early).
var ErrReaderGone = errors.New("replica stopped reading")

// ErrQuorum is wrapped by the errors of requests that reached fewer replicas than their
// quorum: the request was not acknowledged (QuorumError.Unknown says whether a write may
// still have been applied), and the client may retry later.
var ErrQuorum = errors.New("quorum not reached")

// QuorumError describes a request that reached fewer replicas than its quorum.
type QuorumError struct {
	What          string // write, read, delete
	Got, Need, Of int
	Last          error // the last replica error seen
	// Unknown is set for a write that some replica applied or may have applied (it
	// acknowledged, or failed or straggled in a way that does not rule it out): the write
	// may take effect later, through hinted retry or anti-entropy. Unset, no replica
	// applied the write.
	Unknown bool
}

func (e *QuorumError) Error() string {
	msg := fmt.Sprintf("%s quorum not reached: %d of %d replicas answered, %d needed", e.What, e.Got, e.Of, e.Need)
	if e.Unknown {
		msg += "; the outcome is unknown (some replica may have applied it)"
	}
	if e.Last != nil {
		msg += " (last error: " + e.Last.Error() + ")"
	}
	return msg
}

func (e *QuorumError) Unwrap() error { return ErrQuorum }

// QuorumErr is the error of a request that reached fewer replicas than its quorum.
func QuorumErr(what string, got, need, of int, last error) error {
	return errors.E(errors.Transient, &QuorumError{What: what, Got: got, Need: need, Of: of, Last: last})
}

// BodyErr classifies an error met reading the body of a write: the client's doing
// (Invalid: it sent less than it declared, or its connection broke) unless it already
// has a kind.
func BodyErr(err error) error {
	if errors.KindOf(err) != errors.Other {
		return err
	}
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return errors.E(errors.Invalid, fmt.Errorf("reading the body: %w", err))
	}
	return errors.E(errors.Invalid, err)
}
