package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/postgres"
)

// Five logins per user per 15 minutes, counted in PostgreSQL. It needs a
// server, so it has no Output line: go test compiles it but does not run it.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := postgres.New(ctx, postgres.Config{Pool: pool, Table: "login_limits"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	logins := limiter.Limit{Algorithm: limiter.SlidingLog, Uses: 5, Window: 15 * time.Minute}
	v, err := limiter.Consume(ctx, store, "login:alice", logins)
	if err != nil {
		log.Fatal(err)
	}
	if !v.Allowed {
		fmt.Println("too many logins; retry in", v.RetryAfter.Round(time.Second))
		return
	}
	fmt.Println("welcome;", v.Remaining, "logins left")
}
