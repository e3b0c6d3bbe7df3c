package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/sqlite"
)

// Three password resets per account per hour, counted in an SQLite file
// that every process on the host opens.
func Example() {
	dir, err := os.MkdirTemp("", "ringlimit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	store, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(dir, "limits.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	resets := limiter.Limit{Uses: 3, Window: time.Hour}
	for i := 1; i <= 4; i++ {
		v, err := limiter.Consume(ctx, store, "reset:bob@example.com", resets)
		if err != nil {
			log.Fatal(err)
		}
		if v.Allowed {
			fmt.Printf("reset %d sent, %d left\n", i, v.Remaining)
		} else {
			fmt.Printf("reset %d refused, retry in about %v\n", i, v.RetryAfter.Round(time.Hour))
		}
	}
	// Output:
	// reset 1 sent, 2 left
	// reset 2 sent, 1 left
	// reset 3 sent, 0 left
	// reset 4 refused, retry in about 1h0m0s
}
