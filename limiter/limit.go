package limiter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Algorithm selects how a Limit counts. The zero value is SlidingLog.
type Algorithm uint8

const (
	// SlidingLog is exact: a call passes when fewer than Uses calls lie in
	// the last Window; a refusal waits until the oldest use leaves the
	// window. Memory grows with Uses per key: the cooldown case.
	SlidingLog Algorithm = iota
	// SlidingWindow weights the previous fixed window by how much of it
	// still overlaps the sliding one; O(1) memory per key.
	SlidingWindow
	// TokenBucket holds Uses tokens refilled at Uses per Window, written as
	// GCRA (one timestamp per key); O(1) memory per key.
	TokenBucket
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{"sliding-log", "sliding-window", "token-bucket"}

// String returns "sliding-log", "sliding-window" or "token-bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Valid reports whether a is one of the three algorithms.
func (a Algorithm) Valid() bool { return a < numAlgorithms }

// ParseAlgorithm parses "sliding-log", "sliding-window" or "token-bucket".
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, invalid("algorithm", "unknown algorithm %q (want sliding-log, sliding-window or token-bucket)", s)
}

// MaxWindow is the longest window: the largest whole-millisecond
// time.Duration, 9,223,372,036,854 ms (about 292 years).
const MaxWindow = time.Duration(int64(^uint64(0)>>1)/int64(time.Millisecond)) * time.Millisecond

// Limit is Uses per Window, counted by Algorithm.
type Limit struct {
	// Algorithm counts the uses; the zero value is SlidingLog.
	Algorithm Algorithm
	// Uses is how many uses the window holds; at least 1.
	Uses int64
	// Window is a whole number of milliseconds from 1 ms to MaxWindow.
	Window time.Duration
}

// Validate reports a bad limit with an *InputError naming the field.
func (l Limit) Validate() error {
	if !l.Algorithm.Valid() {
		return invalid("algorithm", "unknown algorithm %d", l.Algorithm)
	}
	if l.Uses < 1 {
		return invalid("uses", "must be at least 1, got %d", l.Uses)
	}
	if l.Window < time.Millisecond || l.Window > MaxWindow {
		return invalid("window", "must be from 1ms to %dms, got %v", MaxWindow/time.Millisecond, l.Window)
	}
	if l.Window%time.Millisecond != 0 {
		return invalid("window", "must be a whole number of milliseconds, got %v", l.Window)
	}
	return nil
}

// String formats l so that ParseLimit reads it back: "5/15m" for a
// sliding log, "token-bucket:100/1s" otherwise.
func (l Limit) String() string {
	s := strconv.FormatInt(l.Uses, 10) + "/" + FormatDuration(l.Window)
	if l.Algorithm != SlidingLog {
		s = l.Algorithm.String() + ":" + s
	}
	return s
}

// ParseLimit parses "USES/WINDOW", optionally prefixed by an algorithm and
// a colon: "5/15m", "token-bucket:100/1s". The window follows
// ParseDuration. The algorithm defaults to SlidingLog.
func ParseLimit(s string) (Limit, error) {
	var l Limit
	rest := s
	if i := strings.IndexByte(s, ':'); i >= 0 {
		a, err := ParseAlgorithm(s[:i])
		if err != nil {
			return Limit{}, err
		}
		l.Algorithm, rest = a, s[i+1:]
	}
	u, w, ok := strings.Cut(rest, "/")
	if !ok {
		return Limit{}, invalid("limit", "%q is not USES/WINDOW (e.g. 5/15m)", s)
	}
	uses, err := strconv.ParseInt(u, 10, 64)
	if err != nil || uses < 1 || u[0] == '+' {
		return Limit{}, invalid("uses", "%q is not a whole number of at least 1", u)
	}
	l.Uses = uses
	if l.Window, err = ParseDuration(w); err != nil {
		return Limit{}, err
	}
	return l, nil
}

// Entry is one counter of a call: a key, its limit and the uses it takes.
type Entry struct {
	// Key is an opaque byte string, not empty, at most Bounds.MaxKeyBytes.
	Key string
	// Limit applies to Key. Counters are kept per key, algorithm and
	// window, so changing a rule's window starts fresh counts.
	Limit Limit
	// Cost is the number of uses the call takes; 0 means 1. At most
	// Limit.Uses.
	Cost int64
}

// Verdict answers a whole batch.
type Verdict struct {
	// Allowed is true when every entry passed and the call was recorded.
	Allowed bool
	// Remaining is the number of uses left in the tightest entry after
	// this call (after a refusal: before it, as nothing was recorded).
	Remaining int64
	// RetryAfter is, when refused, the longest wait among the refusing
	// entries: the earliest moment the whole batch could pass.
	RetryAfter time.Duration
	// RetryAt is, when refused, that moment on the store's own clock
	// (whole milliseconds, rounded up); the same for every refusal inside
	// one wait.
	RetryAt time.Time
	// ResetAt is, when allowed, when every entry's quota is whole again.
	ResetAt time.Time
	// Release gives back exactly this call's uses. It is idempotent. It is
	// set only when the call was allowed, the store can release, and the
	// context was made with WithRelease (building it costs an allocation,
	// which the hot path does not pay unless asked); otherwise nil.
	Release func(context.Context) error
	// Failure is set when the store did not answer and a failure policy
	// (see package fallback) decided this verdict; HTTP answers 503 for a
	// refusal with a Failure.
	Failure error
}

// Store counts entries. Every implementation keeps the contract of
// DESIGN.md, checked by limiter/storetest:
//   - ConsumeMany checks and records atomically: of N concurrent calls at
//     the limit exactly one passes; a batch is all or nothing, and a
//     refused batch records nothing and names the longest wait.
//   - PeekMany answers exactly what ConsumeMany would, and records nothing.
//   - Bad input returns an *InputError (matching ErrInvalid) naming the
//     field; a refusal is a Verdict, never an error.
//
// Stores are safe for concurrent use. They do not keep the entries slice.
type Store interface {
	ConsumeMany(ctx context.Context, entries []Entry) (Verdict, error)
	PeekMany(ctx context.Context, entries []Entry) (Verdict, error)
}

// Consume takes one use of key under limit.
func Consume(ctx context.Context, s Store, key string, limit Limit) (Verdict, error) {
	return s.ConsumeMany(ctx, []Entry{{Key: key, Limit: limit}})
}

// Peek answers what Consume would, recording nothing.
func Peek(ctx context.Context, s Store, key string, limit Limit) (Verdict, error) {
	return s.PeekMany(ctx, []Entry{{Key: key, Limit: limit}})
}

type releaseKey struct{}

// WithRelease returns a context asking the store to set Verdict.Release on
// allowed verdicts.
func WithRelease(ctx context.Context) context.Context {
	return context.WithValue(ctx, releaseKey{}, true)
}

// WantsRelease reports whether ctx was made with WithRelease. Stores call it.
func WantsRelease(ctx context.Context) bool {
	v, _ := ctx.Value(releaseKey{}).(bool)
	return v
}

// Bounds protect a store from input that would cost it unbounded memory.
// The zero value of each field means its default.
type Bounds struct {
	// MaxKeyBytes is the longest key accepted. Default 1024.
	MaxKeyBytes int
	// MaxEntries is the largest batch accepted. Default 128.
	MaxEntries int
	// MaxLogUses is the largest Uses of a sliding-log limit (its memory
	// grows with Uses per key). Default 100,000.
	MaxLogUses int64
	// MaxKeys is the most counters a store holds; a call that would add
	// one more is refused with an error matching ErrBound. Default 0: no
	// bound.
	MaxKeys int
}

// Defaults for Bounds.
const (
	DefaultMaxKeyBytes = 1024
	DefaultMaxEntries  = 128
	DefaultMaxLogUses  = 100_000
)

// WithDefaults returns b with every zero field set to its default.
func (b Bounds) WithDefaults() Bounds {
	if b.MaxKeyBytes <= 0 {
		b.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if b.MaxEntries <= 0 {
		b.MaxEntries = DefaultMaxEntries
	}
	if b.MaxLogUses <= 0 {
		b.MaxLogUses = DefaultMaxLogUses
	}
	return b
}

// Check validates a batch against the contract and the bounds (whose zero
// fields mean their defaults), naming the bad field as "entries[i].key",
// "entries[i].limit.window" and so on.
func (b Bounds) Check(entries []Entry) error {
	b = b.WithDefaults()
	if len(entries) == 0 {
		return invalid("entries", "must not be empty")
	}
	if len(entries) > b.MaxEntries {
		return bound("entries", "%d entries, more than the bound of %d", len(entries), b.MaxEntries)
	}
	for i := range entries {
		if err := b.checkEntry(&entries[i]); err != nil {
			return prefixField("entries["+strconv.Itoa(i)+"]", err)
		}
	}
	return nil
}

func (b Bounds) checkEntry(e *Entry) error {
	if e.Key == "" {
		return invalid("key", "must not be empty")
	}
	if len(e.Key) > b.MaxKeyBytes {
		return bound("key", "%d bytes, longer than the bound of %d", len(e.Key), b.MaxKeyBytes)
	}
	if err := e.Limit.Validate(); err != nil {
		return prefixField("limit", err)
	}
	if e.Limit.Algorithm == SlidingLog && e.Limit.Uses > b.MaxLogUses {
		return bound("limit.uses", "%d, more than the sliding-log bound of %d (use sliding-window or token-bucket)", e.Limit.Uses, b.MaxLogUses)
	}
	if e.Cost < 0 {
		return invalid("cost", "must not be negative, got %d", e.Cost)
	}
	if e.Cost > e.Limit.Uses {
		return invalid("cost", "%d is more than the limit's %d uses, so it could never pass", e.Cost, e.Limit.Uses)
	}
	return nil
}

// cost returns the entry's cost with 0 read as 1.
func (e *Entry) cost() int64 {
	if e.Cost == 0 {
		return 1
	}
	return e.Cost
}

// String is for logs and test failures.
func (e Entry) String() string {
	return fmt.Sprintf("%q %v cost %d", e.Key, e.Limit, e.cost())
}
