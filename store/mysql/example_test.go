package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/mysql"
)

// A hundred API calls per second per client, as a token bucket in MySQL or
// MariaDB. It needs a server, so it has no Output line: go test compiles it
// but does not run it.
func Example() {
	db, err := sql.Open("mysql", os.Getenv("MYSQL_DSN")) // e.g. "app@tcp(db:3306)/app"
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	store, err := mysql.New(ctx, mysql.Config{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	api := limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 100, Window: time.Second}
	v, err := limiter.Consume(ctx, store, "client:42", api)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("allowed:", v.Allowed, "remaining:", v.Remaining)
}
