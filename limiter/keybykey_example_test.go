package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// A store of one's own that can only count one key at a time (here a
// map of cooldowns: one use per key per window, its own clock) becomes a
// whole limiter.Store with NewKeyByKey. A batch is counted key by key and
// stops at the first refusal; the use counted before it is given back.
func ExampleNewKeyByKey() {
	var mu sync.Mutex
	now := time.Date(2024, 1, 1, 9, 0, 0, 0, time.UTC)
	until := map[string]time.Time{} // key -> end of its cooldown
	consume := func(ctx context.Context, e limiter.Entry) (limiter.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		if end, ok := until[e.Key]; ok && now.Before(end) {
			return limiter.Verdict{RetryAfter: end.Sub(now), RetryAt: end}, nil
		}
		until[e.Key] = now.Add(e.Limit.Window)
		v := limiter.Verdict{Allowed: true, ResetAt: until[e.Key]}
		if limiter.WantsRelease(ctx) {
			v.Release = func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				delete(until, e.Key)
				return nil
			}
		}
		return v, nil
	}
	store, err := limiter.NewKeyByKey(consume, limiter.KeyByKeyConfig{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	daily := limiter.Limit{Uses: 1, Window: 24 * time.Hour}
	hourly := limiter.Limit{Uses: 1, Window: time.Hour}
	limiter.Consume(ctx, store, "claim:ann:daily", daily)
	now = now.Add(time.Hour)
	v, _ := store.ConsumeMany(ctx, []limiter.Entry{
		{Key: "claim:ann:hourly", Limit: hourly},
		{Key: "claim:ann:daily", Limit: daily},
	})
	fmt.Printf("hourly+daily: allowed %v, retry in %v\n", v.Allowed, v.RetryAfter)
	v, _ = limiter.Consume(ctx, store, "claim:ann:hourly", hourly)
	fmt.Printf("hourly alone: allowed %v (its use in the refused batch was given back)\n", v.Allowed)
	// Output:
	// hourly+daily: allowed false, retry in 23h0m0s
	// hourly alone: allowed true (its use in the refused batch was given back)
}
