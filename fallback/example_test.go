package fallback_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ringlimit/ringlimit/fallback"
	"github.com/ringlimit/ringlimit/limiter"
)

func Example() {
	// Any limiter.Store: a cluster node, Redis, PostgreSQL... Here memory.
	store := limiter.NewMemory(limiter.MemoryConfig{})

	policy, err := fallback.ParsePolicy("local") // e.g. from a flag
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := fallback.New(store, fallback.Config{
		Timeout: 100 * time.Millisecond,
		Policy:  policy,
		Share:   func() int { return 3 }, // live members of the cluster
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close(context.Background()) // closes store too

	login := limiter.Limit{Uses: 5, Window: 15 * time.Minute}
	v, err := limiter.Consume(context.Background(), s, "login:203.0.113.9", login)
	fmt.Println(v.Allowed, v.Remaining, v.Failure, err)

	_, err = fallback.ParsePolicy("open")
	fmt.Println(err)
	// Output:
	// true 4 <nil> <nil>
	// limiter: policy: "open" is not a failure policy (want deny, allow or local)
}
