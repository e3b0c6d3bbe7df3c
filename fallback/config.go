package fallback

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Defaults of Config.
const (
	DefaultTimeout    = 250 * time.Millisecond
	DefaultLateWait   = 5 * time.Second
	DefaultMaxPending = 1024
)

// Config configures New. The zero value is ready to use: a 250 ms
// timeout under the Deny policy.
type Config struct {
	// Timeout is the longest a call waits for the wrapped store before
	// the policy decides. Default 250 ms; negative is an error.
	Timeout time.Duration
	// Policy decides a call the store did not answer in time or failed.
	// The zero value is Deny.
	Policy Policy
	// Local counts calls under the Local policy. Default: a process-local
	// limiter.Memory built with Clock and Bounds, closed by Close. A store
	// given here is not closed by Close.
	Local limiter.Store
	// Share returns the number of live members the limit is shared
	// across; under Local each entry's Uses becomes ceil(Uses / Share()).
	// It is called on every Local verdict, so a cluster passes a function
	// reading its current membership. Default: always 1. A result below 1
	// counts as 1.
	Share func() int
	// LateWait is how long after Timeout a call that missed it is still
	// awaited, so that a count it recorded can be released. The wrapped
	// store's context carries the deadline Timeout + LateWait (it is not
	// cancelled when the caller gives up). Default 5 s.
	LateWait time.Duration
	// MaxPending bounds the calls under way on the wrapped store, late
	// ones included; each holds one goroutine. Past it a call does not
	// reach the store: the policy decides at once (cause ErrOverloaded),
	// so a stalled store never piles up goroutines. Default 1024.
	MaxPending int
	// Bounds are checked before the wrapped store is called, so input
	// the store would refuse gets its *limiter.InputError even when the
	// store stalls; set them to the wrapped store's bounds. Zero fields
	// mean the limiter defaults. They also bound the default Local store.
	Bounds limiter.Bounds
	// Logger receives the throttled failure log (see FailureLog), with an
	// attribute policy. Default slog.Default().
	Logger *slog.Logger
	// Clock reads the time for the failure log's throttle and the default
	// Local store. Default limiter.RealClock. Waiting for Timeout uses the
	// runtime's timers (tests use testing/synctest).
	Clock limiter.Clock
	// Inline says the wrapped store bounds its own waits: it answers
	// within Timeout (and by its context's deadline), failing with an
	// error wrapping context.DeadlineExceeded when it could not, and
	// itself gives back a count recorded for a caller that gave up (a
	// ringlimit node's router does all three). Calls then run in the
	// caller's goroutine with no goroutine, timer or context of their own,
	// and no late answers to settle (LateWait and MaxPending do not
	// apply). Default false.
	Inline bool
	// KeepStoreOpen leaves the wrapped store open on Close. By default
	// Close closes it (when it has a Close() error or
	// Close(context.Context) error method) after the calls and releases
	// under way have finished.
	KeepStoreOpen bool
}

func (c Config) withDefaults() (Config, error) {
	if c.Timeout < 0 {
		return c, &limiter.InputError{Field: "Timeout", Reason: fmt.Sprintf("must not be negative, got %v", c.Timeout)}
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if !c.Policy.Valid() {
		return c, &limiter.InputError{Field: "Policy", Reason: fmt.Sprintf("unknown policy %d (want Deny, Allow or Local)", c.Policy)}
	}
	if c.LateWait < 0 {
		return c, &limiter.InputError{Field: "LateWait", Reason: fmt.Sprintf("must not be negative, got %v", c.LateWait)}
	}
	if c.LateWait == 0 {
		c.LateWait = DefaultLateWait
	}
	if c.MaxPending < 0 {
		return c, &limiter.InputError{Field: "MaxPending", Reason: fmt.Sprintf("must not be negative, got %d", c.MaxPending)}
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = limiter.RealClock
	}
	c.Bounds = c.Bounds.WithDefaults()
	return c, nil
}

// Sentinel causes of a failure; match them with errors.Is on
// Verdict.Failure.
var (
	// ErrTimeout: the wrapped store did not answer within Timeout.
	ErrTimeout = errors.New("fallback: store did not answer in time")
	// ErrOverloaded: MaxPending calls were already under way on the
	// wrapped store, so this one was not sent.
	ErrOverloaded = errors.New("fallback: too many calls waiting on the store")
)

// FailureError is the Verdict.Failure of a verdict a policy decided.
type FailureError struct {
	// ID is the failure's correlation id, as logged.
	ID string
	// Policy decided the verdict.
	Policy Policy
	// Err is the cause: ErrTimeout, ErrOverloaded or the store's error.
	Err error
}

func (e *FailureError) Error() string {
	return "fallback: store failure " + e.ID + " (policy " + e.Policy.String() + "): " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *FailureError) Unwrap() error { return e.Err }

// IsLocal reports whether a verdict's Failure says it was counted in the
// process-local store under the Local policy. Such a refusal is a real
// rate-limit refusal (HTTP 429 with its Retry-After), not an outage.
func IsLocal(failure error) bool {
	var fe *FailureError
	return errors.As(failure, &fe) && fe.Policy == Local
}
