package storetest

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// A token bucket's release after an earlier release of the same bucket
// gives back only what of its own call is still outstanding (see
// limiter.BucketMoves). Four tokens, one per tau: calls of 2 and 2 take
// them all, and the first is released at once, so the second's tokens move
// down to where the first's were and are back in the bucket once it is
// full again. Then the whole capacity is taken and the second is
// released: nothing of it is outstanding, so nothing comes back and a
// fifth call is refused. A store that releases the second by the arrival
// time its receipt names (2 tau later than its tokens now lie) gives back
// up to 2 tau of the capacity just taken, and the fifth call passes.
func testBucketReleaseMoved(s *suite) {
	if s.alg != limiter.TokenBucket {
		s.t.Skip("only a token bucket's releases move the calls after them")
	}
	if s.opts.NoRelease {
		s.t.Skip("the store cannot release")
	}
	tau := max(250*time.Millisecond, 10*s.opts.Slack).Truncate(time.Millisecond)
	l := s.limit(4, 4*tau)
	release := func(v limiter.Verdict, what string) {
		s.t.Helper()
		if v.Release == nil {
			s.t.Fatalf("step %d: %s: an allowed verdict under WithRelease has no Release", s.step, what)
		}
		if err := v.Release(ctx(s.t)); err != nil {
			s.t.Fatalf("step %d: %s: Release: %v", s.step, what, err)
		}
	}
	// The fifth call's refusal holds only until a token refills, tau after
	// the capacity was taken: on a machine too slow to release and call
	// within that, the run says nothing, and the case runs again.
	for attempt := 1; ; attempt++ {
		k := s.key(fmt.Sprintf("k%d", attempt))
		e := func(cost int64) limiter.Entry { return limiter.Entry{Key: k, Limit: l, Cost: cost} }
		first := s.consume(e(2))
		s.want(first, true, "2 of 4")
		second := s.consume(e(2))
		s.want(second, true, "2 more")
		release(first, "the first 2, at once")
		deadline := time.Now().Add(4*tau + 20*s.opts.Slack)
		for !s.peek(e(4)).Allowed {
			if time.Now().After(deadline) {
				s.t.Fatalf("step %d: the bucket is not full %v after the release", s.step, 4*tau+20*s.opts.Slack)
			}
			time.Sleep(5 * time.Millisecond)
		}
		start := time.Now()
		s.want(s.consume(e(4)), true, "the whole capacity, once the bucket is full")
		release(second, "the second 2, its tokens refilled")
		fifth := s.consume(e(1))
		if !fifth.Allowed {
			return
		}
		if took := time.Since(start); took < tau {
			s.t.Fatalf("step %d: a fifth call passed %v after the bucket gave its whole capacity of 4 (one token refills in %v): the second call's release gave back tokens of the calls after it", s.step, took, tau)
		}
		if attempt == 3 {
			s.t.Fatalf("step %d: three runs took longer than a token's refill (%v) to release and call", s.step, tau)
		}
	}
}
