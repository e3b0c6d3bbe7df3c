package storetest

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Vector is a step table for one counter: a limit and the calls made on
// one fresh key at instants relative to a base, each with the outcome the
// algorithm's definition gives (derived by hand from DESIGN.md, not by
// running the code). The pure functions of package limiter, the Memory
// store, and the Lua and SQL versions in the adapters all run the same
// vectors, so the arithmetic cannot drift between stores.
type Vector struct {
	// Name identifies the vector in failures: "sliding-log/fill-and-wait".
	Name string
	// Limit is the limit of every step (Step.Uses may override its Uses).
	Limit limiter.Limit
	// Start, when not 0, is the base instant (Unix µs): a vector at a
	// named instant (a leap February, a daylight-saving day).
	Start int64
	// Steps run in order; their At never decreases.
	Steps []Step
}

// Step is one call of a vector.
type Step struct {
	// At is the instant of the call in µs after the vector's base.
	At int64
	// Op is "consume" (decide and, when allowed, record), "peek"
	// (decide only), "debit" (a debit, Entry.Debit: decide and record
	// whatever the outcome) or "peek-debit" (what the debit would answer,
	// recording nothing).
	Op string
	// Cost is the uses the call takes, at least 1 (a debit's may pass
	// the limit's Uses).
	Cost int64
	// Uses, when not 0, replaces the vector's Limit.Uses for this call
	// (a token bucket whose rule changed between calls).
	Uses int64
	// Want is the outcome: Allowed, Remaining, Wait in µs (0 when
	// allowed) and Reset in µs after the base (not after At).
	Want limiter.Outcome
	// Of is, for an OpRelease step (SlotVectors), the step (1-based)
	// whose call it gives back.
	Of int
}

// Op values of a Step.
const (
	OpConsume   = "consume"
	OpPeek      = "peek"
	OpDebit     = "debit"
	OpPeekDebit = "peek-debit"
)

// LimitAt returns the limit that applies to step s of v.
func (v Vector) LimitAt(s Step) limiter.Limit {
	l := v.Limit
	if s.Uses != 0 {
		l.Uses = s.Uses
	}
	return l
}

// EntryAt returns the entry step s of v makes on key: its limit, cost
// and, for a debit, Debit set.
func (v Vector) EntryAt(key string, s Step) limiter.Entry {
	return limiter.Entry{Key: key, Limit: v.LimitAt(s), Cost: s.Cost, Debit: s.Debit()}
}

// Debit reports whether the step is a debit (OpDebit or OpPeekDebit).
func (s Step) Debit() bool { return s.Op == OpDebit || s.Op == OpPeekDebit }

// Peek reports whether the step records nothing (OpPeek or OpPeekDebit).
func (s Step) Peek() bool { return s.Op == OpPeek || s.Op == OpPeekDebit }

// epoch2024 is 2024-01-01T00:00:00Z in Unix µs.
const epoch2024 = 1704067200_000_000

// Base returns the instant (Unix µs) RunVectors runs v from: the first
// multiple of v's window at or after 2024-01-01. A sliding window aligns
// its fixed windows to multiples of the window on the store's clock, so
// the offsets of a vector mean the same thing only from an aligned base.
// (For the 292-year window that is 2262-04-11.)
//
// A vector with a Start runs from it.
func (v Vector) Base() int64 {
	if v.Start != 0 {
		return v.Start
	}
	w := limiter.Micros(v.Limit.Window)
	if w <= 0 {
		return epoch2024
	}
	b := epoch2024 / w * w
	if b < epoch2024 {
		b += w
	}
	return b
}

// WantVerdict returns what a store's Verdict says for s's wanted outcome
// when the call ran at base+s.At: Allowed and Remaining; when allowed,
// ResetAt at base+Want.Reset; when refused, RetryAt rounded up to a whole
// millisecond (the store contract) and RetryAfter from the call to it.
// Release and Failure are left nil.
func (s Step) WantVerdict(base int64) limiter.Verdict {
	v := limiter.Verdict{Allowed: s.Want.Allowed, Remaining: s.Want.Remaining}
	now := base + s.At
	if s.Want.Allowed {
		v.ResetAt = time.UnixMicro(base + s.Want.Reset)
		return v
	}
	at := ceilMilli(now + s.Want.Wait)
	v.RetryAt = time.UnixMicro(at)
	v.RetryAfter = limiter.MicrosDuration(at - now)
	return v
}

func ceilMilli(us int64) int64 {
	if us > math.MaxInt64-1000 {
		return us
	}
	return (us + 999) / 1000 * 1000
}

// RunVectors runs every vector as a subtest. For each step, decide makes
// the call of step on a key of its own for v (a fresh one per vector),
// with its store's clock reading base+step.At µs, and returns the raw
// outcome with Reset on that clock (not relative to base). base is
// v.Base(). A store that cannot pin its clock cannot run the vectors.
//
// A failure reads:
//
//	vector "token-bucket/refill" step 3: consume(cost 1 at +1000µs) = {...}, want {...}
func RunVectors(t *testing.T, decide func(t *testing.T, v Vector, base int64, step Step) limiter.Outcome) {
	t.Helper()
	for _, v := range Vectors {
		t.Run(v.Name, func(t *testing.T) {
			base := v.Base()
			for i, s := range v.Steps {
				got := decide(t, v, base, s)
				got.Reset -= base
				if got != s.Want {
					t.Errorf("vector %q step %d: %s = %s, want %s", v.Name, i+1, s, showOutcome(got), showOutcome(s.Want))
				}
			}
		})
	}
}

// RunVerdictVectors is RunVectors for a store that answers with Verdicts
// (a whole Store with a pinned clock, such as limiter.Memory with a
// FakeClock standing at base+step.At): each verdict must equal
// step.WantVerdict(base), Release and Failure aside.
func RunVerdictVectors(t *testing.T, decide func(t *testing.T, v Vector, base int64, step Step) limiter.Verdict) {
	t.Helper()
	for _, v := range Vectors {
		t.Run(v.Name, func(t *testing.T) {
			base := v.Base()
			for i, s := range v.Steps {
				got := decide(t, v, base, s)
				want := s.WantVerdict(base)
				if !sameVerdict(got, want) {
					t.Errorf("vector %q step %d: %s = %s, want %s", v.Name, i+1, s, showVerdict(got, base), showVerdict(want, base))
				}
			}
		})
	}
}

func sameVerdict(a, b limiter.Verdict) bool {
	return a.Allowed == b.Allowed && a.Remaining == b.Remaining && a.RetryAfter == b.RetryAfter &&
		a.RetryAt.Equal(b.RetryAt) && a.ResetAt.Equal(b.ResetAt)
}

// String writes the call as failures show it: "consume(cost 1 at +1500µs)".
func (s Step) String() string {
	uses := ""
	if s.Uses != 0 {
		uses = fmt.Sprintf(" uses %d", s.Uses)
	}
	if s.Op == OpRelease {
		return fmt.Sprintf("release(step %d at +%dµs)", s.Of, s.At)
	}
	return fmt.Sprintf("%s(cost %d%s at +%dµs)", s.Op, s.Cost, uses, s.At)
}

func showOutcome(o limiter.Outcome) string {
	return fmt.Sprintf("{Allowed:%v Remaining:%d Wait:%dµs Reset:+%dµs}", o.Allowed, o.Remaining, o.Wait, o.Reset)
}

func showVerdict(v limiter.Verdict, base int64) string {
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("+%dµs", t.UnixMicro()-base)
	}
	return fmt.Sprintf("{Allowed:%v Remaining:%d RetryAfter:%dµs RetryAt:%s ResetAt:%s}",
		v.Allowed, v.Remaining, v.RetryAfter.Microseconds(), rel(v.RetryAt), rel(v.ResetAt))
}
