package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// An LLM gateway learns a request's token count only from the response:
// it checks that the budget has room before the request, and debits the
// tokens the response reports after it, whatever the budget says. A
// budget of 10,000 tokens a minute goes negative on a large answer, and
// the next request waits until it has refilled.
func Example_debit() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := context.Background()
	tokens, _ := limiter.ParseLimit("token-bucket:10000/1m")
	key := "llm:team-7"
	for i, used := range []int64{4000, 9000, 500} {
		before, _ := limiter.Peek(ctx, store, key, tokens)
		if !before.Allowed {
			fmt.Printf("request %d: refused, retry in %v\n", i+1, before.RetryAfter)
			clock.Advance(before.RetryAfter)
		}
		// ... the request runs; its response reports `used` tokens ...
		v, err := store.ConsumeMany(ctx, []limiter.Entry{{Key: key, Limit: tokens, Cost: used, Debit: true}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("request %d: debited %d, budget exceeded before: %v, %d left\n", i+1, used, !v.Allowed, v.Remaining)
	}
	// Output:
	// request 1: debited 4000, budget exceeded before: false, 6000 left
	// request 2: debited 9000, budget exceeded before: false, 0 left
	// request 3: refused, retry in 18.006s
	// request 3: debited 500, budget exceeded before: false, 0 left
}

// A token bucket whose capacity is set apart from its rate: 100 requests
// a second, with bursts of up to 500.
func Example_burst() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := context.Background()
	l, err := limiter.ParseLimit("token-bucket:100/1s,burst=500")
	if err != nil {
		panic(err)
	}
	v, _ := store.ConsumeMany(ctx, []limiter.Entry{{Key: "api", Limit: l, Cost: 500}})
	fmt.Println(l, "- 500 at once:", v.Allowed)
	v, _ = limiter.Consume(ctx, store, "api", l)
	fmt.Println("one more: ", v.Allowed, "retry in", v.RetryAfter)
	clock.Advance(time.Second)
	v, _ = store.ConsumeMany(ctx, []limiter.Entry{{Key: "api", Limit: l, Cost: 100}})
	fmt.Println("a second later, 100:", v.Allowed, v.Remaining, "left")
	// Output:
	// token-bucket:100/1s,burst=500 - 500 at once: true
	// one more:  false retry in 10ms
	// a second later, 100: true 0 left
}
