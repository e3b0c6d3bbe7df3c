package fallback_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

// The local policy shares a token bucket's burst as it shares its uses,
// and counts a debit whatever its cost.
func TestLocalSharesBurstAndCountsDebits(t *testing.T) {
	st := newSlowStore(t)
	st.failWith(errors.New("down"))
	s, err := fallback.New(st, fallback.Config{Logger: discard, Policy: fallback.Local, Share: func() int { return 2 }, KeepStoreOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx())
	tb := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 4, Window: time.Minute, Burst: 10}
	// A share of the burst is 5: a cost of 5 passes, of 6 never can.
	if v, err := s.ConsumeMany(ctx(), []limiter.Entry{{Key: "b", Limit: tb, Cost: 5}}); err != nil || !v.Allowed || v.Failure == nil {
		t.Fatalf("cost 5 of a shared burst of 10: %+v, %v; want allowed locally", v, err)
	}
	if v, err := s.ConsumeMany(ctx(), []limiter.Entry{{Key: "b2", Limit: tb, Cost: 6}}); err != nil || v.Allowed || v.RetryAfter <= 0 {
		t.Fatalf("cost 6 of a shared burst of 10: %+v, %v; want refused", v, err)
	}
	// A debit of 50 on a share of 2 uses is counted, and then refuses.
	d := []limiter.Entry{{Key: "d", Limit: minute, Cost: 50, Debit: true}}
	if v, err := s.ConsumeMany(ctx(), d); err != nil || !v.Allowed || v.Failure == nil {
		t.Fatalf("a debit of 50: %+v, %v; want counted locally (not exceeded before)", v, err)
	}
	if v, err := limiter.Consume(ctx(), s, "d", minute); err != nil || v.Allowed {
		t.Fatalf("a use after the debit: %+v, %v; want refused", v, err)
	}
}
