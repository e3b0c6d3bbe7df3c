package storetest

import (
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// The vectors of debits (usage recorded after the fact, Entry.Debit) and
// of token buckets with a Burst apart from their rate. A debit is counted
// whatever the budget says; its outcome is allowed when the budget was
// not already exceeded before it (more than Uses counted, or a bucket
// below zero), its Remaining is what is left after it (at least 0), and
// when refused its Wait is until a call of one use passes, counting the
// debit. Every figure was worked out by hand; the comments show how.

func debit(at, cost int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpDebit, Cost: cost, Want: want}
}

func peekDebit(at, cost int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpPeekDebit, Cost: cost, Want: want}
}

func burst(l limiter.Limit, b int64) limiter.Limit {
	l.Burst = b
	return l
}

// DebitVectors are the debit and burst vectors, also part of Vectors.
var DebitVectors = []Vector{
	{
		Name:  "sliding-log/debit-is-one-use-of-its-cost",
		Limit: lim(limiter.SlidingLog, 3, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 1, ok(2, 10*ms)),
			debit(1*ms, 4, ok(0, 11*ms)), // 1 counted, not over 3: allowed; 5 now
			// 5+1-3 = 3 must leave: the 1 at 0 and the 4 at 1ms, at 11ms.
			consume(2*ms, 1, no(0, 9*ms, 11*ms)),
			// 5 > 3 already: refused, and counted: 7, of which 5 must
			// leave for one more use: the 1 and the 4, at 11ms.
			peekDebit(3*ms, 2, no(0, 8*ms, 13*ms)),
			debit(3*ms, 2, no(0, 8*ms, 13*ms)),
			peek(10*ms, 1, no(0, 1*ms, 13*ms)), // the use at 0 left: 6, the 4 at 1ms must go
			consume(11*ms, 1, ok(0, 21*ms)),    // the 4 left: 2+1 = 3
			debit(12*ms, 5, ok(0, 22*ms)),      // 3 is not over 3: allowed; 8 now
			// 8 > 3: refused; 9, of which 7 must leave: 2 (3ms), 1 (11ms),
			// 5 (12ms): at 22ms.
			debit(12*ms, 1, no(0, 10*ms, 22*ms)),
			// The 2 at 3ms left: 7 > 3; 10, of which 8 must leave: 1, 5, 1
			// and then this debit itself, a whole window on.
			debit(13*ms, 3, no(0, 10*ms, 23*ms)),
			consume(23*ms, 1, ok(2, 33*ms)), // everything left
		},
	},
	{
		Name:  "sliding-window/debit-past-the-limit",
		Limit: lim(limiter.SlidingWindow, 10, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 4, ok(6, 20*ms)),
			debit(5*ms, 8, ok(0, 20*ms)), // 4 counted, not over 10: Curr 12
			// Curr 12: one more only once the window is the previous one
			// and ceil(12*(w-e)/w) <= 9: 12*(w-e) <= 90000, e >= 2500.
			peek(6*ms, 1, no(0, 6500, 20*ms)),
			// 12 > 10: refused; Curr 15: ceil(15*(w-e)/w) <= 9 from e = 4000.
			debit(7*ms, 3, no(0, 7*ms, 20*ms)),
			consume(14*ms, 1, ok(0, 30*ms)), // Prev 15 weighs ceil(15*6000/10000) = 9
			debit(15*ms, 5, ok(0, 30*ms)),   // 1 + ceil(15*5000/10000) = 9, not over: Curr 6
			// 6 + 8 = 14 > 10: refused; Curr 7: 7+1 <= 10, so the previous
			// window must decay to 2: 15*(w-e) <= 20000, e >= 8667.
			debit(15*ms, 1, no(0, 3667, 30*ms)),
			consume(35*ms, 1, ok(9, 50*ms)), // two windows on: both counters empty
		},
	},
	{
		Name:  "token-bucket/debit-goes-negative",
		Limit: lim(limiter.TokenBucket, 4, 20*time.Millisecond), // one token per 5ms
		Steps: []Step{
			consume(0, 2, ok(2, 10*ms)),
			// 10ms of debt is within the 20ms the bucket holds: allowed;
			// the arrival time moves 25ms on, to 35ms: 7 tokens owed.
			debit(0, 5, ok(0, 35*ms)),
			// 34ms of debt + 5ms for one more is 19ms past the 20ms.
			consume(1*ms, 1, no(0, 19*ms, 35*ms)),
			// 33ms of debt: below zero, refused; counted: 38ms, and one
			// more use passes when 38+5-20 = 23ms have gone.
			debit(2*ms, 1, no(0, 23*ms, 40*ms)),
			peek(25*ms, 1, ok(0, 45*ms)), // 15ms of debt + 5 = 20
			consume(25*ms, 1, ok(0, 45*ms)),
			consume(45*ms, 1, ok(3, 50*ms)), // full again
		},
	},
	{
		Name:  "token-bucket/burst-above-the-rate",
		Limit: burst(lim(limiter.TokenBucket, 2, 20*time.Millisecond), 5), // one per 10ms, 5 at once
		Steps: []Step{
			consume(0, 5, ok(0, 50*ms)), // 50ms of debt: the whole burst
			consume(0, 1, no(0, 10*ms, 50*ms)),
			consume(10*ms, 1, ok(0, 60*ms)),
			peek(35*ms, 3, no(2, 5*ms, 60*ms)), // 25ms of debt + 30 is 5 past 50
			consume(40*ms, 3, ok(0, 90*ms)),
			consume(200*ms, 1, ok(4, 210*ms)), // full again: 5 less the one
		},
	},
	{
		Name:  "token-bucket/burst-below-the-rate",
		Limit: burst(lim(limiter.TokenBucket, 10, 10*time.Millisecond), 2), // one per 1ms, 2 at once
		Steps: []Step{
			consume(0, 2, ok(0, 2*ms)),
			consume(0, 1, no(0, 1*ms, 2*ms)),
			consume(1*ms, 1, ok(0, 3*ms)),
			peek(5*ms, 1, ok(1, 6*ms)),
			consume(5*ms, 2, ok(0, 7*ms)),
		},
	},
	{
		Name:  "token-bucket/debit-with-a-burst",
		Limit: burst(lim(limiter.TokenBucket, 2, 20*time.Millisecond), 5), // one per 10ms, 5 at once
		Steps: []Step{
			debit(0, 7, ok(0, 70*ms)), // a debit passes the burst too: 70ms of debt
			// 60ms of debt is past the 50ms the bucket holds: refused;
			// 80ms on, one more passes when 70+10-50 = 30ms have gone.
			debit(10*ms, 1, no(0, 30*ms, 80*ms)),
			consume(40*ms, 1, ok(0, 90*ms)),
			consume(40*ms, 1, no(0, 10*ms, 90*ms)),
			peek(90*ms, 5, ok(0, 140*ms)),
		},
	},
	{
		Name:  "fixed-window/debit-until-the-window-ends",
		Limit: lim(limiter.FixedWindow, 3, 10*time.Millisecond),
		Steps: []Step{
			consume(0, 2, ok(1, 10*ms)),
			debit(1*ms, 3, ok(0, 10*ms)), // 2 is not over 3: count 5
			consume(2*ms, 1, no(0, 8*ms, 10*ms)),
			peekDebit(3*ms, 1, no(0, 7*ms, 10*ms)), // 5 > 3, recording nothing
			debit(3*ms, 1, no(0, 7*ms, 10*ms)),     // count 6
			consume(10*ms, 3, ok(0, 20*ms)),        // a new window
			debit(10*ms, 100, ok(0, 20*ms)),        // 3 is not over 3
			peek(19*ms, 1, no(0, 1*ms, 20*ms)),
			consume(20*ms, 1, ok(2, 30*ms)),
		},
	},
}

func init() { Vectors = append(Vectors, DebitVectors...) }
