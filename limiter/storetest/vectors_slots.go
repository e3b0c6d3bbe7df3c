package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// OpRelease is a Step that gives back the call of an earlier step (Of)
// with its verdict's Release; it decides nothing (its Want is zero).
const OpRelease = "release"

func acquire(at, cost int64, want limiter.Outcome) Step {
	return Step{At: at, Op: OpConsume, Cost: cost, Want: want}
}

func release(at int64, of int) Step { return Step{At: at, Op: OpRelease, Of: of} }

// SlotVectors are the test vectors of concurrency limits (slots with a
// TTL, limiter.Concurrency): acquire, refuse, release, a TTL ending, a
// release given twice. Their release steps need a store that sets
// Verdict.Release, so they run apart from Vectors, with RunSlotVectors.
// A slot taken at t is held while now < t+TTL or until released; a
// refusal waits until enough of the held slots' TTLs end (a release may
// free one sooner); Reset is when the newest held slot's TTL ends.
var SlotVectors = []Vector{
	{
		Name:  "concurrency/acquire-refuse-release",
		Limit: lim(limiter.Concurrency, 2, 10*time.Millisecond),
		Steps: []Step{
			acquire(0, 1, ok(1, 10*ms)),
			acquire(1*ms, 1, ok(0, 11*ms)),
			acquire(2*ms, 1, no(0, 8*ms, 11*ms)), // the slot taken at 0 frees at 10ms
			peek(2*ms, 1, no(0, 8*ms, 11*ms)),
			release(3*ms, 1),
			acquire(3*ms, 1, ok(0, 13*ms)), // step 1's slot is free again
			release(4*ms, 1),               // twice: frees nothing more
			acquire(4*ms, 1, no(0, 7*ms, 13*ms)),
			acquire(11*ms, 1, ok(0, 21*ms)), // step 2's TTL ended: its holder vanished
			release(12*ms, 6),
			acquire(12*ms, 1, ok(0, 22*ms)),
			acquire(12*ms, 1, no(0, 9*ms, 22*ms)), // held: 11ms and 12ms; the first ends at 21ms
		},
	},
	{
		Name:  "concurrency/a-cost-takes-several-slots",
		Limit: lim(limiter.Concurrency, 3, 10*time.Millisecond),
		Steps: []Step{
			acquire(0, 2, ok(1, 10*ms)),
			acquire(1*ms, 2, no(1, 9*ms, 10*ms)), // 2+2 > 3: the two slots of 0 free at 10ms
			acquire(1*ms, 1, ok(0, 11*ms)),
			release(2*ms, 1), // gives back both of its slots
			acquire(2*ms, 2, ok(0, 12*ms)),
			acquire(5*ms, 1, no(0, 6*ms, 12*ms)), // 3 held: the one of 1ms frees first, at 11ms
			acquire(11*ms, 1, ok(0, 21*ms)),
		},
	},
	{
		Name:  "concurrency/a-late-release-frees-nothing",
		Limit: lim(limiter.Concurrency, 1, 5*time.Millisecond),
		Steps: []Step{
			acquire(0, 1, ok(0, 5*ms)),
			acquire(4999, 1, no(0, 1, 5*ms)),
			acquire(5*ms, 1, ok(0, 10*ms)), // step 1's slot reached its TTL
			release(6*ms, 1),               // step 1's slot is gone: step 3's stays held
			acquire(6*ms, 1, no(0, 4*ms, 10*ms)),
			release(7*ms, 3),
			acquire(7*ms, 1, ok(0, 12*ms)),
		},
	},
}

// RunSlotVectors runs SlotVectors as subtests. decide makes a consume or
// peek step's call as RunVerdictVectors' does, on a key of its own for
// v, with the store's clock reading base+step.At, and with a context
// made by limiter.WithRelease: an allowed consume must carry a Release.
// A release step calls the Release of the verdict of step Of (1-based),
// with the store's clock left where the previous step put it.
func RunSlotVectors(t *testing.T, decide func(t *testing.T, v Vector, base int64, step Step) limiter.Verdict) {
	t.Helper()
	for _, v := range SlotVectors {
		t.Run(v.Name, func(t *testing.T) {
			base := v.Base()
			verdicts := make([]limiter.Verdict, len(v.Steps))
			for i, s := range v.Steps {
				if s.Op == OpRelease {
					rel := verdicts[s.Of-1].Release
					if rel == nil {
						t.Fatalf("vector %q step %d: step %d's verdict has no Release", v.Name, i+1, s.Of)
					}
					if err := rel(context.Background()); err != nil {
						t.Fatalf("vector %q step %d: release of step %d: %v", v.Name, i+1, s.Of, err)
					}
					continue
				}
				got := decide(t, v, base, s)
				verdicts[i] = got
				want := s.WantVerdict(base)
				if !sameVerdict(got, want) {
					t.Errorf("vector %q step %d: %s = %s, want %s", v.Name, i+1, s, showVerdict(got, base), showVerdict(want, base))
				}
				if got.Allowed && !s.Peek() && got.Release == nil {
					t.Errorf("vector %q step %d: an allowed acquire without a Release", v.Name, i+1)
				}
			}
		})
	}
}
