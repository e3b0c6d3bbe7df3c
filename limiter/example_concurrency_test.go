package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// At most 2 exports of a tenant in flight: each takes a slot and gives it
// back when done; a slot whose holder crashed frees itself after 10
// minutes (its TTL).
func ExampleAcquire() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 9, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := context.Background()

	first, v, _ := limiter.Acquire(ctx, store, "exports:acme", 2, 10*time.Minute)
	fmt.Println("first:", v.Allowed, v.Remaining, "left")
	_, v, _ = limiter.Acquire(ctx, store, "exports:acme", 2, 10*time.Minute)
	fmt.Println("second:", v.Allowed, v.Remaining, "left")
	clock.Advance(time.Minute)
	_, v, _ = limiter.Acquire(ctx, store, "exports:acme", 2, 10*time.Minute)
	fmt.Println("third:", v.Allowed, "retry in", v.RetryAfter) // the first slot's TTL, at the latest

	if err := first(ctx); err != nil { // the first export is done
		fmt.Println(err)
	}
	_, v, _ = limiter.Acquire(ctx, store, "exports:acme", 2, 10*time.Minute)
	fmt.Println("after a release:", v.Allowed)
	// Output:
	// first: true 1 left
	// second: true 0 left
	// third: false retry in 9m0s
	// after a release: true
}
