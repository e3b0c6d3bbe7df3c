package limiter

import (
	"errors"
	"fmt"
)

// Sentinel errors. Match them with errors.Is; an *InputError matches
// ErrInvalid, and also ErrBound when the input passed a configured bound.
var (
	// ErrInvalid is matched by every error about a bad entry, limit or
	// option (an empty key, uses < 1, a window out of range...).
	ErrInvalid = errors.New("limiter: invalid input")
	// ErrBound is matched by input errors that passed a configured bound
	// (key length, batch size, sliding-log uses, keys held). Servers map it
	// to gRPC ResourceExhausted.
	ErrBound = errors.New("limiter: bound exceeded")
	// ErrClosed is returned by calls made after a store was closed.
	ErrClosed = errors.New("limiter: store closed")
)

// InputError reports bad input and names the field, so a caller can show
// "entries[2].limit.window: ..." rather than a bare "invalid".
type InputError struct {
	// Field is the path of the offending field, e.g. "entries[0].key".
	Field string
	// Reason says what is wrong, e.g. "must not be empty".
	Reason string
	// Bound is true when the field passed a configured bound rather than
	// being malformed.
	Bound bool
}

// Error returns "limiter: FIELD: REASON".
func (e *InputError) Error() string {
	return fmt.Sprintf("limiter: %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) and, for bounds, errors.Is(err,
// ErrBound) true.
func (e *InputError) Is(target error) bool {
	return target == ErrInvalid || (e.Bound && target == ErrBound)
}

func invalid(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func bound(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...), Bound: true}
}

// prefixField returns err with its field prefixed ("limit.uses" becomes
// "entries[3].limit.uses").
func prefixField(prefix string, err error) error {
	var ie *InputError
	if errors.As(err, &ie) {
		c := *ie
		c.Field = prefix + "." + c.Field
		return &c
	}
	return err
}
