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
	// FixedWindow counts Uses per fixed window aligned to the clock: to
	// multiples of Window since the Unix epoch, or to calendar days,
	// months or years in a time zone (Limit.Calendar, Limit.Zone). A
	// refusal waits for the window's end. One end and one count per key.
	// It is what envoyproxy/ratelimit counts.
	FixedWindow
	// Concurrency holds at most Uses calls in flight: each allowed call
	// takes cost slots until its Verdict.Release frees them, or until
	// Window (the lease's TTL) has passed since it was taken, when its
	// holder vanished. Syntax "concurrency:10/30s". See concurrency.go.
	Concurrency
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{"sliding-log", "sliding-window", "token-bucket", "fixed-window", "concurrency"}

// String returns "sliding-log", "sliding-window", "token-bucket",
// "fixed-window" or "concurrency".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// Valid reports whether a is one of the five algorithms.
func (a Algorithm) Valid() bool { return a < numAlgorithms }

// ParseAlgorithm parses "sliding-log", "sliding-window", "token-bucket",
// "fixed-window" or "concurrency".
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if s == n {
			return Algorithm(i), nil
		}
	}
	return 0, invalid("algorithm", "unknown algorithm %q (want sliding-log, sliding-window, token-bucket, fixed-window or concurrency)", s)
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
	// For a calendar limit it is the unit's nominal length
	// (Calendar.Window: 24h, 30 days, 365 days), which policy headers
	// show; the windows themselves have their real lengths.
	Window time.Duration
	// Calendar, for a FixedWindow limit, aligns the windows to calendar
	// days, months or years in Zone; NoCalendar (the zero value) aligns
	// them to multiples of Window since the Unix epoch (so "1d" is a UTC
	// day).
	Calendar Calendar
	// Zone is the time zone of a calendar limit; nil means UTC. Only
	// calendar limits take one.
	Zone *time.Location
	// Name labels the limit in metrics and logs (see CheckName); "" (the
	// default) is unnamed. It does not name the counter.
	Name string
	// Burst is a token bucket's capacity: how many uses it holds when
	// full, while it refills at Uses per Window. 0 (the default) means
	// Uses. Only a TokenBucket limit takes one; it is at least 1 and may
	// be smaller or larger than Uses ("token-bucket:100/1s,burst=500"
	// allows 500 at once, then 100 a second). Like Uses it does not name
	// the counter: changing it keeps the bucket's state.
	Burst int64
}

// Capacity is the most uses one call can take: a token bucket's Burst
// (Uses when 0), and Uses for the other algorithms.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Uses
}

// Validate reports a bad limit with an *InputError naming the field.
func (l Limit) Validate() error {
	if !l.Algorithm.Valid() {
		return invalid("algorithm", "unknown algorithm %d", l.Algorithm)
	}
	if err := CheckName(l.Name); err != nil {
		return err
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
	if l.Burst < 0 {
		return invalid("burst", "must be at least 1 (or 0 for Uses), got %d", l.Burst)
	}
	if l.Burst != 0 && l.Algorithm != TokenBucket {
		return invalid("burst", "only a token-bucket limit takes a burst, not %v", l.Algorithm)
	}
	if l.Calendar != NoCalendar {
		switch {
		case l.Calendar >= numCalendars:
			return invalid("calendar", "unknown calendar unit %d", l.Calendar)
		case l.Algorithm != FixedWindow:
			return invalid("calendar", "calendar windows need the fixed-window algorithm, not %v", l.Algorithm)
		case l.Window != l.Calendar.Window():
			return invalid("window", "a calendar %s limit's window must be its nominal %s, got %v", l.Calendar, FormatDuration(l.Calendar.Window()), l.Window)
		}
	}
	if l.Zone != nil && l.Zone != time.UTC {
		if l.Calendar == NoCalendar {
			return invalid("zone", "only a calendar limit (d, mo, y) takes a time zone")
		}
		if l.Zone == time.Local || l.Zone.String() == "Local" {
			return invalid("zone", "the process's Local zone differs between nodes; name an IANA zone")
		}
		// A zone travels by its name (the wire, the adapters' keys): it must
		// be one LoadZone knows, not a time.FixedZone of any name.
		if known, err := LoadZone(l.Zone.String()); err != nil {
			return err
		} else if known != l.Zone && !sameZone(known, l.Zone) {
			return invalid("zone", "%q is not the IANA zone of that name", l.Zone.String())
		}
	}
	return nil
}

// String formats l so that ParseLimit reads it back: "5/15m" for a
// sliding log, "token-bucket:100/1s" otherwise, for a calendar limit
// "fixed-window:100/1mo" or "fixed-window:100/1d@Europe/Paris", and for
// a token bucket with a Burst "token-bucket:100/1s,burst=500".
func (l Limit) String() string {
	s := strconv.FormatInt(l.Uses, 10) + "/" + FormatDuration(l.Window)
	if l.Calendar != NoCalendar {
		s = strconv.FormatInt(l.Uses, 10) + "/1" + l.Calendar.String()
		if z := l.ZoneName(); z != "" {
			s += "@" + z
		}
	}
	if l.Algorithm != SlidingLog {
		s = l.Algorithm.String() + ":" + s
	}
	if l.Burst != 0 {
		s += ",burst=" + strconv.FormatInt(l.Burst, 10)
	}
	return s
}

// ParseLimit parses "USES/WINDOW", optionally prefixed by an algorithm and
// a colon: "5/15m", "token-bucket:100/1s", "fixed-window:100/1h". The
// window follows ParseDuration. The algorithm defaults to SlidingLog.
//
// A fixed-window limit also takes a calendar window: "1mo" (a calendar
// month), "1y" (a calendar year), each optionally followed by "@ZONE"
// with an IANA zone name, and "1d@ZONE" (a day from midnight to midnight
// in ZONE): "fixed-window:1000/1mo", "fixed-window:50/1d@Europe/Paris".
// Calendar windows are in UTC unless a zone is named ("1d@UTC" is "1d").
//
// A token bucket takes a capacity apart from its rate after a comma:
// "token-bucket:100/1s,burst=500" (Limit.Burst).
// Errors name the field: "algorithm", "limit", "uses", "window",
// "calendar", "zone" or "burst".
func ParseLimit(s string) (Limit, error) {
	body, opts, hasOpts := strings.Cut(s, ",")
	l, err := parseLimit(body)
	if err != nil || !hasOpts {
		return l, err
	}
	for _, opt := range strings.Split(opts, ",") {
		name, val, _ := strings.Cut(opt, "=")
		if name != "burst" {
			return Limit{}, invalid("limit", "%q: unknown option %q (want burst=N)", s, opt)
		}
		if l.Burst != 0 {
			return Limit{}, invalid("burst", "%q: burst given twice", s)
		}
		b, err := strconv.ParseInt(val, 10, 64)
		if err != nil || b < 1 || val[0] == '+' {
			return Limit{}, invalid("burst", "%q is not a whole number of at least 1", val)
		}
		if l.Algorithm != TokenBucket {
			return Limit{}, invalid("burst", "%q: only a token-bucket limit takes a burst (e.g. token-bucket:%s)", s, body)
		}
		l.Burst = b
	}
	return l, nil
}

// parseLimit parses a limit without its options.
func parseLimit(s string) (Limit, error) {
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
	w, zone, hasZone := strings.Cut(w, "@")
	switch {
	case w == "1mo" || w == "1y" || (hasZone && w == "1d"):
		l.Calendar = CalendarMonth
		switch w {
		case "1y":
			l.Calendar = CalendarYear
		case "1d":
			l.Calendar = CalendarDay
		}
		l.Window = l.Calendar.Window()
	case strings.HasSuffix(w, "mo") || strings.HasSuffix(w, "y"):
		return Limit{}, invalid("calendar", "%q: a calendar window is one unit, 1mo or 1y (1d@ZONE for a day in a zone)", w)
	case hasZone:
		return Limit{}, invalid("zone", "%q: only a calendar window (1d, 1mo, 1y) takes an @ZONE", rest)
	default:
		if l.Window, err = ParseDuration(w); err != nil {
			return Limit{}, err
		}
		return l, nil
	}
	if l.Algorithm != FixedWindow {
		return Limit{}, invalid("calendar", "%q: calendar windows need the fixed-window algorithm (e.g. fixed-window:%s)", s, rest)
	}
	if hasZone {
		if zone == "" {
			return Limit{}, invalid("zone", "%q: empty time zone after @", s)
		}
		loc, err := LoadZone(zone)
		if err != nil {
			return Limit{}, err
		}
		if loc != time.UTC {
			l.Zone = loc
		}
	}
	if l.Calendar == CalendarDay && l.Zone == nil {
		l.Calendar = NoCalendar // a UTC day is a 1d window aligned to the epoch
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
	// Limit.Capacity() (Uses, or a token bucket's Burst), unless Debit.
	Cost int64
	// Debit records Cost as usage after the fact (an LLM gateway learns a
	// request's token count from the response): the uses are counted
	// whatever the budget says, even past the limit and above Uses (at
	// most Bounds.MaxDebit). The verdict's Allowed then reports whether
	// the budget was not already exceeded before the debit (a sliding
	// log, sliding or fixed window holding more than Uses, a token
	// bucket below zero); when it was, RetryAfter and RetryAt say when a
	// call of one use passes again, counting the debit. Later calls are
	// refused until the window has room again: a sliding log keeps the
	// debit as one use of its cost, a token bucket goes negative. A batch
	// is all debits or none, and a debit has no Release.
	Debit bool
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
	// Shadowed says the call would have been refused: the store refused
	// it and shadow mode (see Shadow) let it through, so Allowed is true.
	// Remaining, RetryAfter and RetryAt are the refusal's.
	Shadowed bool
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
	// MaxKeys is the most live counters a store holds (expired ones do
	// not count, even before the sweep drops them); a call that would add
	// one more is refused with an error matching ErrBound. Stores sharing
	// a KeyBudget share the bound. Default 0: no bound.
	MaxKeys int
	// MaxDebit is the largest Cost of a debit (Entry.Debit), which may
	// pass the limit's Uses: one debit can then push a key at most that
	// far past its budget. A sliding-log debit is also bounded by
	// MaxLogUses (the log's memory, in the Redis store, grows with its
	// uses). Default 2^32 (4,294,967,296).
	MaxDebit int64
}

// Defaults for Bounds.
const (
	DefaultMaxKeyBytes = 1024
	DefaultMaxEntries  = 128
	DefaultMaxLogUses  = 100_000
	DefaultMaxDebit    = 1 << 32
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
	if b.MaxDebit <= 0 {
		b.MaxDebit = DefaultMaxDebit
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
		if entries[i].Debit != entries[0].Debit {
			// A debit records whatever the budget says, a consume only
			// when every entry passes: one batch cannot be both.
			return invalid("entries["+strconv.Itoa(i)+"].debit", "a batch is all debits or none (entries[0].debit is %v)", entries[0].Debit)
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
		return bound("limit.uses", "%d, more than the sliding-log bound of %d (use sliding-window, token-bucket or fixed-window)", e.Limit.Uses, b.MaxLogUses)
	}
	if e.Limit.Algorithm == Concurrency {
		if e.Limit.Uses > b.MaxLogUses {
			// Every slot is held apart (its own id and expiry), as a
			// sliding log's uses are.
			return bound("limit.uses", "%d slots, more than the bound of %d (Bounds.MaxLogUses)", e.Limit.Uses, b.MaxLogUses)
		}
		if e.Debit {
			return invalid("debit", "a concurrency limit counts calls in flight, which a debit after the fact cannot hold")
		}
	}
	if e.Cost < 0 {
		return invalid("cost", "must not be negative, got %d", e.Cost)
	}
	if e.Debit {
		if e.Cost > b.MaxDebit {
			return bound("cost", "a debit of %d, more than the bound of %d", e.Cost, b.MaxDebit)
		}
		if e.Limit.Algorithm == SlidingLog && e.Cost > b.MaxLogUses {
			return bound("cost", "a sliding-log debit of %d, more than the sliding-log bound of %d", e.Cost, b.MaxLogUses)
		}
		return nil
	}
	if c := e.Limit.Capacity(); e.Cost > c {
		if c != e.Limit.Uses {
			return invalid("cost", "%d is more than the limit's burst of %d, so it could never pass", e.Cost, c)
		}
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
	if e.Debit {
		return fmt.Sprintf("%q %v debit %d", e.Key, e.Limit, e.cost())
	}
	return fmt.Sprintf("%q %v cost %d", e.Key, e.Limit, e.cost())
}
