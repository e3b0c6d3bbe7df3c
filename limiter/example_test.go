package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// A login limit: 5 attempts per 15 minutes per user, exact (a sliding
// log). A FakeClock stands in for time so the example can show the
// refusal and the window sliding on.
func Example_login() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 9, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := context.Background()
	login, err := limiter.ParseLimit("5/15m")
	if err != nil {
		panic(err)
	}
	for attempt := 1; attempt <= 6; attempt++ {
		v, err := limiter.Consume(ctx, store, "login:ann@example.com", login)
		if err != nil {
			panic(err)
		}
		if v.Allowed {
			fmt.Printf("attempt %d: allowed, %d left\n", attempt, v.Remaining)
		} else {
			fmt.Printf("attempt %d: refused, retry in %v (at %s)\n", attempt, v.RetryAfter, v.RetryAt.UTC().Format("15:04"))
		}
		clock.Advance(time.Minute)
	}
	clock.Advance(10 * time.Minute) // 09:16: the attempts of 09:00 and 09:01 have left
	v, _ := limiter.Consume(ctx, store, "login:ann@example.com", login)
	fmt.Printf("at 09:16: allowed %v, %d left\n", v.Allowed, v.Remaining)
	// Output:
	// attempt 1: allowed, 4 left
	// attempt 2: allowed, 3 left
	// attempt 3: allowed, 2 left
	// attempt 4: allowed, 1 left
	// attempt 5: allowed, 0 left
	// attempt 6: refused, retry in 10m0s (at 09:15)
	// at 09:16: allowed true, 1 left
}

// A per-user API quota: a token bucket of 10 requests refilled at 10 per
// second allows a burst of 10, then one request every 100 ms.
func Example_apiQuota() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := context.Background()
	quota := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 10, Window: time.Second}
	passed := 0
	var last limiter.Verdict
	for range 12 {
		v, err := limiter.Consume(ctx, store, "api:user-42", quota)
		if err != nil {
			panic(err)
		}
		if v.Allowed {
			passed++
		}
		last = v
	}
	fmt.Printf("burst: %d of 12 passed; the last waits %v\n", passed, last.RetryAfter)
	clock.Advance(250 * time.Millisecond) // 2.5 tokens come back
	v, _ := limiter.Consume(ctx, store, "api:user-42", quota)
	fmt.Printf("250ms later: allowed %v, %d left\n", v.Allowed, v.Remaining)
	// Output:
	// burst: 10 of 12 passed; the last waits 100ms
	// 250ms later: allowed true, 1 left
}

// A batch of a per-route and a global limit: a call passes only when both
// pass, and is then counted against both; a refusal counts against none.
func Example_batch() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := context.Background()
	perRoute := limiter.Limit{Uses: 2, Window: time.Second}
	global := limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 3, Window: time.Second}
	call := func(route string) {
		v, err := store.ConsumeMany(ctx, []limiter.Entry{
			{Key: "route:" + route, Limit: perRoute},
			{Key: "global", Limit: global},
		})
		if err != nil {
			panic(err)
		}
		if v.Allowed {
			fmt.Printf("%s: allowed, %d left in the tightest\n", route, v.Remaining)
		} else {
			fmt.Printf("%s: refused, retry in %v\n", route, v.RetryAfter)
		}
	}
	call("/search")
	call("/search")
	call("/search") // the route is full; the global limit is not charged
	call("/home")
	// Now the global limit is full. It is a sliding window: its 3 uses
	// must become the previous window (at 1s) and then weigh at most 2,
	// 3*(1s-e)/1s <= 2, which they do from e = 1/3 s: 1.334s, rounded up
	// to whole milliseconds.
	call("/home")
	// Output:
	// /search: allowed, 1 left in the tightest
	// /search: allowed, 0 left in the tightest
	// /search: refused, retry in 1s
	// /home: allowed, 0 left in the tightest
	// /home: refused, retry in 1.334s
}

// Limits are written "USES/WINDOW", with an optional algorithm.
func ExampleParseLimit() {
	for _, s := range []string{"5/15m", "token-bucket:100/1s", "sliding-window:1000/1.5h", "3/1500", "5/1w"} {
		l, err := limiter.ParseLimit(s)
		var ie *limiter.InputError
		if errors.As(err, &ie) {
			fmt.Printf("%-26q error on %s: %v\n", s, ie.Field, err)
			continue
		}
		fmt.Printf("%-26q %v, %d per %v; String() %q\n", s, l.Algorithm, l.Uses, l.Window, l)
	}
	// Output:
	// "5/15m"                    sliding-log, 5 per 15m0s; String() "5/15m"
	// "token-bucket:100/1s"      token-bucket, 100 per 1s; String() "token-bucket:100/1s"
	// "sliding-window:1000/1.5h" sliding-window, 1000 per 1h30m0s; String() "sliding-window:1000/90m"
	// "3/1500"                   sliding-log, 3 per 1.5s; String() "3/1500ms"
	// "5/1w"                     error on window: limiter: window: "1w" is not a duration (a number of ms, or a number with ms, s, m, h or d, e.g. 15m)
}

// Windows are rounded up to whole milliseconds and must lie between 1 ms
// and about 292 years.
func ExampleParseDuration() {
	for _, s := range []string{"1.5m", "1d", "0.25ms", "1500", "0", "-1s"} {
		d, err := limiter.ParseDuration(s)
		if err != nil {
			fmt.Printf("%q: %v\n", s, err)
			continue
		}
		fmt.Printf("%q: %v (%s)\n", s, d, limiter.FormatDuration(d))
	}
	// Output:
	// "1.5m": 1m30s (90s)
	// "1d": 24h0m0s (1d)
	// "0.25ms": 1ms (1ms)
	// "1500": 1.5s (1500ms)
	// "0": limiter: window: "0" must be at least 1ms
	// "-1s": limiter: window: "-1s" is not a duration (a number of ms, or a number with ms, s, m, h or d, e.g. 15m)
}

// A use taken for work that then did not happen is given back.
func ExampleWithRelease() {
	clock := limiter.NewFakeClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	store := limiter.NewMemory(limiter.MemoryConfig{Clock: clock})
	defer store.Close()
	ctx := limiter.WithRelease(context.Background())
	l := limiter.Limit{Uses: 1, Window: time.Minute}
	v, _ := limiter.Consume(ctx, store, "export:report-7", l)
	fmt.Println("allowed:", v.Allowed)
	// The export failed before it started: give the use back.
	if err := v.Release(ctx); err != nil {
		panic(err)
	}
	v, _ = limiter.Consume(ctx, store, "export:report-7", l)
	fmt.Println("after the release, allowed:", v.Allowed)
	// Output:
	// allowed: true
	// after the release, allowed: true
}
