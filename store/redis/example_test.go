package redis_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ringlimit/ringlimit/limiter"
	"github.com/ringlimit/ringlimit/store/redis"
)

// Open makes the go-redis client itself; the store owns it. (No Output
// line: the example needs a Redis server, so it is compiled, not run.)
func ExampleOpen() {
	s, err := redis.Open("redis://127.0.0.1:6379/0", redis.Config{
		Secret: []byte(os.Getenv("RINGLIMIT_HASH_SECRET")), // 32+ random bytes
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	login := limiter.Limit{Uses: 5, Window: 15 * time.Minute}
	v, err := limiter.Consume(context.Background(), s, "203.0.113.7", login)
	if err != nil {
		log.Fatal(err) // Redis did not answer: a fallback policy decides
	}
	if !v.Allowed {
		fmt.Println("retry after", v.RetryAfter.Round(time.Second))
	}
}

// GoRedis adapts a client the application already has; a
// *goredis.ClusterClient works the same way, and HashTag keeps a batch in
// one slot.
func ExampleGoRedis() {
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}})
	defer client.Close()
	cfg := redis.GoRedis(client) // Eval, EvalSHA, Cluster: true
	cfg.Secret = []byte(os.Getenv("RINGLIMIT_HASH_SECRET"))
	cfg.HashTag = "api"
	s, err := redis.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	v, err := s.ConsumeMany(context.Background(), []limiter.Entry{
		{Key: "user:42", Limit: limiter.Limit{Uses: 100, Window: time.Minute}},
		{Key: "org:7", Limit: limiter.Limit{Algorithm: limiter.TokenBucket, Uses: 1000, Window: time.Minute}},
	})
	fmt.Println(v.Allowed, err)
}
