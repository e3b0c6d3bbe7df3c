package storetest

import (
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// Shorthands for the table below. Every figure was worked out by hand
// from the definitions (DESIGN.md and limiter/algorithm.go); the comment
// beside a step shows the arithmetic. Times are µs after the base.

func ok(remaining, reset int64) limiter.Outcome {
	return limiter.Outcome{Allowed: true, Remaining: remaining, Reset: reset}
}

func no(remaining, wait, reset int64) limiter.Outcome {
	return limiter.Outcome{Remaining: remaining, Wait: wait, Reset: reset}
}

func consume(at, cost int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpConsume, Cost: cost, Want: want}
}

func peek(at, cost int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpPeek, Cost: cost, Want: want}
}

func consumeUses(at, cost, uses int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpConsume, Cost: cost, Uses: uses, Want: want}
}

func peekUses(at, cost, uses int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpPeek, Cost: cost, Uses: uses, Want: want}
}

const (
	ms = 1000 // µs
	// w292 is the largest window, 9,223,372,036,854 ms, in µs.
	w292 = int64(limiter.MaxWindow / time.Microsecond)
	// maxUses is the most uses a limit can hold.
	maxUses = int64(^uint64(0) >> 1)
)

func lim(alg limiter.Algorithm, uses int64, window time.Duration) limiter.Limit {
	return limiter.Limit{Algorithm: alg, Uses: uses, Window: window}
}

// Vectors are the test vectors of the four rate algorithms (FixedVectors,
// in vectors_fixed.go, are appended to them); the concurrency limits'
// are SlotVectors, which need releases.
var Vectors = []Vector{
	// ---- sliding log: a call made at t counts while now < t+w ----
	{
		Name:  "sliding-log/fill-then-wait-for-the-oldest",
		Limit: lim(limiter.SlidingLog, 3, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(2, 10*ms)),
			consume(1*ms, 1, ok(1, 11*ms)),
			consume(2*ms, 1, ok(0, 12*ms)),
			consume(2500, 1, no(0, 7500, 12*ms)), // the use at 0 leaves at 10ms
			peek(9999, 1, no(0, 1, 12*ms)),       // the refusal recorded nothing
			consume(10*ms, 1, ok(0, 20*ms)),      // 0 left at 0+10ms: 1ms, 2ms, 10ms
			consume(10500, 1, no(0, 500, 20*ms)), // the oldest is now 1ms: leaves at 11ms
			consume(22*ms, 1, ok(2, 32*ms)),      // everything left
		},
	},
	{
		Name:  "sliding-log/cost-waits-for-enough-of-the-oldest",
		Limit: lim(limiter.SlidingLog, 5, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 2, ok(3, 10*ms)),
			consume(3*ms, 2, ok(1, 13*ms)),
			consume(4*ms, 3, no(1, 6*ms, 13*ms)), // 4+3-5 = 2 must leave: the 2 at 0, at 10ms
			peek(4*ms, 1, ok(0, 14*ms)),
			consume(5*ms, 5, no(1, 8*ms, 13*ms)), // 4 must leave: both calls, the last at 13ms
			consume(5*ms, 1, ok(0, 15*ms)),
			consume(10*ms, 1, ok(1, 20*ms)), // the 2 at 0 left: 2+1+1 = 4 of 5
		},
	},
	{
		Name:  "sliding-log/same-microsecond-in-a-1ms-window",
		Limit: lim(limiter.SlidingLog, 2, time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(1, 1*ms)),
			consume(0, 1, ok(0, 1*ms)),
			consume(0, 1, no(0, 1*ms, 1*ms)),
			peek(999, 1, no(0, 1, 1*ms)),
			consume(1*ms, 1, ok(1, 2*ms)),
			consume(1999, 1, ok(0, 2999)),
			consume(1999, 1, no(0, 1, 2999)), // the use at 1ms leaves at 2ms
			consume(2*ms, 1, ok(0, 3*ms)),
		},
	},
	{
		Name:  "sliding-log/292-year-window",
		Limit: lim(limiter.SlidingLog, 2, limiter.MaxWindow),
		Steps: []Step{
			consume(0, 1, ok(1, w292)),
			consume(1, 1, ok(0, w292+1)),
			consume(2, 1, no(0, w292-2, w292+1)),
			consume(w292, 1, ok(0, 2*w292)), // the use at 0 left
			consume(w292, 1, no(0, 1, 2*w292)),
		},
	},

	// ---- sliding window: Curr counts [Start, Start+w), Prev the window
	// before; used = Curr + ceil(Prev*(w-e)/w) with e = now-Start; Start a
	// multiple of w; Reset Start+2w when allowed ----
	{
		Name:  "sliding-window/previous-window-weight",
		Limit: lim(limiter.SlidingWindow, 10, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 4, ok(6, 20*ms)),
			consume(5*ms, 4, ok(2, 20*ms)),
			// Curr 8: 8+3 > 10, and this window alone can take 3 only
			// once it is the previous one: 8*(w-e)/w <= 7 at e = w-8750.
			consume(9*ms, 3, no(2, 2250, 20*ms)),
			// A window on: Prev 8, Curr 0, e 1249: ceil(8*8751/10000) = 8;
			// the weight is 7 from e = 1250.
			peek(11249, 3, no(2, 1, 20*ms)),
			consume(11250, 3, ok(0, 30*ms)), // ceil(8*8750/10000) = 7, 7+3 = 10
			consume(15*ms, 1, ok(2, 30*ms)), // Curr 3 + ceil(8*5000/10000) = 4
			// Curr 4, Prev weight 4: 4+4+3 > 10; need ceil(8*(w-e)/w) <= 3:
			// 8*(w-e) <= 30000, e >= 6250.
			consume(15*ms, 3, no(2, 1250, 30*ms)),
			consume(16250, 3, ok(0, 30*ms)),
			consume(25*ms, 1, ok(5, 40*ms)), // Prev 7: ceil(7*5000/10000) = 4
			consume(45*ms, 1, ok(9, 60*ms)), // two windows on: both counters empty
		},
	},
	{
		Name:  "sliding-window/current-window-alone-full",
		Limit: lim(limiter.SlidingWindow, 4, 10*time.Millisecond),
		Steps: []Step{
			consume(2*ms, 4, ok(0, 20*ms)), // an empty counter aligns Start to 0
			// Curr 4 + 1 > 4: wait for the next window, until
			// ceil(4*(w-e)/w) <= 3: e >= 2500.
			consume(3*ms, 1, no(0, 9500, 20*ms)),
			consume(3*ms, 4, no(0, 17*ms, 20*ms)), // 4 more: the weight must reach 0, at 20ms
			peek(12499, 1, no(0, 1, 20*ms)),       // Prev 4, Curr 0: Reset is Start+w
			consume(12500, 1, ok(0, 30*ms)),
			// Curr 1: 1+4 > 4, so only once this window is the previous one
			// and its weight ceil(1*(w-e)/w) is 0: at 30ms.
			consume(12500, 4, no(0, 17500, 30*ms)),
			consume(30*ms, 4, ok(0, 50*ms)),
		},
	},
	{
		Name:  "sliding-window/1ms-window",
		Limit: lim(limiter.SlidingWindow, 1, time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(0, 2*ms)),
			consume(0, 1, no(0, 2*ms, 2*ms)),
			consume(1500, 1, no(0, 500, 2*ms)), // Prev 1 weighs ceil(1*500/1000) = 1
			consume(2*ms, 1, ok(0, 4*ms)),
		},
	},
	{
		Name:  "sliding-window/292-year-window",
		Limit: lim(limiter.SlidingWindow, 3, limiter.MaxWindow),
		Steps: []Step{
			consume(0, 2, ok(1, 2*w292)),
			// Curr 2 + 2 > 3: next window, once ceil(2*(w-e)/w) <= 1:
			// e >= w/2, at 1.5w.
			consume(1, 2, no(1, 3*w292/2-1, 2*w292)),
			consume(1, 1, ok(0, 2*w292)),
			// Prev 3, e 0: needs ceil(3*(w-e)/w) <= 2, e >= w/3.
			peek(w292, 1, no(0, w292/3, 2*w292)),
			consume(w292, 1, no(0, w292/3, 2*w292)),
		},
	},

	// ---- token bucket (GCRA): each use pushes the arrival time w/U on;
	// a call passes while the arrival time stays within w of now ----
	{
		Name:  "token-bucket/fill-and-refill-one",
		Limit: lim(limiter.TokenBucket, 4, 20*time.Millisecond), // one token per 5ms
		Steps: []Step{
			consume(0, 1, ok(3, 5*ms)),
			consume(0, 3, ok(0, 20*ms)),
			consume(1*ms, 1, no(0, 4*ms, 20*ms)), // one token back at 5ms
			peek(4999, 1, no(0, 1, 20*ms)),
			consume(5*ms, 1, ok(0, 25*ms)),
			consume(12*ms, 2, no(1, 3*ms, 25*ms)), // 1.4 tokens back: the 2nd at 15ms
			consume(12*ms, 1, ok(0, 30*ms)),
			consume(50*ms, 1, ok(3, 55*ms)), // full again
		},
	},
	{
		Name:  "token-bucket/fractional-emission-3-per-10ms",
		Limit: lim(limiter.TokenBucket, 3, 10*time.Millisecond), // one per 3333⅓µs
		Steps: []Step{
			consume(0, 1, ok(2, 3334)), // arrival 3333⅓, reported rounded up
			consume(0, 1, ok(1, 6667)),
			consume(0, 1, ok(0, 10*ms)),
			consume(0, 1, no(0, 3334, 10*ms)),
			peek(3333, 1, no(0, 1, 10*ms)), // ⅓µs short
			consume(3334, 1, ok(0, 13334)), // arrival 13333⅓
			consume(6667, 1, ok(0, 16667)), // arrival 16666⅔
			consume(6667, 1, no(0, 3333, 16667)),
			consume(10*ms, 1, ok(0, 20*ms)),
		},
	},
	{
		Name:  "token-bucket/uses-change-between-calls",
		Limit: lim(limiter.TokenBucket, 4, 20*time.Millisecond),
		Steps: []Step{
			consume(0, 4, ok(0, 20*ms)), // arrival 20ms
			// The arrival time stays: at 8 uses per 20ms the bucket is
			// still full, and a token comes back every 2.5ms.
			consumeUses(0, 1, 8, no(0, 2500, 20*ms)),
			consumeUses(2500, 1, 8, ok(0, 22500)),
			// At 2 per 20ms one token is 10ms: 20ms of debt fills it.
			consumeUses(2500, 1, 2, no(0, 10*ms, 22500)),
			consumeUses(12500, 1, 2, ok(0, 32500)),
			consumeUses(12500, 1, 3, no(0, 6667, 32500)), // 20ms/3 = 6666⅔
			consumeUses(19167, 1, 3, ok(0, 39167)),       // arrival 39166⅔
			// Rescaled to 4 uses the ⅔µs is written in quarters, rounded
			// down: 39166½; the debt 19999.5µs over 15000µs is 4999.5µs.
			peekUses(19167, 1, 4, no(0, 5*ms, 39167)),
			consumeUses(24167, 1, 4, ok(0, 44167)), // arrival 44166½
		},
	},
	{
		Name:  "token-bucket/same-microsecond-in-a-1ms-window",
		Limit: lim(limiter.TokenBucket, 2, time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(1, 500)),
			consume(0, 1, ok(0, 1*ms)),
			consume(0, 1, no(0, 500, 1*ms)),
			consume(500, 1, ok(0, 1500)),
			consume(2*ms, 1, ok(1, 2500)),
		},
	},
	{
		Name:  "token-bucket/292-year-window",
		Limit: lim(limiter.TokenBucket, 2, limiter.MaxWindow), // one per 146 years
		Steps: []Step{
			consume(0, 1, ok(1, w292/2)),
			consume(0, 1, ok(0, w292)),
			consume(1, 1, no(0, w292/2-1, w292)),
			consume(w292/2, 1, ok(0, 3*w292/2)),
		},
	},
	{
		Name:  "token-bucket/largest-uses",
		Limit: lim(limiter.TokenBucket, maxUses, time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(maxUses-1, 1)),
			consume(0, maxUses-1, ok(0, 1*ms)),
			consume(0, 1, no(0, 1, 1*ms)),
			// 1µs refills maxUses/1000 = 9223372036854775.807 tokens; one
			// is taken and the fraction is not counted.
			consume(1, 1, ok(9223372036854774, 1*ms+1)),
		},
	},
}
